/*
 * test_scheduler.c - the scheduler (broker/sched/scheduler.h) on a virtual clock:
 * every policy's decisions, the accounting and the settings, with exact
 * times.  Actions are compared as text: "G:a" is a grant to client a on GPU
 * 0, "G:a/q=200" one with a 200 ms quantum, "R:a:quantum" a revoke.
 */
#include "unit_fixture.h"

#include "scheduler.h"

static gs_sched_t *S;
static int64_t NOW;

/* The grant each client holds on GPU 0 and 1, from the actions seen. */
static struct {
    char client[32];
    uint64_t grant[2];
    int64_t quantum[2];
    int64_t idle_release[2]; /* the hint its last grant carried */
    uint64_t turn[2];        /* the turn its last grant said */
    int again[2];            /* its last grant was one sent again */
} held[16];
static int nheld;

static int slot(const char *client)
{
    for (int i = 0; i < nheld; i++)
        if (strcmp(held[i].client, client) == 0)
            return i;
    snprintf(held[nheld].client, sizeof held[nheld].client, "%s", client);
    return nheld++;
}

/* Actions popped so far, as text, plain and with grants' quanta in ms. */
static char plain[2048], withq[2048];

static void add(char *buf, const char *one)
{
    if (buf[0])
        strcat(buf, " ");
    strcat(buf, one);
}

static void pull(void)
{
    gs_sched_action_t a;
    while (gs_sched_pop_action(S, &a)) {
        char one[200], q[240];
        int k = slot(a.client);
        const char *dev = a.gpu ? "@1" : "";
        if (a.kind == GS_ACT_GRANT) {
            held[k].grant[a.gpu] = a.grant_id;
            held[k].quantum[a.gpu] = a.quantum_us;
            held[k].idle_release[a.gpu] = a.idle_release_us;
            held[k].turn[a.gpu] = a.turn;
            held[k].again[a.gpu] = a.again;
            snprintf(one, sizeof one, "G:%s%s", a.client, dev);
            snprintf(q, sizeof q, "%s/q=%lld", one, (long long)(a.quantum_us / MS));
        } else {
            snprintf(one, sizeof one, "R:%s%s:%s", a.client, dev, a.reason);
            snprintf(q, sizeof q, "%s", one);
        }
        add(plain, one);
        add(withq, q);
    }
}

/* The actions since the last call. */
static const char *acts_q(int with_q)
{
    static char out[2048];
    pull();
    snprintf(out, sizeof out, "%s", with_q ? withq : plain);
    plain[0] = withq[0] = '\0';
    return out;
}

static const char *acts(void)
{
    return acts_q(0);
}

