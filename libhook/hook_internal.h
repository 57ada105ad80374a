/*
 * hook_internal.h - what the hook's source files share: cuda.h with every ABI
 * version declared, the table of interposed entry points (hook_table.def) as
 * an enum and arrays, the per-thread record, the real driver's functions the
 * hook calls itself, and the interfaces between the modules.  Nothing here is
 * exported: the library is built with -fvisibility=hidden and only
 * HOOK_EXPORT definitions (the CUDA ABI names, dlsym, gpushare_hook_*) are
 * visible.
 */
#ifndef GS_HOOK_INTERNAL_H
#define GS_HOOK_INTERNAL_H

/* cuda.h normally renames cuMemAlloc to cuMemAlloc_v2 and so on; with
 * __CUDA_API_VERSION_INTERNAL the renaming is undone and every ABI version
 * (cuMemAlloc, cuMemAlloc_v2, cuMemcpyHtoD_v2_ptds, ...) is declared with its
 * own prototype, so the compiler checks each wrapper against the exact
 * function it replaces. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
/* The one ABI version cuda.h leaves undeclared under
 * __CUDA_API_VERSION_INTERNAL (only as the target of a #define). */
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags);

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HOOK_EXPORT __attribute__((visibility("default")))
/* For code that runs inside dlsym calls made before a sanitizer runtime is
 * initialised (ASan resolves its interceptors through dlsym(RTLD_NEXT)):
 * instrumented code would touch shadow memory that does not exist yet. */
#define HOOK_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))

/* ---- the table --------------------------------------------------------- */

enum hook_class { HOOK_SUBMIT, HOOK_SYNC, HOOK_ALLOC, HOOK_FREE, HOOK_RESOLVE, HOOK_OTHER };

enum hook_idx {
#define HOOK_FN(cls, abi, base, pt, stream, params, args) HOOK_IDX_##abi,
#include "hook_table.def"
    HOOK_N
};

struct hook_entry {
    const char *abi;  /* exported name */
    const char *base; /* name given to cuGetProcAddress */
    enum hook_class cls;
    int per_thread; /* _ptsz/_ptds variant */
    void *wrapper;  /* our definition of abi */
};

extern const struct hook_entry hook_table[HOOK_N];
/* The real libcuda's address of each entry (NULL: libcuda lacks it), filled
 * by hook_init(). */
extern void *hook_real[HOOK_N];

/* Index of an ABI name, or -1. */
int hook_find_abi(const char *name);
/* Indices [*first, *first + n) of hook_sorted_by_base() share base name
 * `base`; returns n (0 when unknown). */
size_t hook_find_base(const char *base, size_t *first);
const int *hook_sorted_by_base(void);

/* The real function of entry idx (NULL when libcuda lacks it). */
void *hook_real_get(int idx);
#define HOOK_REAL_FN(abi) ((__typeof__(&abi))hook_real_get(HOOK_IDX_##abi))

/* ---- initialisation and configuration (hook_main.c, hook_real.c) ------ */

struct hook_config {
    int disabled;             /* GPUSHARE_DISABLE=1: pure pass-through */
    unsigned idle_release_ms; /* GPUSHARE_IDLE_RELEASE_MS, 0 = never */
    char session[256];        /* GPUSHARE_SESSION, "" = none */
    unsigned burst_merge_us;  /* GPUSHARE_BURST_MERGE_US */
    int bursts_off;           /* GPUSHARE_BURSTS=0 */
    int managed;              /* GPUSHARE_MEMORY=managed */
    uint64_t memory_limit;    /* GPUSHARE_MEMORY_LIMIT, 0 = none */
    unsigned make_room_ms;    /* GPUSHARE_MAKE_ROOM_TIMEOUT_MS */
};
extern struct hook_config hook_cfg;

/* Lazy, idempotent, thread-safe: finds the real driver and reads the
 * environment.  Touches no CUDA state. */
