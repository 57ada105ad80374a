/*
 * move_probe.c - can the driver restore a checkpointed process onto another
 * GPU (cuCheckpointProcessRestore with CUcheckpointRestoreArgs.gpuPairs,
 * CUDA 13), and what does the process see afterwards?  Issue 18, on a
 * machine with two GPUs of one model.
 *
 *   move_probe [MIB] [visible|all]
 *
 * Starts itself as a child ("move_probe child MIB") that allocates MIB of
 * device memory on its device 0, fills it with a pattern and waits; the
 * parent locks, checkpoints, restores the child with the pair
 * (GPU 0 -> GPU 1) and unlocks it, then asks it to check its memory, to
 * name the GPU it runs on now, and to allocate and copy again.  "visible":
 * the child sees GPU 0 only (CUDA_VISIBLE_DEVICES=its UUID, as gpushare's
 * placement sets it); "all": it sees both.  Prints one JSON line per step
 * and a summary; exit status 0 when the data came back intact on GPU 1.
 * Driver API only (no kernels), so one binary serves any GPU.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *err_name(CUresult r)
{
    const char *n = NULL;
    cuGetErrorName(r, &n);
    return n ? n : "?";
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            printf("{\"error\":\"%s: %s\"}\n", #call, err_name(r_));                               \
            fflush(stdout);                                                                        \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static void uuid_text(const CUuuid *u, char *out)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    sprintf(out,
            "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
            b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
            b[15]);
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)((i * 7 + (i >> 12) * 13) & 0xff);
}

/* ---- the child: memory on its device 0, checked on request --------------- */

static int child(size_t mib)
{
    CK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    size_t n = mib << 20;
    CUdeviceptr p;
    CK(cuMemAlloc(&p, n));
    unsigned char *h = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = pattern(i);
    CK(cuMemcpyHtoD(p, h, n));
    CK(cuCtxSynchronize());
    CUuuid u;
    char us[64];
    CK(cuDeviceGetUuid(&u, dev));
    uuid_text(&u, us);
    printf("{\"child\":\"ready\",\"pid\":%d,\"uuid\":\"%s\",\"ptr\":\"0x%llx\"}\n", getpid(), us,
           (unsigned long long)p);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    memset(h, 0, n);
    double t0 = now_s();
    CUresult r = cuMemcpyDtoH(h, p, n);
    double t1 = now_s();
    size_t bad = n;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
        if (h[i] != pattern(i)) {
            bad = i;
            break;
        }
    CK(cuDeviceGetUuid(&u, dev));
    uuid_text(&u, us);
    size_t fr = 0, tot = 0;
    cuMemGetInfo(&fr, &tot);
    /* Still usable: a new allocation, a copy into it and back. */
    CUdeviceptr q;
    CUresult r2 = cuMemAlloc(&q, 1 << 20);
    if (r2 == CUDA_SUCCESS)
        r2 = cuMemcpyDtoD(q, p, 1 << 20);
    if (r2 == CUDA_SUCCESS)
        r2 = cuCtxSynchronize();
    printf("{\"child\":\"checked\",\"copy\":\"%s\",\"intact\":%s,\"first_bad\":%zd,"
           "\"uuid_now\":\"%s\",\"free_mib\":%zu,\"new_alloc_copy\":\"%s\",\"dtoh_s\":%.3f}\n",
           err_name(r), r == CUDA_SUCCESS && bad == n ? "true" : "false",
           bad == n ? (ssize_t)-1 : (ssize_t)bad, us, fr >> 20, err_name(r2), t1 - t0);
    fflush(stdout);
    return r == CUDA_SUCCESS && bad == n ? 0 : 1;
}

/* ---- the parent: checkpoint, restore onto GPU 1, unlock -------------------- */