static void setup_with(gs_sched_policy_t policy, uint64_t mem)
{
    uint64_t m[2] = {mem, mem};
    S = gs_sched_new(2, m);
    NOW = 1000 * SEC;
    nheld = 0;
    memset(held, 0, sizeof held);
    plain[0] = withq[0] = '\0';
    gs_sched_config_t c;
    gs_sched_config_default(&c);
    c.policy = policy;
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

static void set(const char *key, const char *json)
{
    char err[300];
    json_t *v = json_loads(json, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    int rc = gs_sched_set(S, key, v, err, sizeof err);
    if (rc != 0)
        fail_msg("set %s=%s: %s", key, json, err);
    json_decref(v);
    gs_sched_tick(S, NOW);
}

/* A plain process: session "s<client>" with one client. */
static void proc(const char *client)
{
    char session[40];
    snprintf(session, sizeof session, "s%s", client);
    assert_int_equal(gs_sched_join(S, client, session, NOW), 0);
}

static void acquire(const char *client)
{
    assert_int_equal(gs_sched_acquire(S, client, 0, -1, -1, NOW), 0);
}

static void release(const char *client)
{
    pull();
    assert_int_equal(gs_sched_release(S, client, 0, held[slot(client)].grant[0], NOW), 0);
}

/* Advance the clock to t, ticking at every deadline on the way. */
static void run_to(int64_t t)
{
    for (;;) {
        int64_t d = gs_sched_next_deadline(S);
        if (d > t)
            break;
        assert_true(d >= NOW);
        NOW = d;
        gs_sched_tick(S, NOW);
    }
    NOW = t;
}

static gs_sched_info_t info(const char *session)
{
    gs_sched_info_t i;
    assert_int_equal(gs_sched_info(S, session, 0, NOW, &i), 0);
    return i;
}

/* Notebooks nb[i], each with one client cl[i]; with busy, a cell running. */
static void notebooks(int n, const char *const *nb, const char *const *cl, int busy)
{
    for (int i = 0; i < n; i++) {
        gs_sched_register(S, nb[i], NOW);
        gs_sched_join(S, cl[i], nb[i], NOW);
        if (busy)
            gs_sched_cell(S, nb[i], 1, NOW);
    }
}

/* Notebook nb with one client, its footprint and move rates (both ways)
 * known: a switch costs 2 x bytes / bps. */
static void notebook_with_switch_cost(const char *nb, const char *client, uint64_t bytes,
                                      double bps)
{
    gs_sched_register(S, nb, NOW);
    gs_sched_join(S, client, nb, NOW);
    gs_sched_memory(S, client, 0, bytes, NOW);
    gs_sched_set_move_rates(S, nb, 0, bps, bps);
}

/* ---- exclusive ------------------------------------------------------------ */

static void exclusive_first_grant_on_idle_gpu_is_immediate(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    proc("a");
    acquire("a");
    assert_string_equal(acts_q(1), "G:a/q=20000");
    assert_int_equal(gs_sched_next_deadline(S), GS_SCHED_NEVER);
    gs_sched_info_t i = info("sa");
    assert_int_equal(i.state, GS_SESS_RUNNING);
    assert_int_equal(i.wait_time_us, 0);
}

static void exclusive_round_robin_by_quantum(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    set("tq", "0.2");
    proc("a"), proc("b"), proc("c");
    acquire("a");
    NOW += 10 * MS;
    acquire("b");
    acquire("c");
    assert_string_equal(acts(), "G:a");
    assert_int_equal(gs_sched_next_deadline(S), NOW - 10 * MS + 200 * MS);
    run_to(NOW + 190 * MS);
    assert_string_equal(acts(), "R:a:quantum");
    NOW += 1 * MS;
    release("a");
    acquire("a"); /* still has work: back of the queue */
    assert_string_equal(acts(), "G:b");
    run_to(NOW + 200 * MS);
    assert_string_equal(acts(), "R:b:quantum");
    release("b");
    acquire("b");
    assert_string_equal(acts(), "G:c");
    run_to(NOW + 200 * MS);
    release("c");
    assert_string_equal(acts(), "R:c:quantum G:a");
    json_t *w = gs_sched_waiting_json(S, 0);
    assert_int_equal(json_array_size(w), 1);
    assert_string_equal(json_string_value(json_array_get(w, 0)), "sb");
    json_decref(w);
}

static void exclusive_quantum_ends_only_when_someone_waits(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    set("tq", "1");
    proc("a"), proc("b");
    acquire("a");
    assert_string_equal(acts(), "G:a");
    run_to(NOW + 5 * SEC);
    assert_string_equal(acts(), "");
    acquire("b"); /* a is long past its quantum: revoked at once */
    assert_string_equal(acts(), "R:a:quantum");
    NOW += 3 * MS;
    release("a");
    assert_string_equal(acts(), "G:b");
    assert_int_equal(info("sb").wait_time_us, 3 * MS);
    assert_int_equal(info("sa").gpu_time_us, 5 * SEC + 3 * MS);
    assert_int_equal(info("sa").revokes, 1);
}

static void exclusive_idle_release_hands_over_at_once(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    proc("a"), proc("b");
    acquire("a");
    acquire("b");
    assert_string_equal(acts(), "G:a");
    NOW += 50 * MS;
    release("a"); /* the hook's idle release */
    assert_string_equal(acts(), "G:b");
    assert_int_equal(info("sa").state, GS_SESS_IDLE);
    assert_int_equal(info("sb").state, GS_SESS_RUNNING);
}

static void session_clients_hold_and_release_together(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    gs_sched_join(S, "a1", "A", NOW);
    gs_sched_join(S, "a2", "A", NOW);
    proc("b");
    acquire("a1");
    acquire("b");
    acquire("a2"); /* its session holds the GPU: granted at once */
    assert_string_equal(acts(), "G:a1 G:a2");
    run_to(NOW + 20 * SEC);
    assert_string_equal(acts(), "R:a1:quantum R:a2:quantum");
    release("a1");
    assert_string_equal(acts(), "");
    release("a2");
    assert_string_equal(acts(), "G:b");
    assert_int_equal(info("A").grants, 1);
    assert_int_equal(info("A").revokes, 1);
}

static void acquire_while_holding_grants_the_same_again(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    proc("a");
    acquire("a");
    assert_string_equal(acts(), "G:a");
    uint64_t id = held[slot("a")].grant[0];
    NOW += 5 * SEC;
    acquire("a");
    assert_string_equal(acts_q(1), "G:a/q=15000");
    assert_int_equal(held[slot("a")].grant[0], id);
    assert_int_equal(info("sa").grants, 1);
    /* A stale release is ignored. */
    assert_int_equal(gs_sched_release(S, "a", 0, id + 100, NOW), 1);
    assert_int_equal(info("sa").state, GS_SESS_RUNNING);
}

static void cell_idle_revokes_at_once_and_hands_off(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    gs_sched_register(S, "nb", NOW);
    gs_sched_join(S, "h", "nb", NOW);
    proc("b");
    gs_sched_cell(S, "nb", 1, NOW);
    acquire("h");
    acquire("b");
    assert_string_equal(acts(), "G:h");
    NOW += 100 * MS;
    gs_sched_cell(S, "nb", 0, NOW);
    assert_string_equal(acts(), "R:h:cell_idle");
    NOW += 1 * MS;
    release("h");
    assert_string_equal(acts(), "G:b");
    /* An idle notebook that holds nothing is left alone. */
    gs_sched_cell(S, "nb", 0, NOW);
    assert_string_equal(acts(), "");
    assert_int_equal(gs_sched_cell(S, "nobody", 0, NOW), -1);
}

static void client_death_releases_and_reclaims(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    proc("a"), proc("b");
    gs_sched_memory(S, "a", 0, 1 << 20, NOW);
    acquire("a");
    acquire("b");
    assert_string_equal(acts(), "G:a");
    assert_int_equal(info("sa").resident_bytes, 1 << 20);
    assert_int_equal(gs_sched_client_gone(S, "a", NOW), 1); /* its session went too */
    assert_string_equal(acts(), "G:b");
    assert_false(gs_sched_has_session(S, "sa"));
    assert_int_equal(gs_sched_client_gone(S, "a", NOW), -1);
    /* A waiting client that dies leaves the queue. */
    proc("c");
    acquire("c");
    json_t *w = gs_sched_waiting_json(S, 0);
    assert_int_equal(json_array_size(w), 1);
    json_decref(w);
    gs_sched_client_gone(S, "c", NOW);
    w = gs_sched_waiting_json(S, 0);
    assert_int_equal(json_array_size(w), 0);
    json_decref(w);
    /* A registered session outlives its clients. */
    gs_sched_register(S, "nb", NOW);
    gs_sched_join(S, "h", "nb", NOW);
    assert_int_equal(gs_sched_client_gone(S, "h", NOW), 0);
    assert_true(gs_sched_has_session(S, "nb"));
    assert_int_equal(gs_sched_unregister(S, "nb", NOW), 0);
    assert_false(gs_sched_has_session(S, "nb"));
    assert_int_equal(gs_sched_unregister(S, "nb", NOW), -1);
}

static void gpus_are_apart_and_unregister_revokes(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    gs_sched_register(S, "nb", NOW);
    gs_sched_join(S, "h", "nb", NOW);
    proc("b");
    acquire("h");
    assert_int_equal(gs_sched_acquire(S, "b", 1, -1, -1, NOW), 0);
    assert_string_equal(acts(), "G:h G:b@1");
    assert_int_equal(gs_sched_acquire(S, "h", 1, -1, -1, NOW), 0);
    assert_string_equal(acts(), ""); /* GPU 1 is b's */
    assert_int_equal(gs_sched_acquire(S, "b", 5, -1, -1, NOW), -1);
    /* The notebook's kernel is gone: its grants are revoked, and it goes
     * when its last client does. */
    assert_int_equal(gs_sched_unregister(S, "nb", NOW), 0);
    assert_string_equal(acts(), "R:h:cell_idle");
    assert_true(gs_sched_has_session(S, "nb"));
    assert_false(gs_sched_session_registered(S, "nb"));
    assert_int_equal(gs_sched_client_gone(S, "h", NOW), 1);
    assert_false(gs_sched_has_session(S, "nb"));
    assert_int_equal(gs_sched_client_grants(S, "b"), 1);
}

/* ---- burst ---------------------------------------------------------------- */

static void burst_quota_follows_the_formula(void **state)
{
    setup_with(GS_POLICY_BURST, 0);
    set("alpha", "0.5"), set("beta", "0.5"), set("quota_min_ms", "10"), set("quota_max_ms", "1000");
    proc("a");
    /* No report yet: the base quota (300 ms). */
    acquire("a");
    assert_string_equal(acts_q(1), "G:a/q=300");
    release("a");
    /* KB = .5*100 + .5*60 = 80; tau = .5*300 + .5*80 = 190 */
    gs_sched_acquire(S, "a", 0, 100 * MS, 60 * MS, NOW);
    assert_string_equal(acts_q(1), "G:a/q=190");
    release("a");
    /* KB = .5*200 + .5*100 = 150; tau = .5*190 + .5*150 = 170 */
    gs_sched_acquire(S, "a", 0, 200 * MS, 100 * MS, NOW);
    assert_string_equal(acts_q(1), "G:a/q=170");
    release("a");
    /* Without a new report the quota stays. */
    acquire("a");
    assert_string_equal(acts_q(1), "G:a/q=170");
    release("a");
    /* tiny bursts: .5*170 + .5*1 = 85.5; alpha weighs p90 against last:
     * KB = .8*40 + .2*10 = 34; tau = .5*85.5 + .5*34 = 59.75 */
    gs_sched_acquire(S, "a", 0, 1 * MS, 1 * MS, NOW);
    assert_int_equal(info("sa").tau_us, 85500);
    release("a");
    set("alpha", "0.8");
    gs_sched_acquire(S, "a", 0, 40 * MS, 10 * MS, NOW);
    assert_int_equal(info("sa").tau_us, 59750);
    release("a");
    acts();
    /* clamped at the bounds */
    for (int i = 0; i < 12; i++) {
        gs_sched_acquire(S, "a", 0, 0, 0, NOW);
        release("a");
    }
    assert_int_equal(info("sa").tau_us, 10 * MS);
    for (int i = 0; i < 12; i++) {
        gs_sched_acquire(S, "a", 0, 60 * SEC, -1, NOW);
        release("a");
    }
    assert_int_equal(info("sa").tau_us, 1000 * MS);
    acts();
}

static void burst_waiter_farthest_below_request_goes_first(void **state)
{
    setup_with(GS_POLICY_BURST, 0);
    set("quota_max_ms", "10000"), set("window_s", "10");
    set("share.sa.request", "0.5");
    proc("a"), proc("b"), proc("c");
    /* history: a held 3 s, b 1 s */
    acquire("a");
    NOW += 3 * SEC;
    release("a");
    acquire("b");
    NOW += 1 * SEC;
    release("b");
    acquire("c");
    acts();
    acquire("b");
    acquire("a"); /* a: 0.3 used < 0.5 requested: first despite using more */
    NOW += 100 * MS;
    release("c");
    assert_string_equal(acts(), "G:a");
    NOW += 100 * MS;
    release("a");
    assert_string_equal(acts(), "G:b");
    release("b");
    /* Nobody below its request: farthest below its limit (least used) first. */
    set("share.sa.request", "null");
    acquire("c");
    acts();
    acquire("a");
    acquire("b");
    NOW += 10 * MS;
    release("c");
    assert_string_equal(acts(), "G:b");
    gs_sched_info_t i = info("sa");
    assert_true(i.request == 0.0 && i.limit == 1.0);
}

static void burst_over_limit_waits_even_on_an_idle_gpu(void **state)
{
    setup_with(GS_POLICY_BURST, 0);
    set("quota_max_ms", "1000"), set("window_s", "10");
    set("share.sa.limit", "0.3");
    proc("a");
    int64_t t0 = NOW;
    acquire("a");
    assert_string_equal(acts_q(1), "G:a/q=300");
    /* Nobody waits: slices renew until the limit (3 s of 10 s). */
    run_to(t0 + 2999 * MS);
    assert_string_equal(acts(), "");
    run_to(t0 + 3 * SEC);
    assert_string_equal(acts(), "R:a:quantum");
    release("a");
    acquire("a");
    assert_string_equal(acts(), "");
    assert_int_equal(info("sa").state, GS_SESS_WAITING);
    /* The window forgets the first microsecond of that hold at t0+10s+1us. */
    assert_int_equal(gs_sched_next_deadline(S), t0 + 10 * SEC + 1);
    run_to(t0 + 10 * SEC + 1);
    assert_string_equal(acts(), "G:a");
}

/* ---- adaptive ------------------------------------------------------------- */

static void adaptive_shares_while_memory_fits(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 1000);
    set("headroom", "0");
    proc("a"), proc("b");
    gs_sched_memory(S, "a", 0, 400, NOW);
    gs_sched_memory(S, "b", 0, 600, NOW);
    acquire("a");
    acquire("b");
    assert_string_equal(acts(), "G:a G:b");
    json_t *h = gs_sched_holders_json(S, 0);
    assert_int_equal(json_array_size(h), 2);
    json_decref(h);
    assert_int_equal(gs_sched_next_deadline(S), GS_SCHED_NEVER);
}

static void adaptive_slices_when_memory_does_not_fit(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 1000);
    set("headroom", "0.1"); /* 900 bytes usable */
    proc("a"), proc("b");
    gs_sched_memory(S, "a", 0, 500, NOW);
    gs_sched_memory(S, "b", 0, 450, NOW);
    acquire("a");
    assert_string_equal(acts_q(1), "G:a/q=2000"); /* adaptive_min */
    NOW += 500 * MS;
    acquire("b");
    assert_string_equal(acts(), "");
    assert_int_equal(gs_sched_next_deadline(S), NOW + 1500 * MS);
    run_to(NOW + 1500 * MS);
    assert_string_equal(acts(), "R:a:quantum");
    release("a");
    acquire("a");
    assert_string_equal(acts(), "G:b");
    run_to(NOW + 2 * SEC);
    assert_string_equal(acts(), "R:b:quantum");
    release("b");
    assert_string_equal(acts(), "G:a");
    /* a frees memory: both fit again */
    gs_sched_memory(S, "a", 0, 100, NOW);
    acquire("b");
    assert_string_equal(acts(), "G:b");
}

