/*
 * test_park.c - parking's decisions on a virtual clock: victim choice
 * (park_policy.h: least recently active first, never more than needed,
 * idle threshold, host budget, time-slice victims), costs and settings,
 * and the scheduler's side of parking (scheduler.h: a session that is not
 * resident is never granted, demand queues a parked cell, time slices).
 * Actions are compared as text as in test_scheduler.c: "G:a", "R:a:park".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "park_policy.h"
#include "scheduler.h"

#define MS  1000LL
#define SEC 1000000LL
#define MIB (1ull << 20)

/* ---- victim choice ----------------------------------------------------------- */

static gs_park_cand_t idle(uint64_t mib, int64_t last_active)
{
    return (gs_park_cand_t){
        .bytes = mib * MIB, .host_bytes = mib * MIB, .last_active = last_active, .idle = 1};
}

static const char *chosen(const int *picked, int n)
{
    static char out[64];
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        if (picked[i]) {
            size_t len = strlen(out);
            snprintf(out + len, sizeof out - len, "%s%d", len ? "," : "", i);
        }
    return out;
}

static void least_recently_active_goes_first(void **state)
{
    (void)state;
    gs_park_cand_t c[] = {idle(60, 300 * SEC), idle(60, 100 * SEC), idle(60, 200 * SEC)};
    int picked[3];
    int64_t w = 0;
    assert_int_equal(gs_park_policy_choose(c, 3, 50 * MIB, 0, UINT64_MAX, 1000 * SEC, 30 * SEC,
                                           INT64_MAX, picked, &w),
                     GS_PICK_OK);
    assert_string_equal(chosen(picked, 3), "1");
    assert_int_equal(gs_park_policy_choose(c, 3, 100 * MIB, 0, UINT64_MAX, 1000 * SEC, 30 * SEC,
                                           INT64_MAX, picked, &w),
                     GS_PICK_OK);
    assert_string_equal(chosen(picked, 3), "1,2");
}

