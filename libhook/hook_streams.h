/*
 * hook_streams.h - the streams that received work since a grant, and
 * events recorded on them: what a drain waits for and what a burst probe
 * measures.
 */
#ifndef GS_HOOK_STREAMS_H
#define GS_HOOK_STREAMS_H

#include "hook_cuda.h"

#include <pthread.h>
#include <stddef.h>

/* Guards the set of streams; held by cuStreamDestroy's wrapper across the
 * real call, so that nothing is recorded on a stream being destroyed. */
extern pthread_mutex_t hook_streams_mu;

/* Marks stream s (normalised) as having work in epoch and gives its device.
 * 0, or -1 when its context or device cannot be found.  Calls the real
 * driver the first time a stream is seen. */
int hook_streams_mark(CUstream s, unsigned long long epoch, int *dev);

/* Records an event on every stream of dev marked since `since` and waits
 * for them; without may_block, spins briefly and returns 0 when they are
 * not all complete yet.  Returns 1 when drained. */
int hook_streams_drain(int dev, unsigned long long since, int may_block);

struct hook_streams_ev {
    CUcontext ctx;
    CUevent ev;
};
/* One event of get's on every stream of dev marked since `since` (get: an
 * event of ctx, current on the calling thread; NULL on failure).  Returns
 * them (malloc'ed, *n of them) for the caller to wait on and release. */
struct hook_streams_ev *hook_streams_record(int dev, unsigned long long since, size_t *n,
                                            CUevent (*get)(int dev, CUcontext ctx));

void hook_streams_forget_stream(CUstream s); /* hook_streams_mu held */
void hook_streams_forget_ctx(CUcontext ctx);
void hook_streams_forget_green(CUgreenCtx g);
void hook_streams_atfork_prepare(void);
void hook_streams_atfork_parent(void);
void hook_streams_atfork_child(void);

#endif
