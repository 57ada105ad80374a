/*
 * test_sched_scale.c - the scheduler (broker/sched/scheduler.h) with many
 * clients, on a virtual clock.  Every decision asks each session for its
 * memory footprint and whether a client of it waits; the scheduler keeps
 * both as running totals (summing the client table each time made one
 * event cost sessions x clients: the broker's load test, doc/load-test.md).
 *
 *  - the totals follow every kind of change (joins, moves between
 *    sessions, memory reports, acquires, grants, revokes, releases, deaths,
 *    unregisters), checked against a model of the clients after each of
 *    thousands of random events;
 *  - a storm of 1000 clients in 200 sessions whose memory does not fit at
 *    once (adaptive time slicing): every client is granted again and again,
 *    the sessions that hold the GPU always fit in its memory, and once
 *    the clients are gone no session is left.
 * Nothing here is timed (bench/load measures the broker); the storm has
 * some 20000 events, each of which walked the client table for every
 * session in the queue before the totals were kept.
 */
#include "unit_fixture.h"

#include "scheduler.h"

static gs_sched_t *S;
static int64_t NOW;

static void configure(gs_sched_policy_t policy, double headroom, int64_t min_us, int64_t max_us)
{
    gs_sched_config_t c;
    gs_sched_config_default(&c);
    c.policy = policy;
    c.headroom = headroom;
    c.adaptive_min_us = min_us;
    c.adaptive_max_us = max_us;
    char err[200];
    assert_int_equal(gs_sched_set_config(S, &c, err, sizeof err), 0);
    gs_sched_tick(S, NOW);
}

static int teardown(void **state)
{
    (void)state;
    gs_sched_destroy(&S);
    return 0;
}

/* ---- the running totals against a model ------------------------------------ */

enum { MC = 40, MS_ = 8, GPUS = 2 };

static struct {
    int session; /* -1: not joined (gone) */
    uint64_t used[GPUS];
    uint64_t grant[GPUS];
    int revoked[GPUS];
    int wants[GPUS];
} M[MC];
static int registered[MS_];

static void client_name(int i, char *out, size_t len)
{
    snprintf(out, len, "c%d", i);
}

static void session_name(int k, char *out, size_t len)
{
    snprintf(out, len, "s%d", k);
}

/* What the scheduler decided, into the model. */
static void model_pull(void)
{
    gs_sched_action_t a;
    while (gs_sched_pop_action(S, &a)) {
        int i = atoi(a.client + 1);
        assert_true(i >= 0 && i < MC && M[i].session >= 0);
        if (a.kind == GS_ACT_GRANT) {
            M[i].grant[a.gpu] = a.grant_id;
            M[i].revoked[a.gpu] = 0;
            M[i].wants[a.gpu] = 0;
        } else if (M[i].grant[a.gpu] == a.grant_id) {
            M[i].revoked[a.gpu] = 1;
        }
    }
}

static void model_forget(int i)
{
    for (int g = 0; g < GPUS; g++) {
        M[i].used[g] = M[i].grant[g] = 0;
        M[i].revoked[g] = M[i].wants[g] = 0;
    }
}

/* Every session as the model says it is: there or not, its footprint, and
 * whether one of its clients waits. */
static void model_check(int step)
{
    for (int k = 0; k < MS_; k++) {
        char id[16];
        session_name(k, id, sizeof id);
        int clients = 0;
        uint64_t foot[GPUS] = {0};
        int wants[GPUS] = {0};
        for (int i = 0; i < MC; i++)
            if (M[i].session == k) {
                clients++;
                for (int g = 0; g < GPUS; g++) {
                    foot[g] += M[i].used[g];
                    wants[g] |= M[i].wants[g];
                }
            }
        int there = gs_sched_has_session(S, id);
        if (!clients && !registered[k]) {
            if (there)
                fail_msg("step %d: session %s should be gone", step, id);
            continue;
        }
        if (!there)
            fail_msg("step %d: session %s is missing", step, id);
        for (int g = 0; g < GPUS; g++) {
            gs_sched_info_t in;
            assert_int_equal(gs_sched_info(S, id, g, NOW, &in), 0);
            if (in.resident_bytes != foot[g] || in.wants != wants[g])
                fail_msg("step %d: session %s GPU %d: footprint %llu (model %llu), wants %d "
                         "(model %d)",
                         step, id, g, (unsigned long long)in.resident_bytes,
                         (unsigned long long)foot[g], in.wants, wants[g]);
        }
    }
}