static void adaptive_boost_preempts_and_restores(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    gs_sched_register(S, "train", NOW);
    gs_sched_register(S, "short", NOW);
    gs_sched_join(S, "t", "train", NOW);
    gs_sched_join(S, "s", "short", NOW);
    gs_sched_cell(S, "train", 1, NOW);
    acquire("t");
    assert_string_equal(acts(), "G:t");
    run_to(NOW + 60 * SEC); /* train's own boost ran out long ago */
    assert_string_equal(acts(), "");
    assert_false(info("train").boosted);
    gs_sched_cell(S, "short", 1, NOW);
    acquire("s");
    /* Granted at once (their memory fits): short's first kernels share the
     * GPU with what train had queued, instead of waiting for its drain. */
    assert_string_equal(acts(), "R:t:preempt G:s");
    int64_t t_boost = NOW;
    NOW += 2 * MS;
    release("t");
    acquire("t"); /* held back while short is boosted */
    assert_string_equal(acts(), "");
    assert_true(info("short").boosted);
    assert_int_equal(info("train").state, GS_SESS_WAITING);
    /* boost_ms (500) of GPU time, then train runs alongside again. */
    assert_int_equal(gs_sched_next_deadline(S), t_boost + 500 * MS);
    run_to(t_boost + 500 * MS);
    assert_string_equal(acts(), "G:t");
    assert_false(info("short").boosted);
    assert_int_equal(info("short").boost_left_us, 0);

    /* A cell that finishes inside its boost ends it at once. */
    gs_sched_cell(S, "short", 0, NOW);
    assert_string_equal(acts(), "R:s:cell_idle");
    release("s");
    gs_sched_cell(S, "short", 1, NOW);
    acquire("s");
    assert_string_equal(acts(), "R:t:preempt G:s");
    release("t");
    acquire("t");
    assert_string_equal(acts(), "");
    NOW += 80 * MS;
    gs_sched_cell(S, "short", 0, NOW); /* train shares with short's drain: it fits */
    assert_string_equal(acts(), "R:s:cell_idle G:t");
    NOW += 1 * MS;
    release("s");
    assert_string_equal(acts(), "");
    assert_int_equal(info("short").gpu_time_us, 500 * MS + 81 * MS);
}

