/*
 * hook_swap_thread.c - the swap thread (hook_swap.h): the broker's
 * swap_out and swap_in queued and carried out one at a time on a thread of
 * its own, a later command taking over or calling off an earlier one, the
 * broker's chunks fetched and mapped as a move needs them, and memory
 * brought back by itself when the broker is gone.  The engine is
 * hook_swap.c's.
 */
#define _GNU_SOURCE
#include "hook_cuda.h" /* first: it sets how cuda.h declares the ABI */

#include "hook_swap.h"
#include "hook_swap_thread.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_assert.h"
#include "log.h"
#include "swap_engine.h"
#include "swap_fetch.h"

#define MAX_DEVS           64
#define MAX_CHUNKS         4096
#define FETCH_MS           5000
#define GS_SWAP_RETURN_MAX 256 /* positions per early return (pool_socket.h) */
#define SWAP_IN_WAIT_MS                                                                            \
    30000 /* the other side of a switch frees memory meanwhile (the                                \
           * broker's swap_in says how long, from what is leaving) */

struct command {
    int dev, out;   /* dev -1: bring every GPU back (hook_swap_recover) */
    uint64_t lease; /* a later swap_in taken over may change it (mu) */
    uint64_t bytes; /* swap out: this much, the rest stays (0: all) */
    unsigned wait_ms;
    int no_wait; /* a swap_out came after this swap_in: no waiting for memory (mu) */
    char pool[108];
    hook_swap_done_fn done;
    void (*recovered)(void);
    struct command *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the queue, windows, busy flags */
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct command *queue_head, *queue_tail;
static int recover_queued; /* a hook_swap_recover waits in the queue or runs */
static void enqueue_locked(struct command *c);
static int thread_started;
static gs_swap_window_t window[MAX_DEVS];
/* The lease each window's chunks are from: a partial park parked further
 * fetches that lease's other chunks as it needs them (0: a window a
 * broker that is gone lent, or none). */
static uint64_t window_lease[MAX_DEVS];
static int busy[MAX_DEVS];
/* The command the swap thread runs for each GPU, and until when a swap in
 * there waits for memory (moved by later commands: hook_swap_command). */
static struct command *under_way[MAX_DEVS];
static int64_t in_deadline[MAX_DEVS];
/* A swap in under way, for the notebook's wait line. */
static struct {
    int running;
    uint64_t done, total;
} coming[MAX_DEVS];

void hook_swap_thread_atfork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
    queue_head = queue_tail = NULL;
    thread_started = 0;
    memset(window, 0, sizeof window);
    memset(busy, 0, sizeof busy);
    memset(under_way, 0, sizeof under_way);
    memset(coming, 0, sizeof coming);
}

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* A relay's chunks come while the session on the other side of the switch
 * frees them: asked for in rounds of this long, until the command's wait. */
#define RELAY_ROUND_MS 500
/* Chunks mapped when the window opens; the rest are mapped as the copies
 * go (cuMemSetAccess on host memory costs ~10 ms per GiB on the H200:
 * 0.3 s for 32 GiB before the first copy could start). */
#define FIRST_MAPPED 2

struct relay {
    const struct command *c;
    int64_t until;      /* gs_swap_deadline's clock */
    int *fds, nfds;     /* fetched, not mapped yet (closed by run_out) */
    int next;           /* the first of them not mapped */
    int may_fetch;      /* the window is this lease's (not one kept from before) */
    const char *coming; /* what the chunks wait for, for the error */
};

/* Maps up to n of the chunks at hand. */
static int map_at_hand(struct relay *r, gs_swap_window_t *w, int n, char *err, size_t errlen)
{
    if (n > r->nfds - r->next)
        n = r->nfds - r->next;
    if (n <= 0)
        return 0;
    if (gs_swap_window_extend(hook_swap_driver(), w, r->fds + r->next, n, err, errlen) != 0)
        return -1;
    r->next += n;
    return 0;
}

/* The engine needs the window mapped up to `upto`: the chunks at hand
 * first, one at a time (their mapping overlaps the copies in flight); then,
 * if it may wait, what the lease has grown by, fetched and mapped, within
 * the command's wait. */