static void random_event(unsigned *rng)
{
    int i = rand_r(rng) % MC, g = rand_r(rng) % GPUS, k = rand_r(rng) % MS_;
    char c[16], s[16];
    client_name(i, c, sizeof c);
    session_name(k, s, sizeof s);
    switch (rand_r(rng) % 9) {
    case 0: /* join, or move to another session (it leaves the old one first) */
        if (M[i].session != k)
            model_forget(i);
        assert_int_equal(gs_sched_join(S, c, s, NOW), 0);
        M[i].session = k;
        break;
    case 1:
    case 2:
        if (M[i].session < 0)
            return;
        M[i].used[g] = (uint64_t)(rand_r(rng) % 4) * 100;
        assert_int_equal(gs_sched_memory(S, c, g, M[i].used[g], NOW), 0);
        break;
    case 3:
    case 4:
        if (M[i].session < 0)
            return;
        /* Asked again while holding an unrevoked grant: the same grant. */
        if (!M[i].grant[g] || M[i].revoked[g])
            M[i].wants[g] = 1;
        assert_int_equal(gs_sched_acquire(S, c, g, -1, -1, NOW), 0);
        break;
    case 5:
    case 6:
        if (M[i].session < 0 || !M[i].grant[g])
            return;
        assert_int_equal(gs_sched_release(S, c, g, M[i].grant[g], NOW), 0);
        M[i].grant[g] = 0;
        M[i].revoked[g] = 0;
        break;
    case 7:
        if (M[i].session < 0)
            return;
        assert_true(gs_sched_client_gone(S, c, NOW) >= 0);
        model_forget(i);
        M[i].session = -1;
        break;
    case 8:
        if (registered[k]) {
            assert_int_equal(gs_sched_unregister(S, s, NOW), 0);
            registered[k] = 0;
        } else {
            gs_sched_register(S, s, NOW);
            registered[k] = 1;
        }
        break;
    }
}

static void totals_follow_every_change(void **state)
{
    (void)state;
    for (int policy = GS_POLICY_EXCLUSIVE; policy <= GS_POLICY_ADAPTIVE; policy++) {
        uint64_t mem[GPUS] = {2000, 2000};
        S = gs_sched_new(GPUS, mem);
        NOW = 1000 * SEC;
        configure((gs_sched_policy_t)policy, 0.0, 10 * MS, 50 * MS);
        memset(M, 0, sizeof M);
        memset(registered, 0, sizeof registered);
        for (int i = 0; i < MC; i++)
            M[i].session = -1;
        unsigned rng = 7u + (unsigned)policy;
        for (int step = 0; step < 20000; step++) {
            NOW += (rand_r(&rng) % 20) * MS;
            if (gs_sched_next_deadline(S) <= NOW)
                gs_sched_tick(S, NOW);
            model_pull();
            random_event(&rng);
            model_pull();
            model_check(step);
        }
        gs_sched_destroy(&S);
    }
}

/* ---- a storm ----------------------------------------------------------------- */

enum { NC = 1000, NS = 200, ROUNDS = 10 };
#define CAPACITY (1ull << 30)
#define FOOT     (8ull << 20) /* each client's memory: 40 MiB a session, 24 of 200 fit */

enum { IDLE, WAITING, HOLDING };

static struct {
    int st;
    uint64_t grant;
    int revoked;
    int64_t until; /* a hold ends */
    int grants;
} C[NC];

static char names[NC][24], sessions[NS][24]; /* room for any int: -O1 checks */

/* The footprint of the sessions that hold the GPU never exceeds what the
 * headroom leaves. */
static void check_fits(void)
{
    uint64_t held = 0;
    for (int k = 0; k < NS; k++) {
        gs_sched_info_t in;
        if (gs_sched_info(S, sessions[k], 0, NOW, &in) == 0 && in.state == GS_SESS_RUNNING)
            held += in.resident_bytes;
    }
    assert_true((double)held <= (double)CAPACITY * 0.95);
}

