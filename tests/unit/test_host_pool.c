/*
 * test_host_pool.c - the host pool's decisions on a virtual clock
 * (broker/park/host_pool.h): it pins towards the target and never past the
 * budget, a failed pin is retried later, leases are all or nothing and
 * never hand one user's data to another, returned chunks are zeroed, and
 * memory that stays unused above the target goes back to the system.
 * A growing lease (a switch's relay) takes chunks the session coming back
 * returns early, before anyone else, and only what its user may have.
 * The driver is played by the test: it takes each job and reports it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_pool.h"

#define SEC 1000000ULL
#define GIB (1ull << 30)

static gs_host_pool_t *new_pool(uint64_t budget_gib)
{
    gs_host_pool_config_t cfg = {.chunk_bytes = GIB,
                                 .budget_bytes = budget_gib * GIB,
                                 .release_after_us = 60 * SEC,
                                 .retry_after_us = 10 * SEC};
    gs_host_pool_t *p = gs_host_pool_new(&cfg);
    assert_non_null(p);
    return p;
}

/* Runs every job the pool has now, each succeeding; returns how many of
 * `kind` ran. */
static int run_jobs(gs_host_pool_t *p, uint64_t now, gs_pool_job_kind_t kind)
{
    gs_pool_job_t job;
    int n = 0;
    while (gs_host_pool_next_job(p, now, &job)) {
        n += job.kind == kind;
        gs_host_pool_job_done(p, &job, 1, now);
    }
    return n;
}

static gs_host_pool_stats_t stats(gs_host_pool_t *p)
{
    gs_host_pool_stats_t s;
    gs_host_pool_stats(p, &s);
    return s;
}

static void pins_towards_the_target_within_the_budget(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_pool_job_t job;
    assert_false(gs_host_pool_next_job(p, 0, &job)); /* no target: nothing pinned */
    gs_host_pool_set_target(p, 3 * GIB + 1);         /* rounded up to whole chunks */
    assert_int_equal(run_jobs(p, 0, GS_POOL_JOB_PIN), 4);
    assert_int_equal(stats(p).pinned_bytes, 4 * GIB);
    assert_int_equal(stats(p).clean_bytes, 4 * GIB);
    gs_host_pool_set_target(p, 100 * GIB); /* capped by the budget */
    assert_int_equal(run_jobs(p, 0, GS_POOL_JOB_PIN), 4);
    assert_int_equal(stats(p).pinned_bytes, 8 * GIB);
    assert_int_equal(stats(p).target_bytes, 8 * GIB);
    gs_host_pool_destroy(&p);
    assert_null(p);
}

static void pinning_shows_progress(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 2 * GIB);
    gs_pool_job_t a, b;
    assert_true(gs_host_pool_next_job(p, 0, &a));
    assert_int_equal(a.kind, GS_POOL_JOB_PIN);
    assert_int_equal(stats(p).pinning_bytes, GIB);
    assert_int_equal(stats(p).pinned_bytes, 0);
    assert_true(gs_host_pool_next_job(p, 0, &b)); /* the second chunk can be pinned meanwhile */
    assert_int_not_equal(a.chunk, b.chunk);
    assert_false(gs_host_pool_next_job(p, 0, &b) && b.kind == GS_POOL_JOB_PIN);
    gs_host_pool_destroy(&p);
}

static void a_failed_pin_is_retried_later(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 1 * GIB);
    gs_pool_job_t job;
    assert_true(gs_host_pool_next_job(p, 0, &job));
    gs_host_pool_job_done(p, &job, 0, 0);
    assert_int_equal(stats(p).pin_failures, 1);
    assert_int_equal(stats(p).pinned_bytes, 0);
    assert_false(gs_host_pool_next_job(p, 5 * SEC, &job)); /* not before retry_after */
    assert_int_equal(gs_host_pool_next_deadline(p), 10 * SEC);
    assert_int_equal(run_jobs(p, 10 * SEC, GS_POOL_JOB_PIN), 1);
    assert_int_equal(stats(p).pinned_bytes, GIB);
    gs_host_pool_destroy(&p);
}

static void leases_are_all_or_nothing(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 3 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    int chunks[8], n = 0;
    assert_int_equal(gs_host_pool_lease(p, 1000, 4 * GIB, chunks, 8, &n), 0);
    assert_int_equal(n, 1); /* one chunk short */
    assert_int_equal(stats(p).lent_bytes, 0);
    uint64_t id = gs_host_pool_lease(p, 1000, 2 * GIB + 5, chunks, 8, &n);
    assert_true(id > 0);
    assert_int_equal(n, 3);
    assert_int_equal(stats(p).lent_bytes, 3 * GIB);
    assert_int_equal(stats(p).leases, 1);
    int m = 0;
    const int *lc = gs_host_pool_lease_chunks(p, id, &m);
    assert_int_equal(m, 3);
    assert_memory_equal(lc, chunks, 3 * sizeof *chunks);
    assert_int_equal(gs_host_pool_return(p, id, 1), 0);
    assert_int_equal(gs_host_pool_return(p, id, 1), -1); /* once */
    assert_int_equal(stats(p).lent_bytes, 0);
    gs_host_pool_destroy(&p);
}

