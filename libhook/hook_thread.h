/*
 * hook_thread.h - the per-thread record: what the submission fast path
 * needs without locks or libc calls (hook_submit.h), and the registry of
 * records a drain walks.
 */
#ifndef GS_HOOK_THREAD_H
#define GS_HOOK_THREAD_H

#include "hook_cuda.h"
#include "hook_table.h"

#include <stdatomic.h>

/* The stream cache: the streams this thread already marked in the current
 * grant (hook_gate_epoch) and context generation, each with its device's
 * burst flag.  A small hash table (hook_submit.h): a stream's home slot is
 * a hash of its handle, and it lies within HOOK_TCACHE_PROBES slots after
 * it.  An entry of another epoch or context generation counts as empty,
 * so a grant or a context switch empties the cache without touching it. */
#define HOOK_TCACHE_BITS   6
#define HOOK_TCACHE        (1u << HOOK_TCACHE_BITS)
#define HOOK_TCACHE_PROBES 4

/* Half a cache line: one lookup reads one line. */
struct hook_tcache_entry {
    _Alignas(32) CUstream s;
    unsigned long long epoch;
    _Atomic int *bflag;
    unsigned ctx_gen;
};

/* Allocated on a cache line of its own; the fields a submission reads come
 * first. */
struct hook_thr {
    _Alignas(HOOK_CACHE_LINE) _Atomic int busy; /* inside a gated submission: a drain waits for 0 */
    int nest;             /* inside a wrapper or a hook thread: calls pass straight through */
    _Atomic int captures; /* stream captures this thread began and has not ended */
    unsigned ctx_gen;     /* bumped when this thread's current context may change */
    _Atomic int *bflag;   /* burst flag of the device of the current submission */
    int internal;         /* one of the hook's own threads */
    int live;             /* owned by a running thread */
    struct hook_thr *next;
    struct hook_tcache_entry cache[HOOK_TCACHE];
    _Atomic unsigned long long calls[HOOK_N];
};

/* Initial-exec TLS: a %fs-relative load, no __tls_get_addr (the hook is
 * preloaded, so static TLS is available). */
extern __thread struct hook_thr *hook_thread_tls __attribute__((tls_model("initial-exec")));
struct hook_thr *hook_thread_register(void);
static inline struct hook_thr *hook_thread_self(void)
{
    struct hook_thr *t = hook_thread_tls;
    return __builtin_expect(t != NULL, 1) ? t : hook_thread_register();
}
/* Single writer, so no read-modify-write: no lock prefix, no contention. */
static inline void hook_thread_count(struct hook_thr *t, int idx)
{
    atomic_store_explicit(&t->calls[idx],
                          atomic_load_explicit(&t->calls[idx], memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
struct hook_thr *hook_thread_first(void); /* registry, for drains (never shrinks) */
unsigned long long hook_thread_calls(int idx);
void hook_thread_mark_internal(void);
/* Starts one of the hook's own threads: detached, with every signal
 * blocked (the program's signals stay the program's).  0, or an errno
 * value; main begins with hook_thread_mark_internal(). */
int hook_thread_spawn(void *(*main)(void *), void *arg);
void hook_thread_atfork_prepare(void);
void hook_thread_atfork_parent(void);
void hook_thread_atfork_child(void);

#endif