/* Two cells that start together share their boosts; the first to start
 * runs out of its boost a few ms before the other, and is not preempted
 * for those few ms (its drain would outlast them).  A holder is preempted
 * for a boost that has longer to go (a tenth of boost_ms or more). */
static void a_boost_about_to_end_preempts_nobody(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    const char *nb[3] = {"a", "b", "c"}, *cl[3] = {"ca", "cb", "cc"};
    notebooks(3, nb, cl, 0);
    int64_t t0 = NOW;
    gs_sched_cell(S, "a", 1, NOW);
    acquire("ca");
    NOW += 2 * MS;
    gs_sched_cell(S, "b", 1, NOW);
    acquire("cb");
    assert_string_equal(acts(), "G:ca G:cb");
    /* a had 2 ms alone, then 498 ms of boost at half the GPU: it ends at
     * t0 + 998 ms, b's at t0 + 1002 ms. */
    run_to(t0 + 1010 * MS);
    assert_string_equal(acts(), "");
    assert_false(info("a").boosted);
    assert_false(info("b").boosted);
    assert_int_equal(info("a").state, GS_SESS_RUNNING);
    assert_int_equal(info("b").state, GS_SESS_RUNNING);

    /* A new cell's boost has 500 ms to go: the others make way for it. */
    gs_sched_cell(S, "c", 1, NOW);
    acquire("cc");
    assert_string_equal(acts(), "R:ca:preempt R:cb:preempt G:cc");
}

static void acquire_burst(const char *client, int64_t burst_us)
{
    assert_int_equal(gs_sched_acquire(S, client, 0, burst_us, burst_us, NOW), 0);
}

/* Two running cells that alternate GPU and CPU phases (500 ms each) and
 * fit together: once both have shown an idle gap, the second to ask waits
 * for the first's GPU phase instead of sharing it (which kept them in
 * phase: both GPU phases at half speed, then both CPU phases); the holder
 * is asked to give the GPU back 10 ms after its phase.  Out of phase they
 * take turns without waiting.  A phase that lasts twice its bursts ends
 * the wait: they share. */
static void cells_that_alternate_run_out_of_phase(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    set("boost_ms", "0");
    const char *nb[2] = {"a", "b"}, *cl[2] = {"ca", "cb"};
    notebooks(2, nb, cl, 1);
    /* The first round: no gaps yet, so they share (in phase). */
    acquire_burst("ca", 500 * MS);
    acquire_burst("cb", 500 * MS);
    assert_string_equal(acts(), "G:ca G:cb");
    NOW += 500 * MS;
    release("ca");
    release("cb");
    NOW += 500 * MS;
    /* Both show a gap now.  a asks first and has it; b waits. */
    acquire_burst("ca", 500 * MS);
    assert_string_equal(acts(), "G:ca");
    NOW += 1 * MS;
    acquire_burst("cb", 500 * MS);
    assert_string_equal(acts(), "G:ca"); /* the same grant again, with the hint */
    assert_int_equal(held[slot("ca")].idle_release[0], 10 * MS);
    assert_int_equal(info("b").state, GS_SESS_WAITING);
    NOW += 499 * MS;
    release("ca");
    assert_string_equal(acts(), "G:cb");
    /* a's CPU phase ends as b's GPU phase does: nobody waits. */
    NOW += 500 * MS;
    release("cb");
    acquire_burst("ca", 500 * MS);
    assert_string_equal(acts(), "G:ca");

    /* b's CPU phase ends early; a's GPU phase runs long: b waits for twice
     * a's bursts from a's grant (1 s), then they share. */
    NOW += 300 * MS;
    acquire_burst("cb", 500 * MS);
    assert_string_equal(acts(), "G:ca");
    int64_t a_grant = NOW - 300 * MS;
    run_to(a_grant + 999 * MS);
    assert_string_equal(acts(), "");
    run_to(a_grant + 1000 * MS);
    assert_string_equal(acts(), "G:cb");
}