static void another_users_data_is_zeroed_first(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 2 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    int chunks[8], n;
    uint64_t alice = gs_host_pool_lease(p, 1000, 2 * GIB, chunks, 8, &n);
    assert_true(alice > 0);
    gs_host_pool_return(p, alice, 1 * SEC);
    assert_int_equal(stats(p).clean_bytes, 0);
    /* Before the zeroing ran: bob gets nothing, alice gets her own chunks. */
    assert_int_equal(gs_host_pool_lease(p, 1001, 1 * GIB, chunks, 8, &n), 0);
    uint64_t again = gs_host_pool_lease(p, 1000, 1 * GIB, chunks, 8, &n);
    assert_true(again > 0);
    gs_host_pool_return(p, again, 2 * SEC);
    /* The zeroing jobs run; then bob may have them. */
    assert_int_equal(run_jobs(p, 3 * SEC, GS_POOL_JOB_ZERO), 2);
    assert_int_equal(stats(p).clean_bytes, 2 * GIB);
    assert_true(gs_host_pool_lease(p, 1001, 2 * GIB, chunks, 8, &n) > 0);
    gs_host_pool_destroy(&p);
}

/* The relay of a switch: 4 chunks pinned, alice's parked notebook holds 3;
 * her other notebook goes out into a lease that grows as the first one's
 * chunks come back early. */
