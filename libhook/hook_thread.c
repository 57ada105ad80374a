/*
 * hook_thread.c - one record per thread that enters the hook.
 *
 * The record holds what the fast path needs without locks or libc calls:
 * the busy flag a drain waits on, the re-entrancy depth, the stream cache
 * and per-entry-point call counters (single writer, so plain relaxed stores).
 * It is reached through an initial-exec TLS pointer (a %fs-relative load,
 * no __tls_get_addr): the hook is preloaded, so static TLS is available.
 * Records are never freed, only recycled when their thread exits (a
 * pthread key destructor), so a drain can walk the list without a lock.
 */
#include "hook_thread.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

__thread struct hook_thr *hook_thread_tls __attribute__((tls_model("initial-exec")));

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct hook_thr *) reg_head;
static unsigned long long retired[HOOK_N]; /* counts of exited threads (reg_mu) */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
/* Used only if allocation fails: shared, so counts and busy flags are
 * coarse, but the program keeps running. */
static struct hook_thr emergency = {.live = 1};

static void thr_exit(void *p)
{
    struct hook_thr *t = p;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < HOOK_N; i++) {
        retired[i] += atomic_load_explicit(&t->calls[i], memory_order_relaxed);
        atomic_store_explicit(&t->calls[i], 0, memory_order_relaxed);
    }
    atomic_store_explicit(&t->busy, 0, memory_order_release);
    t->nest = t->internal = 0;
    atomic_store_explicit(&t->captures, 0, memory_order_relaxed);
    memset(t->cache, 0, sizeof t->cache);
    t->live = 0;
    pthread_mutex_unlock(&reg_mu);
    hook_thread_tls = NULL;
}

static void make_key(void)
{
    if (pthread_key_create(&exit_key, thr_exit) != 0)
        exit_key = (pthread_key_t)-1;
}

struct hook_thr *hook_thread_register(void)
{
    pthread_once(&key_once, make_key);
    pthread_mutex_lock(&reg_mu);
    struct hook_thr *t;
    for (t = atomic_load_explicit(&reg_head, memory_order_relaxed); t; t = t->next)
        if (!t->live)
            break;
    if (!t) {
        /* On a cache line of its own (calloc aligns to 16 bytes only). */
        t = aligned_alloc(_Alignof(struct hook_thr), sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&reg_mu);
            return &emergency;
        }
        memset(t, 0, sizeof *t);
        t->next = atomic_load_explicit(&reg_head, memory_order_relaxed);
        atomic_store_explicit(&reg_head, t, memory_order_release);
    }
    t->live = 1;
    pthread_mutex_unlock(&reg_mu);
    hook_thread_tls = t;
    if (exit_key != (pthread_key_t)-1)
        pthread_setspecific(exit_key, t);
    return t;
}

struct hook_thr *hook_thread_first(void)
{
    return atomic_load_explicit(&reg_head, memory_order_acquire);
}

unsigned long long hook_thread_calls(int idx)
{
    pthread_mutex_lock(&reg_mu);
    unsigned long long n = retired[idx];
    for (struct hook_thr *t = hook_thread_first(); t; t = t->next)
        n += atomic_load_explicit(&t->calls[idx], memory_order_relaxed);
    n += atomic_load_explicit(&emergency.calls[idx], memory_order_relaxed);
    pthread_mutex_unlock(&reg_mu);
    return n;
}

/* The hook's own threads: every CUDA call they make goes straight to the
 * driver, and drains do not wait for them. */
void hook_thread_mark_internal(void)
{
    struct hook_thr *t = hook_thread_self();
    t->internal = 1;
    t->nest = 1;
}

int hook_thread_spawn(void *(*main)(void *), void *arg)
{
    pthread_t th;
    pthread_attr_t a;
    sigset_t all, old;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&th, &a, main, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    return r;
}

void hook_thread_atfork_prepare(void)
{
    pthread_mutex_lock(&reg_mu);
}

void hook_thread_atfork_parent(void)
{
    pthread_mutex_unlock(&reg_mu);
}

/* Only the forking thread exists in the child: every other record is
 * recycled (its counts kept), and nobody is busy. */
void hook_thread_atfork_child(void)
{
    pthread_mutex_init(&reg_mu, NULL);
    struct hook_thr *self = hook_thread_tls;
    for (struct hook_thr *t = hook_thread_first(); t; t = t->next) {
        atomic_store_explicit(&t->busy, 0, memory_order_relaxed);
        if (t == self)
            continue;
        for (int i = 0; i < HOOK_N; i++) {
            retired[i] += atomic_load_explicit(&t->calls[i], memory_order_relaxed);
            atomic_store_explicit(&t->calls[i], 0, memory_order_relaxed);
        }
        t->nest = t->internal = 0;
        atomic_store_explicit(&t->captures, 0, memory_order_relaxed);
        t->live = 0;
    }
    if (self) {
        atomic_store_explicit(&self->captures, 0, memory_order_relaxed);
        memset(self->cache, 0, sizeof self->cache);
    }
}