/* A cell that does not alternate (a trainer: no idle gaps) neither waits
 * for one that does nor holds it back. */
static void a_cell_without_gaps_shares_as_before(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    set("boost_ms", "0");
    const char *nb[2] = {"job", "train"}, *cl[2] = {"cj", "ct"};
    notebooks(2, nb, cl, 1);
    acquire_burst("cj", 500 * MS);
    assert_string_equal(acts(), "G:cj");
    NOW += 500 * MS;
    release("cj");
    NOW += 500 * MS; /* job has a gap now; train has none */
    acquire_burst("cj", 500 * MS);
    acquire_burst("ct", 10 * SEC);
    assert_string_equal(acts(), "G:cj G:ct");
    NOW += 500 * MS;
    release("cj");
    NOW += 500 * MS;
    acquire_burst("cj", 500 * MS);
    assert_string_equal(acts(), "G:cj");
}

/* A cell that has just started and not had the GPU yet is not switched out
 * (parking's victims: gs_sched_info's switchable) before its switch cost
 * has passed: its first acquire is on the way.  Once it has held the GPU,
 * its turn rules as before. */
static void a_cell_that_just_started_keeps_its_memory_for_its_switch_cost(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    notebook_with_switch_cost("b", "cb", 1000000000ull, 2e9); /* 0.5 s + 0.5 s */
    assert_true(info("b").switchable);                        /* between cells */
    int64_t t0 = NOW;
    gs_sched_cell(S, "b", 1, NOW);
    assert_false(info("b").switchable);
    assert_int_equal(info("b").switchable_at_us, t0 + 1 * SEC);
    /* A cell without GPU work is not protected for ever. */
    gs_sched_info_t later;
    assert_int_equal(gs_sched_info(S, "b", 0, t0 + 1 * SEC, &later), 0);
    assert_true(later.switchable);
    NOW += 100 * MS;
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    NOW += 10 * MS;
    release("cb"); /* between two GPU phases: its turn goes on */
    assert_false(info("b").switchable);
    assert_int_equal(info("b").switchable_at_us, NOW + 1 * SEC);
}

/* Idle gaps belong to the running cell: a cell that alternates 0.5 s CPU
 * phases, after one whose CPU phases were 60 ms, is switched out as soon as
 * it gives the GPU back once its first long gap is seen (the switch, 0.2 s,
 * fits in that CPU phase), not after a switch cost of idle GPU at each of
 * its phases until the old gaps are outvoted. */
static void a_new_cell_predicts_with_its_own_gaps(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    notebook_with_switch_cost("b", "cb", 1000000000ull, 1e10); /* 0.1 s + 0.1 s */
    /* A 90/10 cell: GPU phases with 60 ms gaps. */
    gs_sched_cell(S, "b", 1, NOW);
    for (int i = 0; i < 4; i++) {
        acquire("cb");
        assert_string_equal(acts(), "G:cb");
        NOW += 900 * MS;
        release("cb");
        NOW += 60 * MS;
    }
    assert_int_equal(info("b").idle_gap_us, 60 * MS);
    gs_sched_cell(S, "b", 0, NOW);
    NOW += 1 * SEC;
    /* A 50/50 cell: until its first gap the last cell's are the guess. */
    gs_sched_cell(S, "b", 1, NOW);
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    NOW += 500 * MS;
    release("cb");
    assert_false(info("b").switchable); /* 60 ms gaps: a switch would not fit */
    NOW += 500 * MS;
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    assert_int_equal(info("b").idle_gap_us, 500 * MS);
    NOW += 500 * MS;
    release("cb");
    assert_true(info("b").switchable); /* at once: its CPU phase holds a switch */
}

/* Exclusive: a parked head waiter comes back through parking; it does not
 * hold up a resident waiter behind it, which is granted meanwhile. */
