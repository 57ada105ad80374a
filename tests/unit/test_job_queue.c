/*
 * test_job_queue.c - the broker's worker threads (broker/park/job_queue.h):
 * every job runs once, comes back through the queue, and the eventfd says
 * so (awaited with poll, never a sleep); destroy hands back what was not
 * collected.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "job_queue.h"

struct square {
    gs_job_t base; /* first */
    int in, out, runs;
};

static void run_square(gs_job_t *job)
{
    struct square *s = (struct square *)job;
    s->out = s->in * s->in;
    s->runs++;
}

static int dropped;
static void drop(gs_job_t *job)
{
    dropped++;
    (void)job;
}

static void every_job_runs_once_and_comes_back(void **state)
{
    (void)state;
    gs_job_queue_t *q = gs_job_queue_new(3);
    assert_non_null(q);
    enum { N = 64 };
    struct square jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct square){.base = {.run = run_square}, .in = i};
        gs_job_queue_submit(q, &jobs[i].base);
    }
    int back = 0;
    while (back < N) {
        struct pollfd p = {.fd = gs_job_queue_fd(q), .events = POLLIN};
        assert_int_equal(poll(&p, 1, 10000), 1);
        gs_job_t *j;
        while ((j = gs_job_queue_done(q)) != NULL)
            back++;
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].runs, 1);
        assert_int_equal(jobs[i].out, i * i);
    }
    /* Nothing left: the eventfd is cleared. */
    struct pollfd p = {.fd = gs_job_queue_fd(q), .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0);
    gs_job_queue_destroy(&q, drop);
    assert_null(q);
    assert_int_equal(dropped, 0);
}

static void destroy_hands_back_uncollected_jobs(void **state)
{
    (void)state;
    gs_job_queue_t *q = gs_job_queue_new(1);
    struct square a = {.base = {.run = run_square}, .in = 3};
    gs_job_queue_submit(q, &a.base);
    struct pollfd p = {.fd = gs_job_queue_fd(q), .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1); /* a finished, not collected */
    dropped = 0;
    gs_job_queue_destroy(&q, drop);
    assert_int_equal(dropped, 1);
    assert_int_equal(a.out, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_job_runs_once_and_comes_back),
        cmocka_unit_test(destroy_hands_back_uncollected_jobs),
    };
    return cmocka_run_group_tests_name("job_queue", tests, NULL, NULL);
}
