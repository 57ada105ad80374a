/*
 * gpusim.h - the extra exports of the simulated CUDA driver (libcuda.so.1
 * built in tests/simcuda).  Tests link the simulator directly and use these
 * to steer and observe it; other programs find them with dlsym (the broker
 * recognises the simulator by looking up gpusim_is_simulated).
 */
#ifndef GPUSHARE_GPUSIM_H
#define GPUSHARE_GPUSIM_H

#ifdef __cplusplus
extern "C" {
#endif

/* Always 1: present only in the simulated driver. */
int gpusim_is_simulated(void);

/* The POSIX shared-memory name of the simulated machine this process uses
 * (GPUSHARE_SIM_NAME, default "/gpushare-sim-<uid>"). */
const char *gpusim_segment_name(void);

/* Unlinks the segment `name` (NULL: this process' segment name).  Processes
 * still attached keep using it; the next cuInit elsewhere creates a fresh
 * machine.  Returns 0, or -1 with errno set. */
int gpusim_reset(const char *name);

/* The next kernel launched by the calling thread runs `us` microseconds
 * instead of GPUSHARE_SIM_KERNEL_US (thread-local, captured at enqueue). */
void gpusim_set_next_kernel_us(unsigned long long us);

/* Nanoseconds device `dev` spent running kernels, all processes together
 * (from the shared segment; 0 if there is none or dev is invalid). */
unsigned long long
gpusim_busy_ns(int dev); /* dev: the machine's index (CUDA_VISIBLE_DEVICES aside) */

/* The same, for this process' kernels only. */
unsigned long long gpusim_process_busy_ns(int dev);

/* How many kernels hold an engine slot of device `dev` now, all processes
 * together (0 if there is no segment or dev is invalid): a test waits on it
 * to know that a kernel is running, not merely queued. */
int gpusim_kernels_running(int dev);

/* Failure injection.  The next `count` calls of `call` made by process
 * `pid` (0: any process of this segment) return `error` and change
 * nothing; `error` 0 picks CUDA_ERROR_OUT_OF_MEMORY for the calls that
 * allocate and CUDA_ERROR_UNKNOWN for the others; `count` 0 disarms.
 * Arming the same call and pid again replaces the earlier setting.  The
 * calls that can fail this way:
 *   "cuMemAlloc"      every device or managed allocation entry point
 *                     (cuMemAlloc*, cuMemAllocPitch*, cuMemAllocManaged,
 *                     cuMemAllocAsync, cuMemAllocFromPoolAsync)
 *   "cuMemcpy"        every copy entry point (cuMemcpy*, 1D/2D/3D, peer,
 *                     sync and async)
 *   "cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess",
 *   "cuMemUnmap", "cuMemExportToShareableHandle",
 *   "cuMemImportFromShareableHandle", "cuIpcGetMemHandle",
 *   "cuIpcOpenMemHandle" (both ABI versions), and
 *   "cuCheckpointProcessLock", "...Checkpoint", "...Restore", "...Unlock"
 *                     (counted in the calling process, before the target
 *                     is asked anything).
 * Armed failures stay until taken, also while no process uses the
 * segment (arm, then start the process that should fail).  Needs no
 * cuInit, but the segment named by the environment must exist.  Returns 0,
 * or -1 for an unknown call, a negative count or pid, no segment, or all
 * 16 slots in use. */
int gpusim_inject_failure(const char *call, int count, int error, int pid);

/* The same as gpusim_inject_failure("cuCheckpointProcess<Step>", count,
 * CUDA_ERROR_UNKNOWN, 0) for step "lock", "checkpoint", "restore" or
 * "unlock"; -1 for another step. */
int gpusim_inject_checkpoint_failure(const char *step, int count);

/* The simulated host's memory (GPUSHARE_SIM_HOST_MEMORY): what is charged
 * against it now, all processes of the segment together.  Dead processes'
 * charges are dropped before reading. */
struct gpusim_host_stats {
    unsigned long long limit;  /* bytes; 0: unlimited */
    unsigned long long used;   /* pinned + images */
    unsigned long long peak;   /* the most `used` has been since the machine was made */
    unsigned long long pinned; /* cuMemHostAlloc/cuMemAllocHost, host cuMemCreate */
    unsigned long long images; /* checkpoint images (device memory parked in host memory) */
    unsigned int kills;        /* processes the simulated OOM killer killed */
    int last_killed_pid;       /* 0: none */
};
/* Fills *out; 0, or -1 with no segment (needs no cuInit). */
int gpusim_host_stats(struct gpusim_host_stats *out);

#ifdef __cplusplus
}
#endif

#endif