static void exclusive_a_parked_head_does_not_hold_up_a_resident_waiter(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    const char *nb[2] = {"a", "b"}, *cl[2] = {"ca", "cb"};
    notebooks(2, nb, cl, 0);
    gs_sched_set_residency(S, "a", GS_SCHED_PARKED, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_demand(S, "a", 0, 1, NOW); /* queued for its cell while parked */
    NOW += 1 * MS;
    gs_sched_cell(S, "b", 1, NOW);
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    assert_int_equal(info("a").state, GS_SESS_WAITING);
}

/* Exclusive: while a parked waiter waits for a switch, the holder is asked
 * to give the GPU back a tenth of its switch cost after it goes idle (the
 * same grant again, with the hint), not after the default 200 ms. */
static void exclusive_a_parked_waiter_shortens_the_holders_idle_release(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    const char *nb[2] = {"a", "b"}, *cl[2] = {"ca", "cb"};
    notebooks(2, nb, cl, 1);
    gs_sched_memory(S, "ca", 0, 1000000000ull, NOW);
    gs_sched_set_move_rates(S, "a", 0, 1e10, 1e10); /* 1 GB: 0.1 s + 0.1 s */
    acquire("ca");
    assert_string_equal(acts(), "G:ca");
    assert_int_equal(held[slot("ca")].idle_release[0], 0);
    acquire("cb"); /* resident: no switch wanted, no hint */
    assert_string_equal(acts(), "");
    gs_sched_set_residency(S, "b", GS_SCHED_PARKED, NOW);
    NOW += 1 * MS;
    gs_sched_tick(S, NOW);
    assert_string_equal(acts(), "G:ca");
    assert_int_equal(held[slot("ca")].idle_release[0], 20 * MS);
    assert_true(held[slot("ca")].again[0]); /* the same grant, sent again */
}

/* The grants of one turn say its number (the event log's "turn"): a cell
 * that gives the GPU back between two GPU phases is granted again in the
 * same turn; a turn that ended (here with the cell) is followed by the
 * next. */
static void the_grants_of_one_turn_carry_its_number(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    notebook_with_switch_cost("b", "cb", 1000000000ull, 1e10); /* 0.2 s: turns of 2 s */
    gs_sched_cell(S, "b", 1, NOW);
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    uint64_t first = held[slot("cb")].grant[0];
    assert_int_equal(held[slot("cb")].turn[0], 1);
    assert_false(held[slot("cb")].again[0]);
    NOW += 500 * MS;
    release("cb");
    NOW += 50 * MS;
    acquire("cb");
    assert_string_equal(acts_q(1), "G:cb/q=1450"); /* what is left of it */
    assert_true(held[slot("cb")].grant[0] != first);
    assert_int_equal(held[slot("cb")].turn[0], 1);
    assert_false(held[slot("cb")].again[0]);
    gs_sched_cell(S, "b", 0, NOW);
    assert_string_equal(acts(), "R:cb:cell_idle");
    release("cb");
    gs_sched_cell(S, "b", 1, NOW);
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    assert_int_equal(held[slot("cb")].turn[0], 2);
}

static void pauses_between_cells_are_measured(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    gs_sched_register(S, "n", NOW);
    for (int i = 0; i < 3; i++) {
        gs_sched_cell(S, "n", 1, NOW);
        NOW += 100 * MS;
        gs_sched_cell(S, "n", 0, NOW);
        assert_int_equal(info("n").think_gap_us, 0); /* fewer than three pauses */
        NOW += (i + 1) * SEC;
    }
    gs_sched_cell(S, "n", 1, NOW); /* pauses of 1, 2 and 3 s: the median */
    assert_int_equal(info("n").think_gap_us, 2 * SEC);
}

/* Issue 17: cells that start while others run share the GPU with them
 * instead of queueing behind them in start order (each waiting for every
 * earlier cell's whole work made 8 mostly idle notebooks' p99 13 x solo);
 * a cell whose boost is used up (a trainer) is held back meanwhile. */
static void adaptive_new_cells_share_instead_of_queueing(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    const char *nb[3] = {"train", "a", "b"}, *cl[3] = {"t", "ca", "cb"};
    notebooks(3, nb, cl, 0);
    gs_sched_cell(S, "train", 1, NOW);
    acquire("t");
    run_to(NOW + 10 * SEC); /* its boost is long used up */
    assert_string_equal(acts(), "G:t");
    gs_sched_cell(S, "a", 1, NOW);
    acquire("ca");
    assert_string_equal(acts(), "R:t:preempt G:ca");
    release("t");
    acquire("t");
    NOW += 100 * MS;
    gs_sched_cell(S, "b", 1, NOW); /* a's cell runs: b does not wait for it */
    acquire("cb");
    assert_string_equal(acts(), "G:cb");
    assert_true(info("a").boosted && info("b").boosted);
    assert_int_equal(info("train").state, GS_SESS_WAITING);
    /* A boost is 500 ms of GPU time, shared: a held 100 ms alone and 50 ms
     * beside b (25 ms), so 375 ms are left once b's cell is over; then
     * the trainer comes back. */
    NOW += 50 * MS;
    gs_sched_cell(S, "b", 0, NOW);
    assert_string_equal(acts(), "R:cb:cell_idle");
    release("cb");
    assert_string_equal(acts(), "");
    assert_int_equal(info("a").boost_left_us, 375 * MS);
    run_to(NOW + 375 * MS - 1);
    assert_string_equal(acts(), "");
    run_to(NOW + 1);
    assert_string_equal(acts(), "G:t");
    assert_false(info("a").boosted);
}

static void adaptive_quanta_grow_with_the_cell(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 1000);
    set("headroom", "0");
    gs_sched_register(S, "long", NOW);
    gs_sched_register(S, "new", NOW);
    gs_sched_join(S, "l", "long", NOW);
    gs_sched_join(S, "n", "new", NOW);
    gs_sched_memory(S, "l", 0, 800, NOW);
    gs_sched_memory(S, "n", 0, 800, NOW);
    gs_sched_cell(S, "long", 1, NOW);
    acquire("l");
    assert_string_equal(acts_q(1), "G:l/q=2000"); /* a fresh cell: adaptive_min */
    NOW += 7 * SEC;
    release("l");
    acquire("l"); /* 7 s into the cell: 7 s slices */
    assert_string_equal(acts_q(1), "G:l/q=7000");
    NOW += 60 * SEC;
    release("l");
    acquire("l"); /* capped at adaptive_max */
    assert_string_equal(acts_q(1), "G:l/q=20000");
    gs_sched_cell(S, "new", 1, NOW);
    set("boost_ms", "0"); /* no boost: plain slicing */
    gs_sched_cell(S, "new", 0, NOW);
    gs_sched_cell(S, "new", 1, NOW);
    acquire("n");
    assert_string_equal(acts(), "");
    run_to(NOW + 20 * SEC);
    release("l");
    assert_string_equal(acts_q(1), "R:l:quantum G:n/q=2000");
}

/* ---- off, settings ----------------------------------------------------------- */

static void off_grants_everything_and_revokes_nothing(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    set("scheduler", "\"off\"");
    gs_sched_register(S, "nb", NOW);
    gs_sched_join(S, "h", "nb", NOW);
    proc("b");
    gs_sched_cell(S, "nb", 1, NOW);
    acquire("h");
    acquire("b");
    assert_string_equal(acts_q(1), "G:h/q=0 G:b/q=0");
    run_to(NOW + 100 * SEC);
    gs_sched_cell(S, "nb", 0, NOW);
    assert_string_equal(acts(), "");
    /* On again: the exclusive policy keeps the oldest holder. */
    set("scheduler", "true");
    assert_string_equal(acts(), "R:b:policy");
    release("b");
    acquire("b"); /* h's slice counts from its grant: long over */
    assert_string_equal(acts(), "R:h:quantum");
    release("h");
    assert_string_equal(acts(), "G:b");
}

static void policy_change_applies_at_the_next_tick(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    proc("a"), proc("b");
    acquire("a");
    acquire("b");
    assert_string_equal(acts(), "G:a G:b");
    char err[200];
    json_t *v = json_string("exclusive");
    assert_int_equal(gs_sched_set(S, "policy", v, err, sizeof err), 0);
    json_decref(v);
    assert_int_equal(gs_sched_next_deadline(S), NOW);
    gs_sched_tick(S, NOW);
    assert_string_equal(acts(), "R:b:policy");
    assert_int_equal(gs_sched_config(S)->policy, GS_POLICY_EXCLUSIVE);
}