/* Grants and revokes to the clients; a revoked holder releases at once. */
static void storm_pull(int64_t hold)
{
    for (int again = 1; again;) {
        again = 0;
        gs_sched_action_t a;
        while (gs_sched_pop_action(S, &a)) {
            int i = atoi(a.client + 1);
            if (a.kind == GS_ACT_GRANT) {
                assert_int_equal(C[i].st, WAITING);
                C[i].st = HOLDING;
                C[i].grant = a.grant_id;
                C[i].revoked = 0;
                C[i].until = NOW + hold + (i % 5) * 100;
                C[i].grants++;
            } else if (C[i].st == HOLDING && C[i].grant == a.grant_id) {
                C[i].revoked = 1;
            }
        }
        for (int i = 0; i < NC; i++)
            if (C[i].st == HOLDING && C[i].revoked) {
                assert_int_equal(gs_sched_release(S, names[i], 0, C[i].grant, NOW), 0);
                C[i].st = IDLE;
                again = 1;
            }
    }
}

static void a_thousand_clients_storm(void **state)
{
    (void)state;
    uint64_t mem = CAPACITY;
    S = gs_sched_new(1, &mem);
    NOW = 1000 * SEC;
    configure(GS_POLICY_ADAPTIVE, 0.05, 10 * MS, 50 * MS);
    memset(C, 0, sizeof C);
    for (int k = 0; k < NS; k++)
        snprintf(sessions[k], sizeof sessions[k], "load-%d", k);
    for (int i = 0; i < NC; i++) {
        snprintf(names[i], sizeof names[i], "c%d", i);
        assert_int_equal(gs_sched_join(S, names[i], sessions[i % NS], NOW), 0);
        assert_int_equal(gs_sched_memory(S, names[i], 0, FOOT, NOW), 0);
    }
    /* Until every client has been granted ROUNDS times: the idle ones ask,
     * holders give back when their hold ends, timers fire on time. */
    long events = 0;
    for (int least = 0; least < ROUNDS;) {
        for (int i = 0; i < NC; i++)
            if (C[i].st == IDLE) {
                C[i].st = WAITING;
                assert_int_equal(gs_sched_acquire(S, names[i], 0, -1, -1, NOW), 0);
                events++;
            }
        storm_pull(1 * MS);
        int64_t next = gs_sched_next_deadline(S);
        for (int i = 0; i < NC; i++)
            if (C[i].st == HOLDING && C[i].until < next)
                next = C[i].until;
        assert_true(next != GS_SCHED_NEVER); /* someone holds, or a slice ends */
        NOW = next > NOW ? next : NOW;
        if (gs_sched_next_deadline(S) <= NOW)
            gs_sched_tick(S, NOW);
        storm_pull(1 * MS);
        for (int i = 0; i < NC; i++)
            if (C[i].st == HOLDING && C[i].until <= NOW) {
                assert_int_equal(gs_sched_release(S, names[i], 0, C[i].grant, NOW), 0);
                C[i].st = IDLE;
                events++;
            }
        storm_pull(1 * MS);
        if (events % 64 == 0)
            check_fits();
        least = C[0].grants;
        for (int i = 1; i < NC; i++)
            least = C[i].grants < least ? C[i].grants : least;
    }
    assert_true(events > 10000);
    /* They all go: nothing is left of the sessions (none was registered). */
    for (int i = 0; i < NC; i++)
        assert_true(gs_sched_client_gone(S, names[i], NOW) >= 0);
    for (int k = 0; k < NS; k++)
        assert_false(gs_sched_has_session(S, sessions[k]));
    json_t *h = gs_sched_holders_json(S, 0), *w = gs_sched_waiting_json(S, 0);
    assert_int_equal(json_array_size(h), 0);
    assert_int_equal(json_array_size(w), 0);
    json_decref(h);
    json_decref(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(totals_follow_every_change, teardown),
        cmocka_unit_test_teardown(a_thousand_clients_storm, teardown),
    };
    return cmocka_run_group_tests_name("scheduler at scale", tests, NULL, NULL);
}