void hook_init(void);
extern _Atomic int hook_inited;
static inline void hook_ready(void)
{
    if (__builtin_expect(!atomic_load_explicit(&hook_inited, memory_order_acquire), 0))
        hook_init();
}

/* hook_real.c: the real dlsym (never glibc-private symbols), the real
 * libcuda handle and the table of real addresses. */
typedef void *(*hook_dlsym_fn)(void *, const char *);
hook_dlsym_fn hook_real_dlsym(void);
void *hook_libcuda(void); /* handle, NULL when libcuda could not be loaded */
void hook_real_load(void);

/* Real driver functions the hook calls itself (NULL where libcuda lacks
 * one); never our wrappers. */
struct hook_cuda {
    __typeof__(&cuInit) init;
    __typeof__(&cuCtxGetCurrent) ctxGetCurrent;
    __typeof__(&cuCtxSetCurrent) ctxSetCurrent;
    __typeof__(&cuCtxGetDevice) ctxGetDevice;
    __typeof__(&cuCtxGetDevice_v2) ctxGetDeviceOf;
    __typeof__(&cuCtxPushCurrent_v2) ctxPush;
    __typeof__(&cuCtxPopCurrent_v2) ctxPop;
    __typeof__(&cuStreamGetCtx) streamGetCtx;
    __typeof__(&cuStreamGetCtx_v2) streamGetCtx2;
    __typeof__(&cuStreamGetDevice) streamGetDevice;
    __typeof__(&cuStreamIsCapturing) streamIsCapturing;
    __typeof__(&cuEventCreate) eventCreate;
    __typeof__(&cuEventRecord) eventRecord;
    __typeof__(&cuEventSynchronize) eventSynchronize;
    __typeof__(&cuEventQuery) eventQuery;
    __typeof__(&cuEventDestroy_v2) eventDestroy;
    __typeof__(&cuDeviceGetCount) deviceGetCount;
    __typeof__(&cuDeviceGet) deviceGet;
    __typeof__(&cuDeviceGetUuid_v2) deviceGetUuid2;
    __typeof__(&cuDeviceGetUuid) deviceGetUuid;
    __typeof__(&cuDevicePrimaryCtxGetState) primaryCtxGetState;
    __typeof__(&cuStreamCreate) streamCreate;
    __typeof__(&cuEventElapsedTime_v2) eventElapsed;
};
extern struct hook_cuda hook_cu;

uint64_t hook_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- per-thread record (hook_thread.c) --------------------------------- */

#define HOOK_TCACHE 4

struct hook_thr {
    _Atomic int busy;     /* inside a gated submission: a drain waits for 0 */
    int nest;             /* inside a wrapper or a hook thread: calls pass straight through */
    _Atomic int captures; /* stream captures this thread began and has not ended */
    unsigned ctx_gen;     /* bumped when this thread's current context may change */
    int internal;         /* one of the hook's own threads */
    int live;             /* owned by a running thread */
    unsigned cache_next;
    _Atomic int *bflag; /* burst flag of the device of the current submission */
    struct {
        CUstream s;
        unsigned long long epoch;
        unsigned ctx_gen;
        _Atomic int *bflag;
    } cache[HOOK_TCACHE]; /* streams already marked in this epoch */
    _Atomic unsigned long long calls[HOOK_N];
    struct hook_thr *next;
};