static void never_more_than_needed(void **state)
{
    (void)state;
    /* Oldest first would take 5 and 3 MiB before the 100 MiB one that is
     * needed anyway: they are dropped again. */
    gs_park_cand_t c[] = {idle(5, 100 * SEC), idle(3, 200 * SEC), idle(100, 300 * SEC)};
    int picked[3];
    int64_t w = 0;
    assert_int_equal(
        gs_park_policy_choose(c, 3, 100 * MIB, 0, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_OK);
    assert_string_equal(chosen(picked, 3), "2");
    /* Nothing is parked when even everything would not be enough. */
    assert_int_equal(
        gs_park_policy_choose(c, 3, 200 * MIB, 0, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_NONE);
    assert_string_equal(chosen(picked, 3), "");
}

/* Issue 33: a 1 GiB scratch allocation next to idle 24 GiB notebooks.
 * One that the swap tier can park in part moves 1 GiB and its slack, not
 * 24 GiB, and is taken before whole parks, even of older sessions. */
static void the_smallest_move_makes_room(void **state)
{
    (void)state;
    gs_park_cand_t c[] = {idle(24 * 1024, 100 * SEC), idle(24 * 1024, 200 * SEC)};
    c[1].partial = 1;
    c[1].part_slack = 256 * MIB;
    int picked[2];
    int64_t w = 0;
    assert_int_equal(gs_park_policy_choose(c, 2, 1024 * MIB, 0, UINT64_MAX, 1000 * SEC, 0,
                                           INT64_MAX, picked, &w),
                     GS_PICK_OK);
    assert_string_equal(chosen(picked, 2), "1");
    /* Its lease still counts whole against the host's room. */
    assert_int_equal(gs_park_policy_choose(c, 2, 1024 * MIB, 0, 4096 * MIB, 1000 * SEC, 0,
                                           INT64_MAX, picked, &w),
                     GS_PICK_BUDGET);
    /* A part covers at most what the session holds: with 512 MiB it
     * cannot, and the whole park of the other one is enough alone. */
    c[1].bytes = c[1].host_bytes = 512 * MIB;
    assert_int_equal(gs_park_policy_choose(c, 2, 1024 * MIB, 0, UINT64_MAX, 1000 * SEC, 0,
                                           INT64_MAX, picked, &w),
                     GS_PICK_OK);
    assert_string_equal(chosen(picked, 2), "0");
}

static void busy_sessions_are_never_victims(void **state)
{
    (void)state;
    gs_park_cand_t c[] = {idle(60, 100 * SEC), idle(60, 100 * SEC), idle(60, 50 * SEC)};
    c[0].idle = 0; /* running cell, holding nothing: only for time slicing */
    c[0].switched_out = 1;
    c[2].idle = 0; /* running cell and not switched out (e.g. holds a grant) */
    int picked[3];
    int64_t w = 0;
    assert_int_equal(
        gs_park_policy_choose(c, 3, 100 * MIB, 0, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_NONE);
    /* Time slicing takes the switched-out one, after the idle one. */
    assert_int_equal(
        gs_park_policy_choose(c, 3, 100 * MIB, 1, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_OK);
    assert_string_equal(chosen(picked, 3), "0,1");
    assert_int_equal(
        gs_park_policy_choose(c, 3, 10 * MIB, 1, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_OK);
    assert_string_equal(chosen(picked, 3), "1");
    /* A running cell whose switch does not pay yet (scheduler.h: its turn
     * goes on, its idle gap is short) is waited for until it does. */
    c[0].switched_out = 0;
    c[0].switch_at = 1000 * SEC + 300 * MS;
    assert_int_equal(
        gs_park_policy_choose(c, 3, 100 * MIB, 1, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_WAIT);
    assert_int_equal(w, 1000 * SEC + 300 * MS);
    assert_int_equal(
        gs_park_policy_choose(c, 3, 100 * MIB, 0, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_NONE); /* (not for make_room: only time slicing switches) */
}

/* Issue 17: a cell waiting for the GPU (time slicing) does not wait
 * park_idle_s for a notebook between cells; once that one has been idle
 * for longer than its switch costs, switching it out pays. */
static void time_slicing_takes_an_idle_session_after_its_switch_cost(void **state)
{
    (void)state;
    int64_t now = 1000 * SEC;
    gs_park_cand_t c[] = {idle(60, now - 1 * SEC)};
    c[0].cost_us = 500 * MS;
    int picked[1];
    int64_t w = 0;
    assert_int_equal(
        gs_park_policy_choose(c, 1, 60 * MIB, 1, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_OK);
    /* Not for make_room (no time slicing): park_idle_s. */
    assert_int_equal(
        gs_park_policy_choose(c, 1, 60 * MIB, 0, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_WAIT);
    assert_int_equal(w, now + 29 * SEC);
    /* Idle for less than its switch cost: waited for until then. */
    c[0].cost_us = 3 * SEC;
    assert_int_equal(
        gs_park_policy_choose(c, 1, 60 * MIB, 1, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_WAIT);
    assert_int_equal(w, now + 2 * SEC);
}

/* A notebook whose pauses between cells are usually longer than its
 * switch costs is switched out for a waiting cell as soon as it is idle:
 * waiting for a next cell that will not come soon only idles the GPU.
 * Pauses shorter than the switch (or unknown): it waits its switch cost. */
static void time_slicing_takes_at_once_a_notebook_that_pauses_longer_than_its_switch(void **state)
{
    (void)state;
    int64_t now = 1000 * SEC;
    gs_park_cand_t c[] = {idle(60, now - 10 * MS)};
    c[0].cost_us = 500 * MS;
    c[0].think_us = 2 * SEC;
    int picked[1];
    int64_t w = 0;
    assert_int_equal(
        gs_park_policy_choose(c, 1, 60 * MIB, 1, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_OK);
    /* Not for make_room (no time slicing): park_idle_s as before. */
    assert_int_equal(
        gs_park_policy_choose(c, 1, 60 * MIB, 0, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_WAIT);
    c[0].think_us = 100 * MS;
    assert_int_equal(
        gs_park_policy_choose(c, 1, 60 * MIB, 1, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_WAIT);
    assert_int_equal(w, now + 490 * MS);
}

static void idle_threshold_waits_or_refuses(void **state)
{
    (void)state;
    int64_t now = 1000 * SEC;
    gs_park_cand_t c[] = {idle(60, now - 10 * SEC), idle(60, now - 40 * SEC)};
    int picked[2];
    int64_t w = 0;
    /* The one idle for 40 s is ready; the other becomes so in 20 s. */
    assert_int_equal(
        gs_park_policy_choose(c, 2, 60 * MIB, 0, UINT64_MAX, now, 30 * SEC, INT64_MAX, picked, &w),
        GS_PICK_OK);
    assert_string_equal(chosen(picked, 2), "1");
    assert_int_equal(gs_park_policy_choose(c, 2, 100 * MIB, 0, UINT64_MAX, now, 30 * SEC,
                                           now + 25 * SEC, picked, &w),
                     GS_PICK_WAIT);
    assert_int_equal(w, now + 20 * SEC);
    assert_string_equal(chosen(picked, 2), "");
    assert_int_equal(gs_park_policy_choose(c, 2, 100 * MIB, 0, UINT64_MAX, now, 30 * SEC,
                                           now + 15 * SEC, picked, &w),
                     GS_PICK_NONE);
    /* A session whose grant is being given back (its cell just ended). */
    gs_park_cand_t s[] = {idle(60, now)};
    s[0].idle = 0;
    s[0].settling = 1;
    assert_int_equal(
        gs_park_policy_choose(s, 1, 10 * MIB, 0, UINT64_MAX, now, 0, INT64_MAX, picked, &w),
        GS_PICK_WAIT);
    assert_int_equal(w, now + 100 * MS);
}

static void host_budget_is_respected(void **state)
{
    (void)state;
    gs_park_cand_t c[] = {idle(80, 100 * SEC), idle(30, 200 * SEC), idle(30, 300 * SEC)};
    int picked[3];
    int64_t w = 0;
    /* The oldest does not fit the budget; the two others do, and suffice. */
    assert_int_equal(
        gs_park_policy_choose(c, 3, 50 * MIB, 0, 70 * MIB, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_OK);
    assert_string_equal(chosen(picked, 3), "1,2");
    assert_int_equal(
        gs_park_policy_choose(c, 3, 70 * MIB, 0, 70 * MIB, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_BUDGET);
    assert_string_equal(chosen(picked, 3), "");
}

static void failed_sessions_come_last(void **state)
{
    (void)state;
    gs_park_cand_t c[] = {idle(60, 100 * SEC), idle(60, 200 * SEC)};
    c[0].failed = 1;
    int picked[2];
    int64_t w = 0;
    assert_int_equal(
        gs_park_policy_choose(c, 2, 60 * MIB, 0, UINT64_MAX, 1000 * SEC, 0, INT64_MAX, picked, &w),
        GS_PICK_OK);
    assert_string_equal(chosen(picked, 2), "1");
}

/* ---- costs and settings ------------------------------------------------------------ */

static void rates_follow_measured_copies(void **state)
{
    (void)state;
    double bps = 2e9;
    gs_park_policy_rate_update(&bps, 1ull << 30, 0.25); /* 4.3 GB/s measured */
    assert_true(bps > 3.1e9 && bps < 3.2e9);
    gs_park_policy_rate_update(&bps, 1000, 1.0); /* too small to say anything */
    assert_true(bps > 3.1e9 && bps < 3.2e9);
}

static void set_ok(gs_park_config_t *c, const char *key, const char *json);

/* The deep tier on a virtual clock: a session idle for park_deep_idle_s is
 * checkpointed instead of swapped (when the checkpoint tier may hold it);
 * one parked on the swap tier that long is brought back and checkpointed
 * once the GPU has room and nobody wants it. */
static void long_idleness_goes_to_the_deep_tier(void **state)
{
    (void)state;
    gs_park_config_t c;
    gs_park_policy_config_default(&c, 1, NULL, 64ull << 30);
    assert_int_equal(c.deep_idle_us, 3600 * SEC);
    assert_false(gs_park_policy_deep(&c, 3599 * SEC, 1));
    assert_true(gs_park_policy_deep(&c, 3600 * SEC, 1));
    assert_false(gs_park_policy_deep(&c, 7200 * SEC, 0)); /* plain, park_plain off */
    uint64_t g = 1ull << 30;
    /* Parked long enough: only with room for it and its margin, unwanted. */
    assert_true(gs_park_policy_demote(&c, 3600 * SEC, 8 * g, 9 * g, g, 0, 1));
    assert_false(gs_park_policy_demote(&c, 3600 * SEC, 8 * g, 9 * g - 1, g, 0, 1));
    assert_false(gs_park_policy_demote(&c, 3600 * SEC, 8 * g, 9 * g, g, 1, 1));
    assert_false(gs_park_policy_demote(&c, 3599 * SEC, 8 * g, 9 * g, g, 0, 1));
    assert_false(gs_park_policy_demote(&c, 3600 * SEC, 8 * g, 9 * g, g, 0, 0));
    set_ok(&c, "park_deep_idle_s", "0"); /* never */
    assert_false(gs_park_policy_deep(&c, INT64_MAX / 2, 1));
    assert_false(gs_park_policy_demote(&c, INT64_MAX / 2, 8 * g, 100 * g, g, 0, 1));
    set_ok(&c, "park_deep_idle_s", "\"0.25\"");
    assert_int_equal(c.deep_idle_us, 250 * 1000);
}

static void set_ok(gs_park_config_t *c, const char *key, const char *json)
{
    char err[300];
    json_t *v = json_loads(json, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    if (gs_park_policy_config_set(c, key, v, 64ull << 30, err, sizeof err) != 0)
        fail_msg("%s=%s: %s", key, json, err);
    json_decref(v);
}

static const char *set_bad(gs_park_config_t *c, const char *key, const char *json)
{
    static char err[300];
    json_t *v = json_loads(json, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    gs_park_config_t before = *c;
    assert_int_equal(gs_park_policy_config_set(c, key, v, 64ull << 30, err, sizeof err), -1);
    assert_memory_equal(&before, c, sizeof before);
    json_decref(v);
    return err;
}

static void settings_parse_and_round_trip(void **state)
{
    (void)state;
    const char uuids[2][48] = {"GPU-aaaa", "GPU-bbbb"};
    gs_park_config_t c;
    gs_park_policy_config_default(&c, 2, uuids, 64ull << 30);
    assert_true(c.enabled && !c.plain && c.budget_auto);
    assert_int_equal(c.host_budget, 32ull << 30); /* half the RAM */
    assert_int_equal(c.idle_us, 30 * SEC);
    set_ok(&c, "park_host_budget", "\"12G\"");
    assert_int_equal(c.host_budget, 12ull << 30);
    set_ok(&c, "park_host_budget", "\"512 MiB\"");
    assert_int_equal(c.host_budget, 512ull << 20);
    set_ok(&c, "park_host_budget", "1048576");
    assert_int_equal(c.host_budget, 1ull << 20);
    set_ok(&c, "park_idle_s", "0");
    assert_int_equal(c.idle_us, 0);
    set_ok(&c, "park.1", "\"off\"");
    assert_true(c.gpu_off[1] && !c.gpu_off[0]);
    set_ok(&c, "park.GPU-bbbb", "\"on\"");
    set_ok(&c, "park.GPU-aaaa", "false");
    assert_true(c.gpu_off[0] && !c.gpu_off[1]);
    set_ok(&c, "park", "\"off\"");
    assert_false(c.enabled);
    assert_non_null(strstr(set_bad(&c, "park_host_budget", "\"lots\""), "park_host_budget"));
    /* Found by tests/fuzz/fuzz_settings: 1.46e19 bytes passed, and status
     * then showed a negative budget, which was refused back. */
    assert_non_null(set_bad(&c, "park_host_budget", "\"14610062020259610616\""));
    assert_non_null(set_bad(&c, "park_host_budget", "\"8388608T\"")); /* 2^63 */
    assert_non_null(set_bad(&c, "park_host_budget", "9.3e18"));
    set_ok(&c, "park_host_budget", "\"8388607T\"");
    assert_int_equal(c.host_budget, 8388607ull << 40);
    assert_non_null(strstr(set_bad(&c, "park_idle_s", "-1"), "seconds"));
    assert_non_null(strstr(set_bad(&c, "park_lock_timeout_s", "0"), "> 0"));
    assert_non_null(strstr(set_bad(&c, "park_deep_idle_s", "\"soon\""), "park_deep_idle_s"));
    assert_non_null(strstr(set_bad(&c, "park.7", "\"on\""), "no GPU"));
    assert_non_null(strstr(set_bad(&c, "park_whatever", "1"), "no such setting"));
    assert_true(gs_park_policy_is_key("park") && gs_park_policy_is_key("park.0") &&
                gs_park_policy_is_key("park_idle_s") && !gs_park_policy_is_key("parking") &&
                !gs_park_policy_is_key("policy"));
    /* Every key status shows is accepted back, to the same settings. */
    json_t *j = gs_park_policy_config_json(&c);
    gs_park_config_t again;
    gs_park_policy_config_default(&again, 2, uuids, 64ull << 30);
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val)
    {
        char err[300];
        if (strcmp(key, "park_host_budget_bytes") == 0)
            continue;
        if (gs_park_policy_config_set(&again, key, val, 64ull << 30, err, sizeof err) != 0)
            fail_msg("%s: %s", key, err);
    }
    assert_memory_equal(&c, &again, sizeof c);
    json_decref(j);
    set_ok(&c, "park_host_budget", "\"auto\"");
    assert_int_equal(c.host_budget, 32ull << 30);
}

/* ---- the scheduler's side ----------------------------------------------------------- */

static gs_sched_t *S;
static int64_t NOW;

/* "G:a1", "G:a1/idle=200" (a grant asking for a 200 ms idle release),
 * "R:a1:park". */
static void act_text(char *out, size_t room, size_t len, const gs_sched_action_t *a)
{
    char idle[32] = "";
    if (a->kind == GS_ACT_GRANT && a->idle_release_us)
        snprintf(idle, sizeof idle, "/idle=%lld", (long long)(a->idle_release_us / MS));
    snprintf(out, room, "%s%s:%s%s%s%s", len ? " " : "", a->kind == GS_ACT_GRANT ? "G" : "R",
             a->client, idle, a->reason ? ":" : "", a->reason ? a->reason : "");
}

static const char *acts(void)
{
    static char out[1024];
    out[0] = '\0';
    gs_sched_action_t a;
    while (gs_sched_pop_action(S, &a)) {
        size_t len = strlen(out);
        act_text(out + len, sizeof out - len, len, &a);
    }
    return out;
}

/* The defaults without the boost, for a test to change and apply. */
static gs_sched_config_t sched_config(void)
{
    gs_sched_config_t c;
    gs_sched_config_default(&c);
    c.boost_us = 0;
    return c;
}

static void sched_apply(const gs_sched_config_t *c)
{
    char err[200];
    assert_int_equal(gs_sched_set_config(S, c, err, sizeof err), 0);
}

static void sched_setup(uint64_t mem)
{
    uint64_t m[1] = {mem};
    S = gs_sched_new(1, m);
    NOW = 1000 * SEC;
    gs_sched_config_t c = sched_config();
    sched_apply(&c);
    gs_sched_tick(S, NOW);
}

static int sched_teardown(void **state)
{
    (void)state;
    gs_sched_destroy(&S);
    return 0;
}

/* A notebook: session <name> registered, one client <name>1 using mib. */
static void notebook(const char *name, uint64_t mib)
{
    char client[32];
    snprintf(client, sizeof client, "%s1", name);
    gs_sched_register(S, name, NOW);
    gs_sched_join(S, client, name, NOW);
    gs_sched_memory(S, client, 0, mib * MIB, NOW);
}

static gs_sched_info_t sinfo(const char *session)
{
    gs_sched_info_t i;
    assert_int_equal(gs_sched_info(S, session, 0, NOW, &i), 0);
    return i;
}

static uint64_t last_grant;

static const char *acts_keep(void)
{
    static char out[1024];
    out[0] = '\0';
    gs_sched_action_t a;
    while (gs_sched_pop_action(S, &a)) {
        size_t len = strlen(out);
        if (a.kind == GS_ACT_GRANT)
            last_grant = a.grant_id;
        act_text(out + len, sizeof out - len, len, &a);
    }
    return out;
}

static void parked_sessions_are_never_granted(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    notebook("a", 60);
    gs_sched_set_residency(S, "a", GS_SCHED_PARKED, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts(), "");
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    gs_sched_set_residency(S, "a", GS_SCHED_MOVING, NOW);
    assert_string_equal(acts(), "");
    gs_sched_set_residency(S, "a", GS_SCHED_RESIDENT, NOW);
    assert_string_equal(acts(), "G:a1");
    assert_int_equal(sinfo("a").residency, GS_SCHED_RESIDENT);
}

static void parking_a_holder_revokes_it_first(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    notebook("a", 60);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:a1");
    gs_sched_set_residency(S, "a", GS_SCHED_MOVING, NOW);
    assert_string_equal(acts(), "R:a1:park");
    assert_true(gs_sched_session_holding(S, "a"));
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_false(gs_sched_session_holding(S, "a"));
    /* Still has work: it waits, and is not granted while moving. */
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts(), "");
}

/* a and b of 60 MiB on a GPU of 100 MiB: one of them (`parked`) is out. */
static void two_that_do_not_fit(const char *parked)
{
    sched_setup(100 * MIB);
    notebook("a", 60);
    notebook("b", 60);
    gs_sched_set_residency(S, parked, GS_SCHED_PARKED, NOW);
}

static void a_parked_cell_is_queued_and_slices_the_holder(void **state)
{
    (void)state;
    two_that_do_not_fit("a");
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_acquire(S, "b1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:b1");
    /* a's cell starts: its process is locked and cannot ask, so the park
     * module queues it; 60 + 60 MiB do not fit, so b's slice (2 s) ends. */
    NOW += 100 * MS;
    gs_sched_cell(S, "a", 1, NOW);
    assert_int_equal(gs_sched_demand(S, "a", 0, 1, NOW), 0);
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    assert_true(sinfo("a").demand);
    assert_string_equal(acts(), "");
    assert_int_equal(gs_sched_next_deadline(S), NOW - 100 * MS + 2 * SEC);
    NOW = gs_sched_next_deadline(S);
    gs_sched_tick(S, NOW);
    assert_string_equal(acts(), "R:b1:quantum");
    gs_sched_release(S, "b1", 0, last_grant, NOW);
    assert_true(sinfo("b").switchable); /* its turn is over: parking takes it */
    gs_sched_set_residency(S, "b", GS_SCHED_MOVING, NOW);
    gs_sched_acquire(S, "b1", 0, -1, -1, NOW); /* b still has work: it waits */
    assert_string_equal(acts(), "");
    gs_sched_set_residency(S, "b", GS_SCHED_PARKED, NOW);
    /* Unparked: a keeps its place until its acquire comes, then gets a
     * slice of at least its switch cost x 10 (60 MiB out at 24 MiB/s and
     * back at 60 MiB/s: 3.5 s, a slice of 35 s). */
    gs_sched_set_move_rates(S, "a", 0, 24.0 * MIB, 60.0 * MIB);
    gs_sched_set_residency(S, "a", GS_SCHED_RESIDENT, NOW);
    assert_string_equal(acts(), "");
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    assert_int_equal(sinfo("a").switch_cost_us, 3500 * MS);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    /* b waits for its memory: a is asked to give the GPU back soon after
     * it goes idle, a tenth of its switch cost (200 ms at most). */
    assert_string_equal(acts(), "G:a1/idle=200");
    assert_int_equal(sinfo("a").quantum_us, 35 * SEC);
    assert_false(sinfo("a").demand);
}

/* Two notebooks that do not fit, both with running cells: the one just
 * brought back is granted although the other (parked) waited first; had it
 * waited behind the other's reservation, parking would have brought the
 * other back for it, and so on for ever, neither ever running.  The parked
 * one's wait ends the turn instead. */
static void a_resident_waiter_is_not_held_behind_a_parked_one(void **state)
{
    (void)state;
    two_that_do_not_fit("a");
    gs_sched_set_residency(S, "b", GS_SCHED_PARKED, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_demand(S, "a", 0, 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    NOW += 10 * MS;
    gs_sched_acquire(S, "b1", 0, -1, -1, NOW);
    /* Parking brought b back first (say a's room was not free yet). */
    gs_sched_set_residency(S, "b", GS_SCHED_RESIDENT, NOW);
    assert_string_equal(acts_keep(), "G:b1");
    int64_t t0 = NOW;
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    /* a still waits: b's turn (adaptive_min, 2 s) ends for it. */
    assert_int_equal(gs_sched_next_deadline(S), t0 + 2 * SEC);
    NOW = t0 + 2 * SEC;
    gs_sched_tick(S, NOW);
    assert_string_equal(acts_keep(), "R:b1:quantum");
}

/* Two cells started together, the parked one's event first: once the
 * resident one's cell event is in (parking waits 20 ms for it before it
 * makes room, park_poll.c), that notebook keeps its memory for its switch
 * cost and is granted at once when it asks. */
static void cells_started_together_the_resident_one_runs(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    gs_sched_config_t c;
    gs_sched_config_default(&c); /* the boost on, as shipped */
    sched_apply(&c);
    notebook("a", 60);
    notebook("b", 60);
    gs_sched_set_move_rates(S, "a", 0, 1e8, 1e8);
    gs_sched_set_move_rates(S, "b", 0, 1e8, 1e8);
    gs_sched_set_residency(S, "a", GS_SCHED_PARKED, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_demand(S, "a", 0, 1, NOW);
    assert_true(sinfo("b").switchable); /* between cells: the race */
    gs_sched_cell(S, "b", 1, NOW);
    assert_false(sinfo("b").switchable);
    NOW += 5 * MS;
    gs_sched_acquire(S, "b1", 0, -1, -1, NOW);
    /* (asked to give the GPU back a tenth of its switch cost after it goes
     * idle: a parked waiter wants a switch) */
    assert_string_equal(acts_keep(), "G:b1/idle=125");
}

/* Issue 17: a turn lasts max(the adaptive slice, 10 x the switch cost),
 * the cost priced with the rates parking measured, at every decision. */
static void the_slice_follows_the_measured_switch_cost(void **state)
{
    (void)state;
    two_that_do_not_fit("b");
    /* 60 MiB at 120 MiB/s each way: 1 s a switch, turns of 10 s. */
    gs_sched_set_move_rates(S, "a", 0, 120.0 * MIB, 120.0 * MIB);
    assert_int_equal(sinfo("a").switch_cost_us, 1 * SEC);
    assert_int_equal(sinfo("a").min_slice_us, 10 * SEC);
    int64_t t0 = NOW;
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:a1");
    assert_int_equal(sinfo("a").quantum_us, 10 * SEC);
    assert_int_equal(sinfo("a").turn_end_us, t0 + 10 * SEC);
    /* b's cell waits for a's memory. */
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_demand(S, "b", 0, 1, NOW);
    assert_int_equal(gs_sched_next_deadline(S), t0 + 10 * SEC);
    /* A switch is wanted: a's grant again, asking for an idle release of
     * a tenth of its switch cost. */
    assert_string_equal(acts_keep(), "G:a1/idle=100");
    /* Parking measures slower copies: the turn grows with the cost. */
    NOW += 3 * SEC;
    gs_sched_set_move_rates(S, "a", 0, 40.0 * MIB, 60.0 * MIB); /* 1.5 + 1 s */
    gs_sched_tick(S, NOW);
    assert_int_equal(sinfo("a").turn_end_us, t0 + 25 * SEC);
    assert_int_equal(gs_sched_next_deadline(S), t0 + 25 * SEC);
    assert_string_equal(acts_keep(), "G:a1/idle=200");
    /* ... and shrinks with faster ones, to no less than adaptive_min. */
    gs_sched_set_move_rates(S, "a", 0, 600.0 * MIB, 600.0 * MIB);
    gs_sched_tick(S, NOW); /* 3 s into a turn of 2 s: over */
    assert_string_equal(acts_keep(), "G:a1/idle=20 R:a1:quantum");
    assert_int_equal(sinfo("a").turn_end_us, 0);
    /* Memory that cannot move: no switch cost, the adaptive slice. */
    gs_sched_set_move_rates(S, "a", 0, 0, 0);
    assert_int_equal(sinfo("a").switch_cost_us, 0);
}

/* A switch on the swap tier moves only part of a session (what the one
 * coming back lacks), both ways at once: parking says so, and the switch
 * cost, and with it the turn, is priced on what moves. */
static void a_partial_overlapped_switch_is_priced_on_what_moves(void **state)
{
    (void)state;
    two_that_do_not_fit("b");
    /* A whole park: 60 MiB out and back at 120 MiB/s, 1 s. */
    gs_sched_move_t m = {120.0 * MIB, 120.0 * MIB, 0, 0};
    assert_int_equal(gs_sched_set_move(S, "a", 0, &m), 0);
    assert_int_equal(sinfo("a").switch_cost_us, 1 * SEC);
    /* 24 MiB each way: 0.4 s in sequence ... */
    m.bytes = 24 * MIB;
    gs_sched_set_move(S, "a", 0, &m);
    assert_int_equal(sinfo("a").switch_cost_us, 400 * MS);
    /* ... 0.2 s beside the other session's way in. */
    m.overlapped = 1;
    gs_sched_set_move(S, "a", 0, &m);
    assert_int_equal(sinfo("a").switch_cost_us, 200 * MS);
    assert_int_equal(sinfo("a").min_slice_us, 2 * SEC); /* 10 x, adaptive_min_s */
    assert_int_equal(gs_sched_set_move(S, "nobody", 0, &m), -1);
    assert_int_equal(gs_sched_set_move(S, "a", 0, NULL), -1);
}

/* a (60 MiB, 2 s a switch: turns of 20 s) holds the GPU in a running
 * cell, and b (60 MiB, parked) waits for a's memory with a cell of its
 * own, asked for by parking.  Returns when a's turn began. */
static int64_t a_holds_and_b_waits_parked(void)
{
    two_that_do_not_fit("b");
    gs_sched_set_move_rates(S, "a", 0, 60.0 * MIB, 60.0 * MIB);
    int64_t t0 = NOW;
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:a1");
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_demand(S, "b", 0, 1, NOW);
    assert_true(sinfo("b").demand);
    assert_string_equal(acts_keep(), "G:a1/idle=200"); /* a switch is wanted */
    return t0;
}

/* Issue 17: a running cell that gives the GPU back between its GPU phases
 * is switched out only when its turn is over, or its GPU has been idle for
 * longer than a switch costs, or its measured idle gaps are that long;
 * until then it keeps its turn and is granted again at once. */
static void a_busy_cell_is_never_switched_out_early(void **state)
{
    (void)state;
    int64_t t0 = a_holds_and_b_waits_parked();

    /* A CPU phase: a's hook gives the GPU back by itself (idle). */
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    gs_sched_info_t a = sinfo("a");
    assert_false(a.switchable); /* 200 ms later parking would have taken it */
    assert_int_equal(a.switchable_at_us, NOW + 2 * SEC);
    /* Back after 500 ms: granted at once, although b waits first. */
    NOW += 500 * MS;
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:a1/idle=200");
    assert_int_equal(sinfo("a").idle_gap_us, 500 * MS);
    assert_int_equal(sinfo("a").turn_end_us, t0 + 20 * SEC); /* the same turn */

    /* Idle for longer than a switch costs: now it may go. */
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    NOW += 2 * SEC - 1;
    assert_false(sinfo("a").switchable);
    NOW += 1;
    assert_true(sinfo("a").switchable);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW); /* not switched out: still its turn */
    assert_string_equal(acts_keep(), "G:a1/idle=200");

    /* Its gaps are as long as a switch (median of 0.5, 2 and 2.5 s): the
     * next idle release may be switched out at once. */
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    NOW += 2500 * MS;
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:a1/idle=200");
    assert_int_equal(sinfo("a").idle_gap_us, 2 * SEC);
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_true(sinfo("a").switchable);

    /* Holding at the end of its turn: revoked for b, and then it may go. */
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "G:a1/idle=200");
    assert_int_equal(gs_sched_next_deadline(S), t0 + 20 * SEC);
    NOW = t0 + 20 * SEC;
    gs_sched_tick(S, NOW);
    assert_string_equal(acts_keep(), "R:a1:quantum");
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_true(sinfo("a").switchable);
    assert_int_equal(sinfo("a").turn_end_us, 0);
}

/* The end of a turn while the holder is between two GPU phases, a parked
 * waiter needing its memory: what is left of the turn under its idle
 * release (200 ms here) is not granted (it would be revoked as it
 * arrived), and a new turn is not begun ahead of the waiter while parking
 * switches it out; if parking has not within a switch cost, it goes on. */
static void the_end_of_a_turn_is_the_parked_waiters(void **state)
{
    (void)state;
    int64_t t0 = a_holds_and_b_waits_parked();
    /* 150 ms before its turn ends, a gives the GPU back and asks again. */
    NOW = t0 + 20 * SEC - 150 * MS;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_true(sinfo("a").switchable); /* its turn is over for switches */
    NOW += 1 * MS;
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    assert_string_equal(acts_keep(), "");
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    assert_true(sinfo("a").switchable);
    /* Parking did not take it (say the host pool was full): a switch cost
     * after its turn's end, it goes on with a new turn. */
    assert_int_equal(gs_sched_next_deadline(S), t0 + 22 * SEC);
    NOW = t0 + 22 * SEC;
    gs_sched_tick(S, NOW);
    assert_string_equal(acts_keep(), "G:a1/idle=200");
    assert_int_equal(sinfo("a").turn_end_us, NOW + 20 * SEC);
}

/* Issue 17 under the exclusive policy: a hold begins a turn of tq (or 10 x
 * the switch cost), and a running cell that gives the GPU back between its
 * GPU phases is not switched out before its turn is over.  (Without a
 * turn it was switchable at every CPU phase: on the H200 a pair of 32 GiB
 * jobs switched every 2 s under tq = 20 s.) */
static void an_exclusive_holder_keeps_its_turn_between_gpu_phases(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    gs_sched_config_t c = sched_config();
    c.policy = GS_POLICY_EXCLUSIVE;
    c.tq_us = 20 * SEC;
    sched_apply(&c);
    notebook("a", 60);
    notebook("b", 60);
    gs_sched_set_residency(S, "b", GS_SCHED_PARKED, NOW);
    gs_sched_set_move_rates(S, "a", 0, 600.0 * MIB, 600.0 * MIB); /* 0.2 s a switch */
    int64_t t0 = NOW;
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    acts_keep();
    assert_int_equal(sinfo("a").turn_end_us, t0 + 20 * SEC);
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_demand(S, "b", 0, 1, NOW);
    /* A CPU phase of 100 ms: a keeps its turn. */
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_false(sinfo("a").switchable);
    NOW += 100 * MS;
    acts_keep();
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    /* Granted again at once, though b (parked) waits first: b waits for
     * a's turn to end anyway (before, each waited for the other). */
    assert_string_equal(acts_keep(), "G:a1");
    assert_int_equal(sinfo("a").turn_end_us, t0 + 20 * SEC); /* the same turn */
    /* After its turn, the next CPU phase lets b in. */
    NOW = t0 + 20 * SEC;
    gs_sched_tick(S, NOW);
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_true(sinfo("a").switchable);
}

/* Under exclusive with quantum tq: a (60 MiB, moving at rate bytes/s each
 * way) holds the GPU for a cell that has just started, b (60 MiB) waits
 * parked for it with a cell of its own. */
static void exclusive_pair(int64_t tq, double rate)
{
    sched_setup(100 * MIB);
    gs_sched_config_t c = sched_config();
    c.policy = GS_POLICY_EXCLUSIVE;
    c.tq_us = tq;
    sched_apply(&c);
    notebook("a", 60);
    notebook("b", 60);
    gs_sched_set_residency(S, "b", GS_SCHED_PARKED, NOW);
    gs_sched_set_move_rates(S, "a", 0, rate, rate);
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_demand(S, "b", 0, 1, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    acts_keep();
}

/* Issue 17: a GPU phase that the rest of a turn cannot hold is not begun
 * in it.  Phases of 1.2 s in turns of 2 s: after the first, 0.8 s are
 * left, so the turn ends at that idle release and the session is
 * switchable there, in its CPU phase (before, its second phase was
 * revoked half way and brought back for the rest: two switches more).
 * Phases of 0.5 s keep the turn (and the session) until one would not
 * fit. */
static void a_phase_that_the_turn_cannot_hold_ends_the_turn(void **state)
{
    (void)state;
    exclusive_pair(2 * SEC, 600.0 * MIB); /* 0.2 s a switch */
    int64_t t0 = NOW;
    assert_int_equal(sinfo("a").turn_end_us, t0 + 2 * SEC);
    /* Phases of 0.5 s with CPU phases of 50 ms (shorter than a switch):
     * after each of the first two a keeps its turn and is granted again;
     * after the third, 1.6 s in, 0.4 s are left: the turn is over. */
    for (int k = 0; k < 2; k++) {
        NOW += 500 * MS;
        gs_sched_release(S, "a1", 0, last_grant, NOW);
        assert_false(sinfo("a").switchable);
        NOW += 50 * MS;
        gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
        assert_string_equal(acts_keep(), "G:a1");
    }
    NOW += 500 * MS;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_true(sinfo("a").switchable);
    /* The same with a phase of 1.2 s. */
    sched_teardown(NULL);
    exclusive_pair(2 * SEC, 600.0 * MIB);
    t0 = NOW;
    /* A phase of 1.2 s: 0.8 s are left, less than one phase. */
    NOW += 1200 * MS;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_true(sinfo("a").switchable);
    assert_int_equal(sinfo("a").turn_end_us, t0 + 2 * SEC);
}

/* Issue 17: gaps measured shorter than a switch: an idle GPU for as long
 * as a switch costs is no sign of a long gap; twice the usual gap is.
 * Gaps of 0.4 s, a switch of 0.5 s: not switchable 0.5 s into a gap,
 * switchable 0.8 s into it. */
static void regular_short_gaps_keep_the_memory_past_a_switch_cost(void **state)
{
    (void)state;
    exclusive_pair(20 * SEC, 240.0 * MIB); /* 0.5 s a switch */
    for (int k = 0; k < 3; k++) {
        NOW += 500 * MS;
        gs_sched_release(S, "a1", 0, last_grant, NOW);
        NOW += 400 * MS;
        gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
        assert_string_equal(acts_keep(), "G:a1");
    }
    assert_int_equal(sinfo("a").idle_gap_us, 400 * MS);
    NOW += 500 * MS;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    int64_t gap0 = NOW;
    NOW += 500 * MS;
    assert_false(sinfo("a").switchable);
    assert_int_equal(sinfo("a").switchable_at_us, gap0 + 800 * MS);
    NOW += 300 * MS;
    assert_true(sinfo("a").switchable);
}

/* Issue 17: a cell that has just started and does not fit takes what it
 * needs, a switch: a trainer's turn, grown with its long cell, is cut to
 * the shortest a switch allows, max(adaptive_min_s, 10 x its switch
 * cost); a waiter that is not a new cell waits for the whole turn. */
static void a_new_cell_cuts_a_long_turn_to_the_shortest(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    notebook("t", 60);
    notebook("s", 60);
    char err[200];
    json_t *v = json_integer(500);
    assert_int_equal(gs_sched_set(S, "boost_ms", v, err, sizeof err), 0);
    json_decref(v);
    gs_sched_set_residency(S, "s", GS_SCHED_PARKED, NOW);
    gs_sched_set_move_rates(S, "t", 0, 600.0 * MIB, 600.0 * MIB); /* 0.2 s a switch */
    gs_sched_cell(S, "t", 1, NOW);
    gs_sched_acquire(S, "t1", 0, -1, -1, NOW);
    acts_keep();
    assert_int_equal(sinfo("t").turn_end_us, NOW + 2 * SEC); /* a new cell: adaptive_min */
    NOW += 10 * SEC;
    gs_sched_release(S, "t1", 0, last_grant, NOW);
    gs_sched_acquire(S, "t1", 0, -1, -1, NOW); /* 10 s into its cell: a turn of 10 s */
    acts_keep();
    int64_t t0 = NOW;
    assert_int_equal(sinfo("t").turn_end_us, t0 + 10 * SEC);
    /* s's cell starts, parked: 2 s into t's turn, the turn ends for it. */
    NOW += 500 * MS;
    gs_sched_cell(S, "s", 1, NOW);
    gs_sched_demand(S, "s", 0, 1, NOW);
    assert_int_equal(gs_sched_next_deadline(S), t0 + 2 * SEC);
    NOW = t0 + 2 * SEC;
    gs_sched_tick(S, NOW);
    assert_string_equal(acts_keep(), "G:t1/idle=20 R:t1:quantum");
    /* Without a new cell (s asks outside one: a program), the whole turn. */
    gs_sched_release(S, "t1", 0, last_grant, NOW);
    gs_sched_cell(S, "s", 0, NOW);
    gs_sched_demand(S, "s", 0, 0, NOW);
    gs_sched_acquire(S, "t1", 0, -1, -1, NOW);
    acts_keep();
    t0 = NOW;
    gs_sched_demand(S, "s", 0, 1, NOW);
    assert_int_equal(gs_sched_next_deadline(S), sinfo("t").turn_end_us);
    assert_true(sinfo("t").turn_end_us > t0 + 10 * SEC);
}

static void cell_end_drops_the_demand(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    notebook("a", 60);
    gs_sched_set_residency(S, "a", GS_SCHED_PARKED, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_demand(S, "a", 0, 1, NOW);
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    gs_sched_cell(S, "a", 0, NOW);
    assert_int_equal(sinfo("a").state, GS_SESS_IDLE);
    assert_false(sinfo("a").demand);
    /* And the park module takes back a demand no acquire followed. */
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_demand(S, "a", 0, 1, NOW);
    gs_sched_set_residency(S, "a", GS_SCHED_RESIDENT, NOW);
    assert_int_equal(sinfo("a").state, GS_SESS_WAITING);
    gs_sched_demand(S, "a", 0, 0, NOW);
    assert_int_equal(sinfo("a").state, GS_SESS_IDLE);
    assert_string_equal(acts(), "");
}

static void no_boost_while_parked(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    char err[200];
    json_t *v = json_integer(500);
    assert_int_equal(gs_sched_set(S, "boost_ms", v, err, sizeof err), 0);
    json_decref(v);
    notebook("a", 30);
    notebook("b", 30);
    gs_sched_cell(S, "b", 1, NOW);
    gs_sched_acquire(S, "b1", 0, -1, -1, NOW);
    NOW += 1 * SEC; /* b's boost is used up */
    gs_sched_tick(S, NOW);
    assert_string_equal(acts(), "G:b1");
    gs_sched_set_residency(S, "a", GS_SCHED_PARKED, NOW);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_demand(S, "a", 0, 1, NOW);
    /* a's new cell would preempt b for its boost: not while a is parked. */
    assert_string_equal(acts(), "");
    assert_false(sinfo("b").revokes);
}

/* A release that comes after the cell has ended (the hook's idle release
 * follows the last kernel by its idle time, the cell's end may come first)
 * opens no gap: the next cell's first acquire, seconds later, would close
 * it, and every short CPU phase after that would look long enough to be
 * switched out in (H200, a 90/10 pair of 32 GiB: gaps of 22-34 s). */
static void the_pause_between_cells_is_no_idle_gap(void **state)
{
    (void)state;
    sched_setup(100 * MIB);
    /* The scheduler off, as in the evaluation before its runs: a cell's
     * end revokes nothing then. */
    gs_sched_config_t c = sched_config();
    c.enabled = 0;
    sched_apply(&c);
    notebook("a", 60);
    notebook("b", 60);
    gs_sched_set_residency(S, "b", GS_SCHED_PARKED, NOW);
    gs_sched_set_move_rates(S, "a", 0, 60.0 * MIB, 60.0 * MIB); /* 2 s a switch */
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    acts_keep();
    NOW += 1 * SEC;
    gs_sched_cell(S, "a", 0, NOW); /* the cell ends ... */
    NOW += 200 * MS;
    gs_sched_release(S, "a1", 0, last_grant, NOW); /* ... before the idle release */
    NOW += 30 * SEC;                               /* the user thinks */
    c.enabled = 1;
    sched_apply(&c);
    gs_sched_cell(S, "a", 1, NOW);
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    acts_keep();
    assert_int_equal(sinfo("a").idle_gap_us, 0); /* no gap measured */
    /* A 100 ms CPU phase in the new cell is one. */
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    NOW += 100 * MS;
    gs_sched_acquire(S, "a1", 0, -1, -1, NOW);
    acts_keep();
    assert_int_equal(sinfo("a").idle_gap_us, 100 * MS);
    NOW += 1 * SEC;
    gs_sched_release(S, "a1", 0, last_grant, NOW);
    assert_false(sinfo("a").switchable); /* its turn goes on */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(least_recently_active_goes_first),
        cmocka_unit_test(never_more_than_needed),
        cmocka_unit_test(the_smallest_move_makes_room),
        cmocka_unit_test(busy_sessions_are_never_victims),
        cmocka_unit_test(idle_threshold_waits_or_refuses),
        cmocka_unit_test(time_slicing_takes_an_idle_session_after_its_switch_cost),
        cmocka_unit_test(time_slicing_takes_at_once_a_notebook_that_pauses_longer_than_its_switch),
        cmocka_unit_test(host_budget_is_respected),
        cmocka_unit_test(failed_sessions_come_last),
        cmocka_unit_test(rates_follow_measured_copies),
        cmocka_unit_test(long_idleness_goes_to_the_deep_tier),
        cmocka_unit_test(settings_parse_and_round_trip),
        cmocka_unit_test_teardown(parked_sessions_are_never_granted, sched_teardown),
        cmocka_unit_test_teardown(parking_a_holder_revokes_it_first, sched_teardown),
        cmocka_unit_test_teardown(a_parked_cell_is_queued_and_slices_the_holder, sched_teardown),
        cmocka_unit_test_teardown(cells_started_together_the_resident_one_runs, sched_teardown),
        cmocka_unit_test_teardown(a_resident_waiter_is_not_held_behind_a_parked_one,
                                  sched_teardown),
        cmocka_unit_test_teardown(the_slice_follows_the_measured_switch_cost, sched_teardown),
        cmocka_unit_test_teardown(a_partial_overlapped_switch_is_priced_on_what_moves,
                                  sched_teardown),
        cmocka_unit_test_teardown(the_end_of_a_turn_is_the_parked_waiters, sched_teardown),
        cmocka_unit_test_teardown(a_busy_cell_is_never_switched_out_early, sched_teardown),
        cmocka_unit_test_teardown(an_exclusive_holder_keeps_its_turn_between_gpu_phases,
                                  sched_teardown),
        cmocka_unit_test_teardown(the_pause_between_cells_is_no_idle_gap, sched_teardown),
        cmocka_unit_test_teardown(a_phase_that_the_turn_cannot_hold_ends_the_turn, sched_teardown),
        cmocka_unit_test_teardown(regular_short_gaps_keep_the_memory_past_a_switch_cost,
                                  sched_teardown),
        cmocka_unit_test_teardown(a_new_cell_cuts_a_long_turn_to_the_shortest, sched_teardown),
        cmocka_unit_test_teardown(cell_end_drops_the_demand, sched_teardown),
        cmocka_unit_test_teardown(no_boost_while_parked, sched_teardown),
    };
    return cmocka_run_group_tests_name("park", tests, NULL, NULL);
}