static int more_chunks(void *arg, gs_swap_window_t *w, uint64_t upto, int wait, char *err,
                       size_t errlen)
{
    static int fds[MAX_CHUNKS];
    struct relay *r = arg;
    while (gs_swap_window_mapped_bytes(w) < upto && r->next < r->nfds)
        if (map_at_hand(r, w, 1, err, errlen) != 0)
            return -1;
    if (gs_swap_window_mapped_bytes(w) >= upto)
        return 0;
    if (!wait)
        return 1;
    if (!r->may_fetch) {
        snprintf(err, errlen,
                 "the host window kept from before holds %zu bytes, the GPU's ranges need %llu",
                 gs_swap_window_mapped_bytes(w), (unsigned long long)upto);
        return -1;
    }
    while (gs_swap_window_mapped_bytes(w) < upto) {
        if (gs_swap_deadline(0) >= r->until) {
            snprintf(err, errlen, "%s did not come in %u ms", r->coming, r->c->wait_ms);
            return -1;
        }
        uint64_t chunk_bytes = 0;
        int want = 0;
        int n = gs_swap_fetch_from(r->c->pool, r->c->lease, w->mapped, RELAY_ROUND_MS, fds,
                                   MAX_CHUNKS, &chunk_bytes, &want, FETCH_MS, err, errlen);
        if (n < 0)
            return -1;
        if (n > 0 && chunk_bytes != w->chunk_bytes) {
            close_fds(fds, n);
            snprintf(err, errlen, "the pool's chunk size changed");
            return -1;
        }
        int rc = n > 0 ? gs_swap_window_extend(hook_swap_driver(), w, fds, n, err, errlen) : 0;
        close_fds(fds, n);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static void run_out(const struct command *c, hook_swap_report_t *rep)
{
    static int fds[MAX_CHUNKS];
    uint64_t chunk_bytes = 0;
    int n = 0;
    struct relay relay = {c,
                          gs_swap_deadline(c->wait_ms),
                          fds,
                          0,
                          0,
                          0,
                          "host memory for the switch (the session coming in did not free it)"};
    pthread_mutex_lock(&mu);
    int have_window = window[c->dev].va != 0;
    /* Parked in part, and now the rest: the chunks not mapped yet are
     * fetched from the same lease as the copies need them. */
    if (have_window && c->lease && window_lease[c->dev] == c->lease)
        relay.may_fetch = 1;
    pthread_mutex_unlock(&mu);
    if (!have_window) {
        int want = 0;
        n = gs_swap_fetch_from(c->pool, c->lease, 0, RELAY_ROUND_MS, fds, MAX_CHUNKS, &chunk_bytes,
                               &want, FETCH_MS, rep->error, sizeof rep->error);
        if (n < 0)
            return;
        gs_swap_window_t w;
        int first = n < FIRST_MAPPED ? n : FIRST_MAPPED;
        int rc = gs_swap_window_open_part(hook_swap_driver(), c->dev, fds, first, want, chunk_bytes,
                                          &w, rep->error, sizeof rep->error);
        if (rc != 0) {
            close_fds(fds, n);
            return;
        }
        relay.nfds = n;
        relay.next = first;
        relay.may_fetch = 1;
        pthread_mutex_lock(&mu);
        window[c->dev] = w;
        window_lease[c->dev] = c->lease;
        pthread_mutex_unlock(&mu);
        if (n < want)
            gs_info("swap out on GPU %d: %d of %d chunks of host memory now, the rest as the "
                    "session coming in frees them",
                    c->dev, n, want);
    }
    gs_swap_result_t res;
    gs_swap_calls_t calls = {NULL, more_chunks, NULL, &relay};
    rep->ok = gs_swap_move(hook_swap_engine(), c->dev, &window[c->dev], 1, c->bytes, NULL, &calls,
                           &res) == 0;
    close_fds(fds, n); /* imported (the mappings hold the memory) or not needed */
    rep->bytes = res.bytes;
    rep->elapsed_us = res.elapsed_ns / 1000;
    if (!rep->ok)
        snprintf(rep->error, sizeof rep->error, "%s", res.error);
    uint64_t resident = 0, parked = 0;
    gs_swap_ranges_totals(hook_swap_ranges(), c->dev, &resident, &parked);
    if (parked == 0) { /* nothing went out: the memory goes back to the pool */
        pthread_mutex_lock(&mu);
        gs_swap_window_close(hook_swap_driver(), &window[c->dev]);
        window_lease[c->dev] = 0;
        pthread_mutex_unlock(&mu);
    }
}

/* Swap in: positions whose data is back are unmapped and their chunks go
 * back to the pool at once, for the session going out on the other side
 * of a switch (it fills them meanwhile).  A failed return costs nothing:
 * the chunks go back with the rest of the lease. */
static void chunks_back(void *arg, gs_swap_window_t *w, const int *positions, int n)
{
    const struct command *c = ((const struct relay *)arg)->c;
    for (int i = 0; i < n; i++)
        gs_swap_window_drop(hook_swap_driver(), w, positions[i]);
    if (!c->lease || !c->pool[0])
        return; /* lent by a broker that is gone: nobody to return them to */
    char err[200];
    for (int i = 0; i < n; i += GS_SWAP_RETURN_MAX) {
        int k = n - i < GS_SWAP_RETURN_MAX ? n - i : GS_SWAP_RETURN_MAX;
        if (gs_swap_return(c->pool, c->lease, positions + i, k, FETCH_MS, err, sizeof err) != 0) {
            gs_debug("returning %d chunks of lease %llu early: %s", k, (unsigned long long)c->lease,
                     err);
            return;
        }
    }
}

static void in_progress(void *arg, uint64_t done, uint64_t total)
{
    const struct command *c = ((const struct relay *)arg)->c;
    pthread_mutex_lock(&mu);
    coming[c->dev].done = done;
    if (total > coming[c->dev].total)
        coming[c->dev].total = total;
    pthread_mutex_unlock(&mu);
}

static void run_in(const struct command *c, hook_swap_report_t *rep)
{
    pthread_mutex_lock(&mu);
    gs_swap_window_t w = window[c->dev];
    pthread_mutex_unlock(&mu);
    if (!w.va) { /* nothing parked here */
        rep->ok = 1;
        return;
    }
    /* Hollowed for the disk tier (swap_drop): the chunks of this swap_in's
     * lease are mapped from position 0 as the broker reads them back from
     * the disk, and the copies follow them. */
    int hollow = gs_swap_window_is_hollow(&w);
    if (hollow && (!c->lease || !c->pool[0])) {
        snprintf(rep->error, sizeof rep->error,
                 "GPU %d's memory is on the broker's disk: it comes back through the broker",
                 c->dev);
        return;
    }
    struct relay relay = {c,      gs_swap_deadline(c->wait_ms),      NULL, 0, 0,
                          hollow, "memory coming back from the disk"};
    if (hollow) {
        pthread_mutex_lock(&mu);
        window_lease[c->dev] = c->lease;
        pthread_mutex_unlock(&mu);
    }
    uint64_t resident = 0, parked = 0;
    gs_swap_ranges_totals(hook_swap_ranges(), c->dev, &resident, &parked);
    pthread_mutex_lock(&mu);
    coming[c->dev].running = 1;
    coming[c->dev].done = 0;
    coming[c->dev].total = parked;
    pthread_mutex_unlock(&mu);
    gs_swap_result_t res;
    gs_swap_calls_t calls = {in_progress, hollow ? more_chunks : NULL, chunks_back, &relay};
    rep->ok =
        gs_swap_move(hook_swap_engine(), c->dev, &w, 0, 0, &in_deadline[c->dev], &calls, &res) == 0;
    pthread_mutex_lock(&mu);
    coming[c->dev].running = 0;
    window[c->dev] = w; /* chunks mapped (hollow) or given back early meanwhile */
    pthread_mutex_unlock(&mu);
    rep->bytes = res.bytes;
    rep->elapsed_us = res.elapsed_ns / 1000;
    if (!rep->ok) {
        snprintf(rep->error, sizeof rep->error, "%s", res.error);
        return; /* the window keeps what did not come back */
    }
    /* Everything is back: the host memory returns to the broker's pool
     * (which zeroes it before another user gets it). */
    pthread_mutex_lock(&mu);
    gs_swap_window_close(hook_swap_driver(), &window[c->dev]);
    window_lease[c->dev] = 0;
    pthread_mutex_unlock(&mu);
}

/* swap_drop: the broker has this GPU's parked memory on its disk; the
 * window's chunks go back to the pool, and the window stays, hollow, with
 * every range's place, for the swap_in that maps another lease's chunks
 * there as the memory comes back from the disk. */
static void run_drop(const struct command *c, hook_swap_report_t *rep)
{
    pthread_mutex_lock(&mu);
    gs_swap_window_t *w = &window[c->dev];
    if (!w->va || gs_swap_window_is_hollow(w))
        snprintf(rep->error, sizeof rep->error, "nothing of GPU %d is in host memory", c->dev);
    else if (c->lease && window_lease[c->dev] && window_lease[c->dev] != c->lease)
        snprintf(rep->error, sizeof rep->error, "GPU %d's memory is in lease %llu, not %llu",
                 c->dev, (unsigned long long)window_lease[c->dev], (unsigned long long)c->lease);
    else {
        gs_swap_window_hollow(hook_swap_driver(), w);
        window_lease[c->dev] = 0;
        rep->ok = 1;
    }
    pthread_mutex_unlock(&mu);
}

/* On the swap thread, never the client's: a process left locked or
 * checkpointed by a broker that died blocks in the driver here until a new
 * broker, which learns of it when the client joins, brings it back. */
static int recover_all(unsigned wait_ms)
{
    int left = 0;
    for (int dev = 0; dev < MAX_DEVS; dev++) {
        pthread_mutex_lock(&mu);
        gs_swap_window_t w = window[dev];
        pthread_mutex_unlock(&mu);
        if (!w.va)
            continue;
        if (gs_swap_window_is_hollow(&w)) { /* its memory is in the broker's image */
            gs_warn("the broker is gone and GPU %d's memory is on its disk: it comes back when a "
                    "broker starts again",
                    dev);
            left++;
            continue;
        }
        gs_swap_result_t res;
        if (gs_swap_in(hook_swap_engine(), dev, &w, wait_ms, NULL, NULL, &res) == 0) {
            pthread_mutex_lock(&mu);
            gs_swap_window_close(hook_swap_driver(), &window[dev]);
            window_lease[dev] = 0;
            pthread_mutex_unlock(&mu);
            gs_warn("the broker is gone: GPU %d's memory is back from host memory (%.1f GB in "
                    "%.2f s)",
                    dev, res.bytes / 1e9, res.elapsed_ns / 1e9);
        } else {
            gs_warn("the broker is gone and GPU %d's memory could not come back yet: %s", dev,
                    res.error);
            left++;
        }
    }
    return left;
}

static void *swap_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!queue_head)
            pthread_cond_wait(&cv, &mu);
        struct command *c = queue_head;
        queue_head = c->next;
        if (!queue_head)
            queue_tail = NULL;
        if (c->dev >= 0) {
            under_way[c->dev] = c;
            if (!c->out)
                __atomic_store_n(&in_deadline[c->dev],
                                 c->no_wait ? 0 : gs_swap_deadline(c->wait_ms), __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&mu);
        if (c->dev < 0) {
            recover_all(c->wait_ms);
            pthread_mutex_lock(&mu);
            recover_queued = 0;
            pthread_mutex_unlock(&mu);
            if (c->recovered)
                c->recovered();
            free(c);
            continue;
        }

        hook_swap_report_t rep = {.dev = c->dev, .out = c->out, .lease = c->lease};
        if (!hook_swap_available())
            snprintf(rep.error, sizeof rep.error, "the swap tier is off in this process");
        else if (c->out == HOOK_SWAP_DROP)
            run_drop(c, &rep);
        else if (c->out == HOOK_SWAP_OUT)
            run_out(c, &rep);
        else
            run_in(c, &rep);
        uint64_t parked = 0;
        hook_swap_totals(c->dev, &rep.left_resident, &parked);
        pthread_mutex_lock(&mu);
        busy[c->dev]--;
        under_way[c->dev] = NULL;
        rep.lease = c->lease; /* the latest swap_in it answers for */
        pthread_mutex_unlock(&mu);
        if (c->done)
            c->done(&rep);
        free(c);
    }
    return NULL;
}