extern __thread struct hook_thr *hook_t_self __attribute__((tls_model("initial-exec")));
struct hook_thr *hook_thr_register(void);
static inline struct hook_thr *hook_self(void)
{
    struct hook_thr *t = hook_t_self;
    return __builtin_expect(t != NULL, 1) ? t : hook_thr_register();
}
/* Single writer, so no read-modify-write: no lock prefix, no contention. */
static inline void hook_count(struct hook_thr *t, int idx)
{
    atomic_store_explicit(&t->calls[idx],
                          atomic_load_explicit(&t->calls[idx], memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
struct hook_thr *hook_thr_first(void); /* registry, for drains (never shrinks) */
unsigned long long hook_thr_calls(int idx);
void hook_thr_mark_internal(void);
void hook_thr_atfork_prepare(void);
void hook_thr_atfork_parent(void);
void hook_thr_atfork_child(void);

/* ---- devices and the gate (hook_gate.c) -------------------------------- */

enum { HOOK_GATE_CLOSED = 0, HOOK_GATE_OPEN = 1, HOOK_GATE_UNGATED = 2 };
/* CLOSED: some device this process touched is not granted; OPEN: all are
 * granted; UNGATED: no broker (or GPUSHARE_DISABLE), nothing waits. */
extern _Atomic int hook_gate_word;
extern _Atomic unsigned long long hook_track_epoch; /* bumped at each grant */
extern _Atomic int hook_activity;      /* set by submissions, cleared by the idle timer */
extern _Atomic int hook_capture_count; /* stream captures in progress */
extern _Atomic int hook_capture_want;  /* threads waiting to begin a capture */

#define HOOK_MAX_DEVICES 64
#define HOOK_UUID_LEN    48

enum hook_dev_state {
    DS_IDLE = 0,  /* touched, no grant, nobody waiting */
    DS_WANT,      /* someone waits: acquire to be sent */
    DS_REQUESTED, /* acquire sent */
    DS_GRANTED,
    DS_DRAINING /* gate closed, waiting for submitted work before release */
};
enum hook_drain_reason { DRAIN_REVOKED = 1, DRAIN_IDLE };

struct hook_dev {
    int touched;
    enum hook_dev_state state;
    char uuid[HOOK_UUID_LEN];
    long long grant_id;
    long long quantum_us;
    uint64_t granted_ns;
    unsigned long long epoch_start; /* hook_track_epoch when granted */
    enum hook_drain_reason drain_reason;
    unsigned drain_gen; /* bumped when a drain starts or is cancelled */
    int drain_pending;  /* for the helper thread */
    int waiters;
    long long acquire_seq;
    uint64_t wait_since_ns;
    int wait_warned;
    char wait_info[256]; /* from the broker's reply to acquire */
    int swapped;         /* its memory is out in host memory (swap tier): the gate
                            stays closed for it, broker or not, until it is back */
};

/* Everything below is guarded by hook_mu. */
extern pthread_mutex_t hook_mu;
extern pthread_cond_t hook_cv; /* any change of device, client or capture state */
struct hook_state {
    struct hook_dev dev[HOOK_MAX_DEVICES];
    int ndev; /* devices enumerated (uuid known) */
    int enumerated;
    int drain_syncing;  /* drains synchronising: captures and teardown wait */
    int monitor_active; /* burst monitors calling the driver: captures wait */
    int monitor_busy;   /* burst monitors holding events: teardown waits */
    int ctx_destroying; /* a context is being destroyed (or waits to be) */
};
extern struct hook_state hook_st;

void hook_gate_init(void);
/* The slow path of a submission: returns when the caller may submit (with
 * t->busy set). */
void hook_gate_slow(struct hook_thr *t, CUstream s, int pt);
/* Recomputes hook_gate_word (hook_mu held). */
void hook_gate_update_locked(void);
/* A context for device `dev` now exists: the device is gated from now on. */
void hook_touch(int dev);
struct hook_dev *hook_touch_locked(int dev);
struct hook_dev *hook_dev_by_uuid_locked(const char *uuid);
/* Starts a drain of d (hook_mu held). */
/* Close the gate of dev and start draining it; kick: hand the drain to the
 * helper thread now (else the caller runs hook_drain_now_or_later). */
void hook_drain_start_locked(int dev, enum hook_drain_reason why, int kick);
/* On the I/O thread, hook_mu not held: drain dev at once if the GPU is
 * idle, else leave it to the helper thread. */
void hook_drain_now_or_later(int dev);
void hook_gate_atfork_prepare(void);
void hook_gate_atfork_parent(void);
void hook_gate_atfork_child(void);

/* The fast path, inlined into every SUBMIT wrapper: one acquire load of the
 * gate word.  busy is set before the load; a drain closes the gate, then
 * runs membarrier() (an asymmetric fence standing in for the fence this
 * path leaves out), then waits for every busy flag to clear, so no
 * submission that saw the gate open can slip past a drain. */
void hook_track_slow(struct hook_thr *t, CUstream s, unsigned long long epoch);

/* ---- kernel bursts (hook_burst.c) -------------------------------------- */

/* Per device: QUIET (0) no burst; ACTIVE (1) set by submissions; PROBING (2)
 * the monitor cleared it and waits for its events.  The submit path loads
 * it (relaxed) and calls hook_burst_note only when it is not ACTIVE: once
 * per burst, and once per monitor probe while a burst lasts. */
enum { HOOK_BURST_QUIET = 0, HOOK_BURST_ACTIVE = 1, HOOK_BURST_PROBING = 2 };
extern _Atomic int hook_burst_flag[HOOK_MAX_DEVICES];
extern _Atomic int hook_burst_off; /* always ACTIVE: threads not being tracked point here */
void hook_burst_note(struct hook_thr *t);
static inline void hook_burst_check(struct hook_thr *t)
{
    if (__builtin_expect(atomic_load_explicit(t->bflag, memory_order_relaxed) != HOOK_BURST_ACTIVE,
                         0))
        hook_burst_note(t);
}
/* p90 and last of the device's recent (merged) bursts in us; 0 when none. */
int hook_burst_stats(int dev, long long *p90_us, long long *last_us);
int hook_burst_busy(int dev);              /* a burst is under way or being measured */
void hook_burst_forget_ctx(CUcontext ctx); /* NULL: every context */
void hook_burst_atfork_prepare(void);
void hook_burst_atfork_parent(void);
void hook_burst_atfork_child(void);
static inline CUstream hook_norm_stream(CUstream s, int pt)
{
    if (s == NULL)
        return pt ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    return s;
}
static inline int hook_stream_implicit(CUstream s)
{
    return s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}
static inline void hook_track(struct hook_thr *t, CUstream s)
{
    if (!atomic_load_explicit(&hook_activity, memory_order_relaxed))
        atomic_store_explicit(&hook_activity, 1, memory_order_relaxed);
    unsigned long long e = atomic_load_explicit(&hook_track_epoch, memory_order_relaxed);
    for (int i = 0; i < HOOK_TCACHE; i++)
        if (t->cache[i].s == s && t->cache[i].epoch == e && t->cache[i].ctx_gen == t->ctx_gen) {
            t->bflag = t->cache[i].bflag;
            hook_burst_check(t); /* a burst starts: before the call, for its start time */
            return;
        }
    hook_track_slow(t, s, e);
}
static inline void hook_submit_enter(struct hook_thr *t, CUstream s, int pt)
{
    s = hook_norm_stream(s, pt);
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    int w = atomic_load_explicit(&hook_gate_word, memory_order_acquire);
    if (__builtin_expect(w == HOOK_GATE_OPEN, 1)) {
        hook_track(t, s);
        return;
    }
    t->bflag = &hook_burst_off;
    if (w == HOOK_GATE_UNGATED)
        return;
    atomic_store_explicit(&t->busy, 0, memory_order_release);
    hook_gate_slow(t, s, pt);
}
/* The burst flag is checked again after the real call: a monitor probe that
 * cleared it while this submission was on its way into the driver recorded
 * its events before this work (the driver serialises them on the stream),
 * so this submission must mark the burst active again. */
static inline void hook_submit_leave(struct hook_thr *t)
{
    atomic_store_explicit(&t->busy, 0, memory_order_release);
    hook_burst_check(t);
}

/* ---- memory (hook_mem.c) ---------------------------------------------- */

/* A snapshot of device dev's footprint when it changed since the last one
 * (clears the change); 0 when unchanged. */
int hook_mem_take(int dev, uint64_t *used, uint64_t *managed, uint64_t *peak);
uint64_t hook_mem_changed_mask(void); /* bit d: device d changed */
/* Marks every device with a footprint as changed (a new broker). */
void hook_mem_mark_all(void);
void hook_mem_forget_ctx(CUcontext ctx);
void hook_mem_atfork_prepare(void);
void hook_mem_atfork_parent(void);
void hook_mem_atfork_child(void);

/* ---- contexts, streams, devices (hook_cuctx.c) ------------------------- */

/* Device and context of stream s (already normalised). 0, or -1. */
int hook_stream_where(CUstream s, CUcontext *ctx, int *dev);
int hook_stream_capturing(CUstream s);
void hook_ctx_note(CUcontext ctx, int dev, int primary);
int hook_ctx_device(CUcontext ctx);
CUcontext hook_ctx_primary(int dev);
void hook_ctx_forget(CUcontext ctx);
/* Enumerates the devices' UUIDs once the driver is initialised. */
void hook_devices_enumerate(void);
void hook_cuctx_atfork_prepare(void);
void hook_cuctx_atfork_parent(void);
void hook_cuctx_atfork_child(void);

/* ---- streams that received work (hook_streams.c) ----------------------- */

extern pthread_mutex_t hook_smu;
/* Records an event on every stream of `dev` marked since `since` and waits
 * for them all. */
/* Record an event on every stream of dev that got work since `since` and
 * wait for them; without may_block, spin briefly and return 0 when they are
 * not all complete yet.  Returns 1 when drained. */
int hook_streams_drain(int dev, unsigned long long since, int may_block);
struct hook_ev {
    CUcontext ctx;
    CUevent ev;
};
/* get: an event of ctx (current on the calling thread), NULL on failure. */
struct hook_ev *hook_streams_record(int dev, unsigned long long since, size_t *n,
                                    CUevent (*get)(int dev, CUcontext ctx));
void hook_streams_forget_stream(CUstream s); /* hook_smu held */
void hook_streams_forget_ctx(CUcontext ctx);
void hook_streams_forget_green(CUgreenCtx g);
void hook_streams_atfork_prepare(void);
void hook_streams_atfork_parent(void);
void hook_streams_atfork_child(void);

/* ---- capture (hook_capture.c) ------------------------------------------ */

/* Waits until no drain is synchronising (hook_mu held by the callers). */
void hook_wait_no_drain_locked(void);
void hook_capture_atfork_child(void);
void hook_capture_forget_stream(CUstream s);

/* ---- drains (hook_drain.c) --------------------------------------------- */

/* Wakes (starting it if needed) the helper thread that drains devices. */
void hook_helper_kick_locked(void);
void hook_drain_atfork_child(void);

/* ---- the broker (hook_client.c) ---------------------------------------- */

enum hook_client_state {
    CS_NONE = 0,   /* not started (no device touched yet) */
    CS_CONNECTING, /* first attempt: submissions wait (at most ~200 ms) */
    CS_READY,      /* welcome received: gated */
    CS_UNGATED,    /* no broker: running ungated, reconnecting in the background */
    CS_STOPPED     /* exiting */
};
extern enum hook_client_state hook_client_state; /* hook_mu */
/* Starts the I/O thread once a device is touched. */
void hook_client_start(void);
/* Wakes the I/O thread (acquires to send, releases queued). */
void hook_client_kick(void);
/* Queues a release (hook_mu held). */
void hook_client_release_locked(struct hook_dev *d, const char *reason);
void hook_client_stop(void); /* at exit: releases, bounded wait */
/* Asks the broker to make room for `bytes` on dev and waits at most
 * timeout_ms for its answer (hook_mu not held by the caller, nor while
 * waiting).  1: room made, retry; 0: refused (reason filled), timed out or
 * no broker. */
int hook_client_make_room(int dev, uint64_t bytes, unsigned timeout_ms, char *reason,
                          size_t reason_len);
void hook_client_atfork_child(void);
const char *hook_client_ipc_path(void);

/* ---- fork (hook_fork.c) ------------------------------------------------ */
void hook_fork_register(void);

#endif
