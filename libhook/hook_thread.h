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
    } cache[HOOK_TCACHE]; /* streams already marked in this epoch (hook_submit.h) */
    _Atomic unsigned long long calls[HOOK_N];
    struct hook_thr *next;
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