static void a_growing_lease_takes_returned_chunks_first(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(4);
    gs_host_pool_set_target(p, 4 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    int chunks[8], n;
    uint64_t in = gs_host_pool_lease(p, 1000, 3 * GIB, chunks, 8, &n);
    assert_true(in > 0);
    assert_int_equal(gs_host_pool_lease(p, 1000, 3 * GIB, chunks, 8, &n), 0); /* one free */
    uint64_t out = gs_host_pool_lease_growing(p, 1000, 3 * GIB, &n);
    assert_true(out > 0);
    assert_int_equal(n, 1);
    assert_int_equal(gs_host_pool_lease_want(p, out), 3);
    /* Positions 0 and 1 of the incoming lease are back on the GPU. */
    int first[] = {0, 1};
    assert_int_equal(gs_host_pool_return_some(p, in, first, 2, 1 * SEC), 0);
    const int *lc = gs_host_pool_lease_chunks(p, out, &n);
    assert_int_equal(n, 3);
    const int *ic = gs_host_pool_lease_chunks(p, in, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ic[0], -1);
    assert_int_equal(ic[1], -1);
    assert_true(lc[1] >= 0 && lc[2] >= 0 && lc[1] != ic[2] && lc[2] != ic[2]);
    assert_int_equal(stats(p).lent_bytes, 4 * GIB);
    /* Again, or an unknown position: refused, nothing changes. */
    assert_int_equal(gs_host_pool_return_some(p, in, first, 1, 1 * SEC), -1);
    int bad[] = {2, 7};
    assert_int_equal(gs_host_pool_return_some(p, in, bad, 2, 1 * SEC), -1);
    /* The rest of the incoming lease comes back whole. */
    assert_int_equal(gs_host_pool_return(p, in, 2 * SEC), 0);
    assert_int_equal(stats(p).lent_bytes, 3 * GIB);
    assert_int_equal(gs_host_pool_return(p, out, 3 * SEC), 0);
    assert_int_equal(stats(p).leases, 0);
    gs_host_pool_destroy(&p);
}

/* Bob's growing lease never gets alice's returned chunks before they are
 * zeroed, and gets them once they are. */
static void a_growing_lease_waits_for_zeroing(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(2);
    gs_host_pool_set_target(p, 2 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    int chunks[8], n;
    uint64_t alice = gs_host_pool_lease(p, 1000, 2 * GIB, chunks, 8, &n);
    uint64_t bob = gs_host_pool_lease_growing(p, 1001, 2 * GIB, &n);
    assert_true(alice > 0 && bob > 0);
    assert_int_equal(n, 0);
    assert_int_equal(gs_host_pool_usable(p, 1001), 0);
    int pos[] = {0};
    assert_int_equal(gs_host_pool_return_some(p, alice, pos, 1, 1 * SEC), 0);
    gs_host_pool_lease_chunks(p, bob, &n);
    assert_int_equal(n, 0);
    assert_int_equal(run_jobs(p, 2 * SEC, GS_POOL_JOB_ZERO), 1);
    gs_host_pool_lease_chunks(p, bob, &n);
    assert_int_equal(n, 1);
    gs_host_pool_return(p, alice, 3 * SEC);
    run_jobs(p, 4 * SEC, GS_POOL_JOB_ZERO);
    gs_host_pool_lease_chunks(p, bob, &n);
    assert_int_equal(n, 2);
    gs_host_pool_return(p, bob, 5 * SEC);
    gs_host_pool_destroy(&p);
}

static void a_failed_zeroing_keeps_the_chunk_from_others(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 1 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    int chunks[8], n;
    uint64_t id = gs_host_pool_lease(p, 1000, 1 * GIB, chunks, 8, &n);
    gs_host_pool_return(p, id, 1);
    gs_pool_job_t job;
    assert_true(gs_host_pool_next_job(p, 2, &job));
    assert_int_equal(job.kind, GS_POOL_JOB_ZERO);
    gs_host_pool_job_done(p, &job, 0, 2);
    assert_int_equal(gs_host_pool_lease(p, 1001, 1 * GIB, chunks, 8, &n), 0);
    gs_host_pool_destroy(&p);
}

static void unused_memory_goes_back_after_a_while(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 4 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    int chunks[8], n;
    uint64_t id = gs_host_pool_lease(p, 1000, 1 * GIB, chunks, 8, &n);
    gs_host_pool_set_target(p, 1 * GIB); /* nothing more may be parked soon */
    gs_pool_job_t job;
    assert_false(gs_host_pool_next_job(p, 59 * SEC, &job) && job.kind == GS_POOL_JOB_UNPIN);
    assert_int_equal(gs_host_pool_next_deadline(p), 60 * SEC);
    assert_int_equal(run_jobs(p, 60 * SEC, GS_POOL_JOB_UNPIN), 3);
    assert_int_equal(stats(p).pinned_bytes, 1 * GIB); /* the lent chunk stays */
    assert_int_equal(stats(p).lent_bytes, 1 * GIB);
    gs_host_pool_return(p, id, 61 * SEC);
    gs_host_pool_destroy(&p);
}

static void a_lower_budget_unpins_at_once(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    gs_host_pool_set_target(p, 8 * GIB);
    run_jobs(p, 0, GS_POOL_JOB_PIN);
    gs_host_pool_set_budget(p, 5 * GIB);
    assert_int_equal(run_jobs(p, 1, GS_POOL_JOB_UNPIN), 3);
    assert_int_equal(stats(p).pinned_bytes, 5 * GIB);
    gs_host_pool_destroy(&p);
}

static void bad_configuration_is_refused(void **state)
{
    (void)state;
    gs_host_pool_config_t cfg = {0};
    assert_null(gs_host_pool_new(&cfg));
    assert_null(gs_host_pool_new(NULL));
}

static void a_lease_coming_is_one_the_pool_is_still_pinning(void **state)
{
    (void)state;
    gs_host_pool_t *p = new_pool(8);
    int chunks[8], n;
    gs_host_pool_set_target(p, 6 * GIB);
    assert_int_equal(run_jobs(p, 0, GS_POOL_JOB_PIN), 6);
    assert_true(gs_host_pool_lease(p, 1, 3 * GIB, chunks, 8, &n));
    gs_host_pool_set_target(p, 7 * GIB); /* one more chunk to pin */
    /* 4 GiB now: the pool lacks one, which is on its way: a park waits. */
    assert_false(gs_host_pool_lease(p, 2, 4 * GIB, chunks, 8, &n));
    assert_true(gs_host_pool_coming(p, 4 * GIB));
    /* 5 GiB is more than the target leaves: it goes deep at once. */
    assert_false(gs_host_pool_coming(p, 5 * GIB));
    /* While pins fail, nothing is on its way. */
    gs_pool_job_t job;
    assert_true(gs_host_pool_next_job(p, 0, &job));
    gs_host_pool_job_done(p, &job, 0, 0);
    assert_false(gs_host_pool_coming(p, 4 * GIB));
    assert_int_equal(run_jobs(p, 10 * SEC, GS_POOL_JOB_PIN), 1);
    assert_true(gs_host_pool_coming(p, 4 * GIB));
    assert_true(gs_host_pool_lease(p, 2, 4 * GIB, chunks, 8, &n));
    gs_host_pool_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pins_towards_the_target_within_the_budget),
        cmocka_unit_test(pinning_shows_progress),
        cmocka_unit_test(a_failed_pin_is_retried_later),
        cmocka_unit_test(a_lease_coming_is_one_the_pool_is_still_pinning),
        cmocka_unit_test(leases_are_all_or_nothing),
        cmocka_unit_test(a_growing_lease_takes_returned_chunks_first),
        cmocka_unit_test(a_growing_lease_waits_for_zeroing),
        cmocka_unit_test(another_users_data_is_zeroed_first),
        cmocka_unit_test(a_failed_zeroing_keeps_the_chunk_from_others),
        cmocka_unit_test(unused_memory_goes_back_after_a_while),
        cmocka_unit_test(a_lower_budget_unpins_at_once),
        cmocka_unit_test(bad_configuration_is_refused),
    };
    return cmocka_run_group_tests_name("host_pool", tests, NULL, NULL);
}