static void set_rejects_bad_settings_with_a_reason(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    static const struct {
        const char *key, *json, *text;
    } bad[] = {
        {"policy", "\"fair\"",
         "policy: must be \"exclusive\", \"burst\" or \"adaptive\", not \"fair\""},
        {"scheduler", "1", "scheduler: must be \"on\" or \"off\", not 1"},
        {"tq", "0", "tq: must be greater than 0"},
        {"tq", "\"soon\"", "tq: must be a number of seconds > 0, not \"soon\""},
        {"tq", "-1", "tq: must be a number of seconds > 0, not -1"},
        {"alpha", "1.5", "alpha: must be a number from 0 to 1"},
        {"headroom", "0.95", "headroom: must be a number from 0 to 0.9"},
        {"quota_min_ms", "5000", "quota_min_ms must not exceed quota_max_ms (2000 ms)"},
        {"adaptive_min_s", "30", "adaptive_min_s must not exceed adaptive_max_s (20 s)"},
        {"boost_ms", "true", "boost_ms: must be a number of milliseconds >= 0, not true"},
        {"limit", "0", "limit: must be greater than 0"},
        {"share.nb.limit", "2", "share.nb.limit: must be a fraction above 0, at most 1"},
        {"share.nb.bogus", "1", "share settings are share.<session>.request"},
        {"speed", "11", "speed: no such setting"},
    };
    gs_sched_config_t before = *gs_sched_config(S);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[300] = "";
        json_t *v = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
        assert_int_equal(gs_sched_set(S, bad[i].key, v, err, sizeof err), -1);
        if (!strstr(err, bad[i].text))
            fail_msg("%s=%s: \"%s\" lacks \"%s\"", bad[i].key, bad[i].json, err, bad[i].text);
        json_decref(v);
    }
    assert_memory_equal(&before, gs_sched_config(S), sizeof before);
    /* request above limit, in either order */
    set("share.nb.limit", "0.4");
    char err[300];
    json_t *v = json_real(0.6);
    assert_int_equal(gs_sched_set(S, "share.nb.request", v, err, sizeof err), -1);
    assert_non_null(strstr(err, "must not exceed the limit (0.4)"));
    json_decref(v);
    /* whole configurations are checked too */
    gs_sched_config_t c = before;
    c.beta = -0.1;
    assert_int_equal(gs_sched_set_config(S, &c, err, sizeof err), -1);
    assert_string_equal(err, "beta: must be a number from 0 to 1");
}

static void settings_round_trip_through_json(void **state)
{
    setup_with(GS_POLICY_ADAPTIVE, 0);
    set("tq", "0.25");
    set("boost_ms", "\"750\""); /* a number in a string (configuration file) */
    set("share.nb.request", "0.25");
    json_t *j = gs_sched_config_json(S);
    assert_string_equal(json_string_value(json_object_get(j, "policy")), "adaptive");
    assert_string_equal(json_string_value(json_object_get(j, "scheduler")), "on");
    assert_true(json_real_value(json_object_get(j, "tq_s")) == 0.25);
    assert_true(json_real_value(json_object_get(j, "boost_ms")) == 750.0);
    json_t *nb = json_object_get(json_object_get(j, "shares"), "nb");
    assert_true(json_real_value(json_object_get(nb, "request")) == 0.25);
    assert_true(json_real_value(json_object_get(nb, "limit")) == 1.0);
    /* every key set back unchanged */
    gs_sched_config_t before = *gs_sched_config(S);
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val)
    {
        char err[300];
        if (strcmp(key, "shares") == 0)
            continue;
        if (gs_sched_set(S, key, val, err, sizeof err) != 0)
            fail_msg("%s: %s", key, err);
    }
    assert_memory_equal(&before, gs_sched_config(S), sizeof before);
    json_decref(j);
    assert_int_equal(gs_sched_config(S)->tq_us, 250 * MS);
}

/* Found by tests/fuzz/fuzz_settings: a default request raised above a
 * session's own limit gave that session a request over its limit, which
 * status then showed and `set` refused back.  The limit is hard. */
static void default_request_never_exceeds_a_sessions_limit(void **state)
{
    setup_with(GS_POLICY_BURST, 0);
    set("share.nb.limit", "0.75");
    set("request", "1");
    json_t *j = gs_sched_config_json(S);
    json_t *nb = json_object_get(json_object_get(j, "shares"), "nb");
    assert_true(json_real_value(json_object_get(nb, "request")) == 0.75);
    assert_true(json_real_value(json_object_get(nb, "limit")) == 0.75);
    char err[300];
    if (gs_sched_set(S, "share.nb.request", json_object_get(nb, "request"), err, sizeof err) != 0)
        fail_msg("%s", err);
    json_decref(j);
}

/* A refused batch of settings puts the shares back too (they live outside
 * gs_sched_config_t, which was all that gs_settings_apply restored). */
static void shares_save_and_restore(void **state)
{
    setup_with(GS_POLICY_BURST, 0);
    set("share.a.request", "0.25");
    void *saved = gs_sched_shares_save(S);
    assert_non_null(saved);
    set("share.a.request", "null");
    for (int i = 0; i < 20; i++) { /* the array grows meanwhile */
        char key[64];
        snprintf(key, sizeof key, "share.s%d.limit", i);
        set(key, "0.5");
    }
    gs_sched_shares_restore(S, saved);
    json_t *j = gs_sched_config_json(S);
    json_t *shares = json_object_get(j, "shares");
    assert_int_equal(json_object_size(shares), 1);
    assert_true(json_real_value(json_object_get(json_object_get(shares, "a"), "request")) == 0.25);
    json_decref(j);
    gs_sched_shares_restore(S, NULL); /* out of memory when saved: nothing changes */
}

/* ---- gangs: a session placed on several GPUs ------------------------------ */

static void acquire_on(const char *client, int gpu)
{
    assert_int_equal(gs_sched_acquire(S, client, gpu, -1, -1, NOW), 0);
}

static void release_on(const char *client, int gpu)
{
    pull();
    assert_int_equal(gs_sched_release(S, client, gpu, held[slot(client)].grant[gpu], NOW), 0);
}

static void gang(const char *client, const char *session)
{
    static const int both[2] = {0, 1};
    assert_int_equal(gs_sched_join(S, client, session, NOW), 0);
    assert_int_equal(gs_sched_set_gang(S, session, both, 2), 0);
    assert_int_equal(gs_sched_gang(S, session), 3u);
}

/* Two sessions on GPUs 0 and 1 that ask in opposite orders: without the
 * order, a would hold 0 and b 1, each waiting for the other for ever. */
