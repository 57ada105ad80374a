/*
 * sim_inject.c - failure injection for tests: gpusim_inject_failure arms
 * "the next N calls of <call> (by process <pid>, or any) fail with
 * <error>".  The armed slots live in the shared segment, so a test process
 * can arm failures for the program under test (or for the broker) without
 * being either.  An injected failure is returned before the entry point
 * changes anything, so the caller sees exactly what a real failure of the
 * call would leave: nothing done.
 *
 * Every API call that can be injected asks sim_inject_take first; with no
 * slot armed that is one atomic load (no segment lock on the copy path).
 */
#include "sim_internal.h"

#include <string.h>
#include <unistd.h>

/* The calls that can be made to fail, and the error they fail with when
 * the test names none: out of memory for the ones that allocate. */
static const struct {
    const char *name;
    CUresult dflt;
} calls[] = {
    {"cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY}, /* every device/managed allocation entry */
    {"cuMemAddressReserve", CUDA_ERROR_OUT_OF_MEMORY},
    {"cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY},
    {"cuMemMap", CUDA_ERROR_OUT_OF_MEMORY},
    {"cuMemSetAccess", CUDA_ERROR_UNKNOWN},
    {"cuMemUnmap", CUDA_ERROR_UNKNOWN},
    {"cuMemcpy", CUDA_ERROR_UNKNOWN}, /* every copy entry point */
    {"cuMemExportToShareableHandle", CUDA_ERROR_UNKNOWN},
    {"cuMemImportFromShareableHandle", CUDA_ERROR_OUT_OF_MEMORY},
    {"cuIpcGetMemHandle", CUDA_ERROR_UNKNOWN},
    {"cuIpcOpenMemHandle", CUDA_ERROR_OUT_OF_MEMORY}, /* both ABI versions */
    {"cuCheckpointProcessLock", CUDA_ERROR_UNKNOWN},
    {"cuCheckpointProcessCheckpoint", CUDA_ERROR_UNKNOWN},
    {"cuCheckpointProcessRestore", CUDA_ERROR_UNKNOWN},
    {"cuCheckpointProcessUnlock", CUDA_ERROR_UNKNOWN},
};

int sim_have_segment(void)
{
    return atomic_load(&sim_g.initialised) ? sim_seg != NULL : sim_shared_attach_existing() == 0;
}

CUresult sim_inject_take_locked(const char *call)
{
    if (atomic_load(&sim_seg->inject_armed) == 0)
        return CUDA_SUCCESS;
    int32_t me = (int32_t)getpid();
    for (int i = 0; i < SIM_INJECT_SLOTS; i++) {
        struct sim_inject *s = &sim_seg->inject[i];
        if (s->count > 0 && (s->pid == 0 || s->pid == me) && strcmp(s->call, call) == 0) {
            CUresult e = (CUresult)s->error;
            if (--s->count == 0) {
                memset(s, 0, sizeof *s);
                atomic_fetch_sub(&sim_seg->inject_armed, 1);
            }
            return e;
        }
    }
    return CUDA_SUCCESS;
}

CUresult sim_inject_take(const char *call)
{
    if (!sim_seg || atomic_load(&sim_seg->inject_armed) == 0)
        return CUDA_SUCCESS;
    sim_shm_lock();
    CUresult e = sim_inject_take_locked(call);
    sim_shm_unlock();
    return e;
}

SIM_EXPORT int gpusim_inject_failure(const char *call, int count, int error, int pid)
{
    if (!call || count < 0 || pid < 0 || !sim_have_segment())
        return -1;
    CUresult dflt = CUDA_SUCCESS;
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        if (strcmp(call, calls[i].name) == 0)
            dflt = calls[i].dflt;
    if (dflt == CUDA_SUCCESS)
        return -1; /* not a call that can be made to fail */
    int rc = -1;
    sim_shm_lock();
    struct sim_inject *slot = NULL, *free_slot = NULL;
    for (int i = 0; i < SIM_INJECT_SLOTS; i++) {
        struct sim_inject *s = &sim_seg->inject[i];
        if (s->count > 0 && s->pid == pid && strcmp(s->call, call) == 0)
            slot = s;
        else if (s->count == 0 && !free_slot)
            free_slot = s;
    }
    if (slot) { /* re-arming replaces the earlier setting */
        if (count == 0) {
            memset(slot, 0, sizeof *slot);
            atomic_fetch_sub(&sim_seg->inject_armed, 1);
        } else {
            slot->count = count;
            slot->error = error ? error : (int32_t)dflt;
        }
        rc = 0;
    } else if (count == 0) {
        rc = 0;
    } else if (free_slot) {
        memset(free_slot, 0, sizeof *free_slot);
        strncpy(free_slot->call, call, sizeof free_slot->call - 1);
        free_slot->pid = pid;
        free_slot->count = count;
        free_slot->error = error ? error : (int32_t)dflt;
        atomic_fetch_add(&sim_seg->inject_armed, 1);
        rc = 0;
    }
    sim_shm_unlock();
    return rc;
}