/* The swap_in for dev that a new one may join (mu held): the last command
 * for dev, queued or under way, when it is a swap_in; NULL otherwise (one
 * after a swap_out is a new one). */
static struct command *pending_in_locked(int dev)
{
    GS_ASSERT_HELD(&mu);
    struct command *last = under_way[dev];
    for (struct command *c = queue_head; c; c = c->next)
        if (c->dev == dev)
            last = c;
    return last && !last->out ? last : NULL;
}

/* What a swap_in for dev makes of the commands before it, and whether it
 * still needs one of its own (mu held).  The broker asks again when its
 * earlier swap_in went unanswered (this process was dropped and joined
 * again, the broker restarted): the one queued or under way answers for
 * both, with the later lease and the later wait, instead of a second wait
 * for memory queued behind the first.  With nothing out and nothing under
 * way the answer is at once (*done_now). */
static int in_needed_locked(int dev, uint64_t lease, unsigned wait_ms, int *done_now)
{
    GS_ASSERT_HELD(&mu);
    *done_now = !busy[dev] && !window[dev].va;
    if (*done_now)
        return 0;
    struct command *c = pending_in_locked(dev);
    if (!c)
        return 1;
    c->lease = lease;
    c->no_wait = 0;
    if (c == under_way[dev]) {
        int64_t later = gs_swap_deadline(wait_ms);
        if (later > __atomic_load_n(&in_deadline[dev], __ATOMIC_ACQUIRE))
            __atomic_store_n(&in_deadline[dev], later, __ATOMIC_RELEASE);
    } else if (wait_ms > c->wait_ms) {
        c->wait_ms = wait_ms;
    }
    return 0;
}