static void gangs_take_their_gpus_in_order(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    set("tq", "1000");
    gang("a", "ga");
    gang("b", "gb");
    acquire_on("a", 0);
    acquire_on("b", 1); /* b holds no GPU 0: GPU 1 waits for it */
    assert_string_equal(acts(), "G:a");
    acquire_on("a", 1);
    assert_string_equal(acts(), "G:a@1");
    acquire_on("b", 0);
    assert_string_equal(acts(), ""); /* b waits for both behind a */
    release_on("a", 1);
    assert_string_equal(acts(), ""); /* b cannot take 1 before it holds 0 */
    release_on("a", 0);
    assert_string_equal(acts(), "G:b G:b@1");
    /* Asked for the higher GPU alone, a waits until it asks for the lower. */
    acquire_on("a", 1);
    release_on("b", 0);
    release_on("b", 1);
    assert_string_equal(acts(), "");
    acquire_on("a", 0);
    assert_string_equal(acts(), "G:a G:a@1");
    assert_int_equal(gs_sched_set_gang(S, "nobody", NULL, 0), -1);
}

/* A revoke on one GPU of a gang revokes all: it never keeps GPU 1 while
 * waiting for GPU 0 again. */
static void a_gang_is_revoked_on_all_its_gpus(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    gang("a", "ga");
    proc("c");
    acquire_on("a", 0);
    acquire_on("a", 1);
    assert_string_equal(acts(), "G:a G:a@1");
    acquire_on("c", 0);
    run_to(NOW + 20 * SEC); /* a's quantum on GPU 0 ends */
    assert_string_equal(acts(), "R:a:quantum R:a@1:quantum");
    release_on("a", 1); /* still holds 0, being revoked: 1 stays free */
    release_on("a", 0);
    assert_string_equal(acts(), "G:c");
    acquire_on("a", 0);
    acquire_on("a", 1);
    assert_string_equal(acts(), ""); /* GPU 1 is free, but 0 comes first */
    release_on("c", 0);
    assert_string_equal(acts(), "G:a G:a@1");
}

/* A session of one GPU on GPU 1 goes before a gang that does not hold
 * GPU 0 yet, and a gang that holds 0 takes 1 when it is free. */
static void gangs_and_single_gpu_sessions_share(void **state)
{
    setup_with(GS_POLICY_EXCLUSIVE, 0);
    gang("a", "ga");
    proc("c");
    proc("d");
    acquire_on("c", 0);
    assert_string_equal(acts(), "G:c");
    acquire_on("a", 1);
    acquire_on("a", 0);
    acquire_on("d", 1);
    assert_string_equal(acts(), "G:d@1"); /* a waits on 0 first */
    release_on("c", 0);
    assert_string_equal(acts(), "G:a");
    release_on("d", 1);
    assert_string_equal(acts(), "G:a@1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(exclusive_first_grant_on_idle_gpu_is_immediate, teardown),
        cmocka_unit_test_teardown(exclusive_round_robin_by_quantum, teardown),
        cmocka_unit_test_teardown(exclusive_quantum_ends_only_when_someone_waits, teardown),
        cmocka_unit_test_teardown(exclusive_idle_release_hands_over_at_once, teardown),
        cmocka_unit_test_teardown(session_clients_hold_and_release_together, teardown),
        cmocka_unit_test_teardown(acquire_while_holding_grants_the_same_again, teardown),
        cmocka_unit_test_teardown(cell_idle_revokes_at_once_and_hands_off, teardown),
        cmocka_unit_test_teardown(client_death_releases_and_reclaims, teardown),
        cmocka_unit_test_teardown(gpus_are_apart_and_unregister_revokes, teardown),
        cmocka_unit_test_teardown(burst_quota_follows_the_formula, teardown),
        cmocka_unit_test_teardown(burst_waiter_farthest_below_request_goes_first, teardown),
        cmocka_unit_test_teardown(burst_over_limit_waits_even_on_an_idle_gpu, teardown),
        cmocka_unit_test_teardown(adaptive_shares_while_memory_fits, teardown),
        cmocka_unit_test_teardown(adaptive_slices_when_memory_does_not_fit, teardown),
        cmocka_unit_test_teardown(adaptive_boost_preempts_and_restores, teardown),
        cmocka_unit_test_teardown(a_boost_about_to_end_preempts_nobody, teardown),
        cmocka_unit_test_teardown(cells_that_alternate_run_out_of_phase, teardown),
        cmocka_unit_test_teardown(a_cell_without_gaps_shares_as_before, teardown),
        cmocka_unit_test_teardown(a_new_cell_predicts_with_its_own_gaps, teardown),
        cmocka_unit_test_teardown(exclusive_a_parked_waiter_shortens_the_holders_idle_release,
                                  teardown),
        cmocka_unit_test_teardown(the_grants_of_one_turn_carry_its_number, teardown),
        cmocka_unit_test_teardown(a_cell_that_just_started_keeps_its_memory_for_its_switch_cost,
                                  teardown),
        cmocka_unit_test_teardown(exclusive_a_parked_head_does_not_hold_up_a_resident_waiter,
                                  teardown),
        cmocka_unit_test_teardown(pauses_between_cells_are_measured, teardown),
        cmocka_unit_test_teardown(adaptive_new_cells_share_instead_of_queueing, teardown),
        cmocka_unit_test_teardown(adaptive_quanta_grow_with_the_cell, teardown),
        cmocka_unit_test_teardown(off_grants_everything_and_revokes_nothing, teardown),
        cmocka_unit_test_teardown(policy_change_applies_at_the_next_tick, teardown),
        cmocka_unit_test_teardown(set_rejects_bad_settings_with_a_reason, teardown),
        cmocka_unit_test_teardown(settings_round_trip_through_json, teardown),
        cmocka_unit_test_teardown(default_request_never_exceeds_a_sessions_limit, teardown),
        cmocka_unit_test_teardown(shares_save_and_restore, teardown),
        cmocka_unit_test_teardown(gangs_take_their_gpus_in_order, teardown),
        cmocka_unit_test_teardown(a_gang_is_revoked_on_all_its_gpus, teardown),
        cmocka_unit_test_teardown(gangs_and_single_gpu_sessions_share, teardown),
    };
    return cmocka_run_group_tests_name("scheduler", tests, NULL, NULL);
}
