/*
 * test_swap_queue.c - the hook's swap thread (libhook/hook_swap.c) as the
 * broker's commands reach it, built here with hook_swap.c itself on the
 * simulated driver (the rest of the hook stays out: hook_real's two
 * functions are stood in for below).
 *
 * The thread is held up by a swap out whose pool socket takes the
 * connection and never answers (the broker's pool busy or gone).  Behind
 * it, a swap_in for a GPU with nothing out answers at once, and a swap_in
 * the broker sends again (its process was dropped and joined again: chaos
 * seed 13) joins the one already queued: one answer, with the later lease,
 * not a second wait for memory.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hook_real.h"
#include "hook_swap.h"
#include "simtest.h"

/* ---- hook_real.h, as the hook would resolve it ------------------------------- */

static void *lookup(void *lib, const char *name)
{
    return dlsym(lib, name);
}

hook_dlsym_fn hook_real_dlsym(void)
{
    return lookup;
}

void *hook_real_libcuda(void)
{
    return dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); /* linked: the simulated one */
}

/* ---- the answers, as hook_client.c would send them --------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static hook_swap_report_t answers[16];
static int nanswers;

static void done(const hook_swap_report_t *r)
{
    pthread_mutex_lock(&mu);
    if (nanswers < 16)
        answers[nanswers++] = *r;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int count(void)
{
    pthread_mutex_lock(&mu);
    int n = nanswers;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Waits up to 20 s for n answers in all. */
static int wait_answers(int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&mu);
    while (nanswers < n && pthread_cond_timedwait(&cv, &mu, &until) == 0)
        ;
    int got = nanswers;
    pthread_mutex_unlock(&mu);
    return got;
}

/* A pool socket that takes connections and never answers. */
static int silent_pool(const char *path)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlink(path);
    REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(s, 8) == 0);
    return s;
}

static void queue_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    REQUIRE(hook_swap_available());
    char path[64];
    snprintf(path, sizeof path, "/tmp/gs-swapq-%d.sock", (int)getpid());
    int pool = silent_pool(path);

    /* GPU 1's swap out holds the thread up (the fetch waits for the pool);
     * GPU 0's own swap out is queued behind it. */
    hook_swap_command(1, 1, 7, 0, 0, path, done);
    hook_swap_command(0, 1, 8, 0, 0, path, done);
    /* A swap_in for GPU 3, which has nothing out and nothing queued:
     * answered at once, not after the commands queued for other GPUs. */
    REQUIRE(count() == 0);
    hook_swap_command(3, 0, 9, 2000, 0, NULL, done);
    REQUIRE(count() == 1);
    REQUIRE(answers[0].dev == 3 && !answers[0].out && answers[0].ok && answers[0].lease == 9);

    /* GPU 0's swap_in, sent twice (the second under a new lease): the
     * second joins the first. */
    hook_swap_command(0, 0, 10, 2000, 0, NULL, done);
    hook_swap_command(0, 0, 11, 3000, 0, NULL, done);
    REQUIRE(count() == 1);

    /* Last in the queue, a swap out for GPU 2 (no pool there: it fails at
     * once): once it is answered, everything before it is. */
    hook_swap_command(2, 1, 12, 0, 0, "/nonexistent/pool.sock", done);
    close(pool); /* the pool is gone: the swap outs fail, the swap in runs */
    unlink(path);
    int marker = 0;
    for (int n = 2; !marker; n++) {
        REQUIRE(wait_answers(n) >= n);
        marker = answers[n - 1].dev == 2;
    }
    int ins = 0;
    for (int i = 1; i < count(); i++) {
        if (answers[i].out) {
            REQUIRE(!answers[i].ok); /* no pool */
            continue;
        }
        ins++;
        REQUIRE(answers[i].dev == 0 && answers[i].ok && answers[i].lease == 11);
    }
    REQUIRE(ins == 1);
    REQUIRE(count() == 5); /* 1 at once, the two swap outs, GPU 0's swap in, the marker */
}

static void swap_ins_join_or_answer_at_once(void **state)
{
    (void)state;
    setenv("GPUSHARE_SWAP", "on", 1);
    simtest_fresh("64M", NULL);
    simtest_in_child(queue_child, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(swap_ins_join_or_answer_at_once, simtest_teardown),
    };
    return cmocka_run_group_tests_name("swap_queue", tests, NULL, NULL);
}