static void smi(const char *when)
{
    printf("{\"nvidia_smi\":\"%s\"}\n", when);
    fflush(stdout);
    if (system("nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader "
               "2>&1 | sed 's/^/  smi: /'") != 0)
        printf("  smi: (nvidia-smi failed)\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "child") == 0)
        return child((size_t)atol(argv[2]));
    size_t mib = argc >= 2 ? (size_t)atol(argv[1]) : 1024;
    int visible = !(argc >= 3 && strcmp(argv[2], "all") == 0);
    CK(cuInit(0));
    int n = 0;
    CK(cuDeviceGetCount(&n));
    if (n < 2) {
        printf("{\"error\":\"this machine shows %d GPU(s); a move needs two\"}\n", n);
        return 3;
    }
    CUuuid u0, u1;
    CUdevice d0, d1;
    CK(cuDeviceGet(&d0, 0));
    CK(cuDeviceGet(&d1, 1));
    CK(cuDeviceGetUuid(&u0, d0));
    CK(cuDeviceGetUuid(&u1, d1));
    char s0[64], s1[64], name0[128], name1[128];
    uuid_text(&u0, s0);
    uuid_text(&u1, s1);
    CK(cuDeviceGetName(name0, sizeof name0, d0));
    CK(cuDeviceGetName(name1, sizeof name1, d1));
    printf("{\"gpu0\":\"%s\",\"gpu1\":\"%s\",\"name0\":\"%s\",\"name1\":\"%s\",\"mib\":%zu,"
           "\"child_sees\":\"%s\"}\n",
           s0, s1, name0, name1, mib, visible ? "GPU 0 only" : "both");
    fflush(stdout);

    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child))
        return 4;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[1]);
        close(from_child[0]);
        if (visible)
            setenv("CUDA_VISIBLE_DEVICES", s0, 1);
        char arg[32];
        snprintf(arg, sizeof arg, "%zu", mib);
        execl("/proc/self/exe", argv[0], "child", arg, (char *)NULL);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    FILE *in = fdopen(from_child[0], "r");
    FILE *out = fdopen(to_child[1], "w");
    char line[512];
    if (!fgets(line, sizeof line, in)) {
        printf("{\"error\":\"the child said nothing\"}\n");
        return 5;
    }
    fputs(line, stdout);
    smi("before");

    int rc = 1;
    double t0 = now_s();
    CUcheckpointLockArgs la;
    memset(&la, 0, sizeof la);
    la.timeoutMs = 10000;
    CUresult r = cuCheckpointProcessLock(pid, &la);
    double t1 = now_s();
    if (r == CUDA_SUCCESS)
        r = cuCheckpointProcessCheckpoint(pid, NULL);
    double t2 = now_s();
    printf("{\"step\":\"lock+checkpoint\",\"result\":\"%s\",\"lock_s\":%.3f,\"checkpoint_s\":%.3f}\n",
           err_name(r), t1 - t0, t2 - t1);
    fflush(stdout);
    if (r != CUDA_SUCCESS)
        goto out;
    smi("checkpointed");
    /* The pairs the driver might want: GPU 0 onto GPU 1 alone; the broker's
     * form (park_move.c: the swap 0 <-> 1 and every other GPU onto itself,
     * so every GPU of the machine once as old and once as new); the swap
     * alone (the same as the broker's form on two GPUs). */
    enum { MAXG = 16 };
    CUuuid all[MAXG];
    int ng = n < MAXG ? n : MAXG;
    for (int k = 0; k < ng; k++) {
        CUdevice dk;
        CK(cuDeviceGet(&dk, k));
        CK(cuDeviceGetUuid(&all[k], dk));
    }
    CUcheckpointGpuPair tries[3][MAXG];
    unsigned counts[3] = {1, (unsigned)ng, 2};
    tries[0][0] = (CUcheckpointGpuPair){u0, u1};
    for (int k = 0; k < ng; k++)
        tries[1][k] = (CUcheckpointGpuPair){all[k], k == 0 ? all[1] : k == 1 ? all[0] : all[k]};
    tries[2][0] = (CUcheckpointGpuPair){u0, u1};
    tries[2][1] = (CUcheckpointGpuPair){u1, u0};
    const char *names[3] = {"0->1", "0<->1 and the others onto themselves",
                            "0<->1 only"};
    r = CUDA_ERROR_UNKNOWN;
    int moved_by = -1;
    for (int k = 0; k < 3 && r != CUDA_SUCCESS; k++) {
        CUcheckpointRestoreArgs ra;
        memset(&ra, 0, sizeof ra);
        ra.gpuPairs = tries[k];
        ra.gpuPairsCount = counts[k];
        double t3 = now_s();
        r = cuCheckpointProcessRestore(pid, &ra);
        double t4 = now_s();
        printf("{\"step\":\"restore with pairs %s\",\"result\":\"%s\",\"restore_s\":%.3f,"
               "\"gbps\":%.2f}\n",
               names[k], err_name(r), t4 - t3,
               r == CUDA_SUCCESS ? (double)(mib << 20) / (t4 - t3) / 1e9 : 0.0);
        fflush(stdout);
        if (r == CUDA_SUCCESS)
            moved_by = k;
    }
    if (r != CUDA_SUCCESS) {
        /* Where the driver refuses, the process must still come back. */
        double t5 = now_s();
        CUresult r2 = cuCheckpointProcessRestore(pid, NULL);
        printf("{\"step\":\"restore in place after the refusals\",\"result\":\"%s\",\"s\":%.3f}\n",
               err_name(r2), now_s() - t5);
        fflush(stdout);
        if (r2 != CUDA_SUCCESS)
            goto out;
    }
    printf("{\"restored_by\":\"%s\"}\n", moved_by >= 0 ? names[moved_by] : "none (in place)");
    CUresult ru = cuCheckpointProcessUnlock(pid, NULL);
    printf("{\"step\":\"unlock\",\"result\":\"%s\"}\n", err_name(ru));
    fflush(stdout);
    smi("restored");
    fprintf(out, "check\n");
    fflush(out);
    if (fgets(line, sizeof line, in)) {
        fputs(line, stdout);
        int moved = strstr(line, s1) != NULL;
        int intact = strstr(line, "\"intact\":true") != NULL;
        printf("{\"summary\":{\"moved_to_gpu1\":%s,\"intact\":%s}}\n", moved ? "true" : "false",
               intact ? "true" : "false");
        rc = r == CUDA_SUCCESS && intact ? 0 : 1;
    }
out:
    fflush(stdout);
    fclose(out);
    int st;
    alarm(30);
    waitpid(pid, &st, 0);
    return rc;
}