/* A swap_out for dev: a swap_in before it waits for memory no longer (the
 * broker wants the memory out now; a wait would hold the park up) (mu
 * held). */
static void out_supersedes_locked(int dev)
{
    GS_ASSERT_HELD(&mu);
    for (struct command *c = queue_head; c; c = c->next)
        if (c->dev == dev && !c->out)
            c->no_wait = 1;
    if (under_way[dev] && !under_way[dev]->out)
        __atomic_store_n(&in_deadline[dev], 0, __ATOMIC_RELEASE);
}

void hook_swap_command(int dev, int out, uint64_t lease, unsigned wait_ms, uint64_t bytes,
                       const char *pool_path, hook_swap_done_fn done)
{
    struct command *c = calloc(1, sizeof *c);
    if (!c || dev < 0 || dev >= MAX_DEVS) {
        free(c);
        hook_swap_report_t rep = {.dev = dev, .out = out, .lease = lease};
        snprintf(rep.error, sizeof rep.error, "cannot queue the swap (GPU %d)", dev);
        if (done)
            done(&rep);
        return;
    }
    *c = (struct command){.dev = dev,
                          .out = out,
                          .lease = lease,
                          .bytes = out == HOOK_SWAP_OUT ? bytes : 0,
                          .wait_ms = wait_ms ? wait_ms : SWAP_IN_WAIT_MS,
                          .done = done};
    snprintf(c->pool, sizeof c->pool, "%s", pool_path ? pool_path : "");
    int done_now = 0;
    pthread_mutex_lock(&mu);
    if (out == HOOK_SWAP_OUT)
        out_supersedes_locked(dev);
    if (out || in_needed_locked(dev, lease, c->wait_ms, &done_now)) {
        busy[dev]++;
        enqueue_locked(c);
        c = NULL;
    }
    pthread_mutex_unlock(&mu);
    if (c && done_now && done) { /* nothing out, nothing under way: back already */
        hook_swap_report_t rep = {.dev = dev, .out = 0, .lease = lease, .ok = 1};
        uint64_t parked = 0;
        hook_swap_totals(dev, &rep.left_resident, &parked);
        done(&rep);
    }
    free(c);
}

