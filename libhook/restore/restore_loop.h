/*
 * restore_loop.h - gpushare-restore's work: bring one process back from
 * the checkpoint tier (restore if CHECKPOINTED, unlock if LOCKED) until it
 * runs, waiting for GPU memory while the driver has no room for it.
 *
 * The driver, the clock and the process' liveness come through a table,
 * so that tests/unit/test_restore.c drives the loop without a GPU.
 */
#ifndef GS_RESTORE_LOOP_H
#define GS_RESTORE_LOOP_H

#include <stddef.h>
#include <stdint.h>

/* cuda.h's values (CUprocessState, CUresult), declared here so that the
 * helper builds against headers older than the checkpoint API. */
enum {
    GS_RST_RUNNING = 0,
    GS_RST_LOCKED = 1,
    GS_RST_CHECKPOINTED = 2,
    GS_RST_FAILED = 3,
};
#define GS_RST_OUT_OF_MEMORY 2 /* CUDA_ERROR_OUT_OF_MEMORY */

/* Exit statuses of gpushare-restore. */
enum {
    GS_RST_EXIT_RUNS = 0,     /* the process runs (it did, or it was brought back) */
    GS_RST_EXIT_FAILED = 1,   /* the driver kept refusing, or reports FAILED */
    GS_RST_EXIT_USAGE = 2,    /* bad command line */
    GS_RST_EXIT_NOT_DONE = 3, /* the process is gone, or the helper was asked to stop */
};

typedef struct {
    void *ctx;
    /* The driver: a CUresult each (0 = success). */
    int (*state)(void *ctx, int pid, int *state);
    int (*restore)(void *ctx, int pid);
    int (*unlock)(void *ctx, int pid);
    /* "CUDA_ERROR_..." for rc, written into buf. */
    const char *(*error_name)(void *ctx, int rc, char *buf, size_t len);
    /* The target still exists and is the process that started at start. */
    int (*alive)(void *ctx, int pid, unsigned long long start);
    /* SIGTERM (or SIGINT) came. */
    int (*stop)(void *ctx);
    void (*nap_ms)(void *ctx, unsigned ms); /* returns early on a signal */
    /* The GPU has the memory the restore needs free now (1; also when that
     * cannot be known), or not (0): a restore that runs out of GPU memory
     * leaves the process checkpointed for good.  NULL: not asked. */
    int (*has_room)(void *ctx);
    uint64_t (*now_ms)(void *ctx);
} gs_restore_ops_t;

typedef struct {
    unsigned retry_ms;     /* between restores while the GPU has no room (1000) */
    unsigned log_every_ms; /* "still waiting" at most this often (30000) */
    unsigned tries;        /* any other error: this many tries, then give up (5) */
} gs_restore_limits_t;

#define GS_RESTORE_LIMITS_DEFAULT                                                                  \
    {                                                                                              \
        1000, 30000, 5                                                                             \
    }

/* Brings pid back; one of GS_RST_EXIT_*.  Says on stderr (gs_log) what it
 * does when the process was parked, and nothing when it already ran. */
int gs_restore_run(const gs_restore_ops_t *ops, int pid, unsigned long long start,
                   const gs_restore_limits_t *lim);

#endif