void hook_swap_recover(unsigned wait_ms, void (*recovered)(void))
{
    struct command *c = calloc(1, sizeof *c);
    if (!c)
        return; /* tried again on the client's next round */
    *c = (struct command){.dev = -1, .wait_ms = wait_ms, .recovered = recovered};
    pthread_mutex_lock(&mu);
    if (recover_queued) {
        free(c);
    } else {
        recover_queued = 1;
        enqueue_locked(c);
    }
    pthread_mutex_unlock(&mu);
}

/* The swap thread is started on first use. */
static void enqueue_locked(struct command *c)
{
    GS_ASSERT_HELD(&mu);
    if (!thread_started) {
        /* No signals on this thread: they belong to the program. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_t t;
        if (pthread_create(&t, NULL, swap_thread, NULL) == 0) {
            pthread_detach(t);
            thread_started = 1;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (queue_tail)
        queue_tail->next = c;
    else
        queue_head = c;
    queue_tail = c;
    pthread_cond_signal(&cv);
}

int hook_swap_parked(int dev)
{
    if (dev < 0 || dev >= MAX_DEVS)
        return 0;
    pthread_mutex_lock(&mu);
    int b = busy[dev] > 0 || window[dev].va != 0;
    pthread_mutex_unlock(&mu);
    return b;
}

int hook_swap_progress(int dev, uint64_t *done, uint64_t *total)
{
    if (dev < 0 || dev >= MAX_DEVS)
        return 0;
    pthread_mutex_lock(&mu);
    int running = coming[dev].running;
    *done = coming[dev].done;
    *total = coming[dev].total;
    pthread_mutex_unlock(&mu);
    return running;
}
