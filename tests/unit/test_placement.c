/*
 * test_placement.c - which GPU a session starts on (broker/placement.h):
 * spread takes the GPU with the least memory committed, then the fewest
 * sessions; pack fills the first GPU with room before the next; a session
 * that wants several gets them in GPU order; sessions keep their GPUs; an
 * admin's gpu_access (users and groups to GPUs) is read and applied.
 */
#include "unit_fixture.h"

#include "gpu_access.h"
#include "placement.h"

static void policies_by_name(void **state)
{
    (void)state;
    assert_int_equal(gs_place_policy_parse("spread"), GS_PLACE_SPREAD);
    assert_int_equal(gs_place_policy_parse("pack"), GS_PLACE_PACK);
    assert_int_equal(gs_place_policy_parse("off"), GS_PLACE_OFF);
    assert_int_equal(gs_place_policy_parse("Spread"), -1);
    assert_int_equal(gs_place_policy_parse(NULL), -1);
    assert_string_equal(gs_place_policy_name(GS_PLACE_PACK), "pack");
}

/* Eight notebooks on four empty GPUs: two each, in turn. */
static void spread_evens_out_memory_then_sessions(void **state)
{
    (void)state;
    gs_place_gpu_t g[4] = {{0, 80 * GIB, 0}, {0, 80 * GIB, 0}, {0, 80 * GIB, 0}, {0, 80 * GIB, 0}};
    int out[4];
    for (int k = 0; k < 8; k++) {
        assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 4, 1, ~0ull, out), 1);
        assert_int_equal(out[0], k % 4);
        g[out[0]].sessions++;
    }
    /* Memory first: GPU 2 holds the least, though it has the most sessions. */
    g[0].committed = 40 * GIB, g[1].committed = 30 * GIB, g[2].committed = 1 * GIB;
    g[3].committed = 20 * GIB, g[2].sessions = 5;
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 4, 1, ~0ull, out), 1);
    assert_int_equal(out[0], 2);
    /* Two: the two emptiest, in GPU order. */
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 4, 2, ~0ull, out), 2);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
}

static void pack_fills_one_gpu_before_the_next(void **state)
{
    (void)state;
    gs_place_gpu_t g[4] = {{0, 80 * GIB, 0}, {0, 80 * GIB, 0}, {0, 80 * GIB, 0}, {0, 80 * GIB, 0}};
    int out[4];
    for (int k = 0; k < 5; k++) {
        assert_int_equal(gs_place_choose(GS_PLACE_PACK, g, 4, 1, ~0ull, out), 1);
        assert_int_equal(out[0], 0);
        g[0].sessions++;
        g[0].committed += 10 * GIB;
    }
    g[0].committed = 80 * GIB; /* full: the next one */
    assert_int_equal(gs_place_choose(GS_PLACE_PACK, g, 4, 1, ~0ull, out), 1);
    assert_int_equal(out[0], 1);
    assert_int_equal(gs_place_choose(GS_PLACE_PACK, g, 4, 2, ~0ull, out), 2);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 2);
    /* All full: the emptiest. */
    for (int i = 0; i < 4; i++)
        g[i].committed = (uint64_t)(90 - i) * GIB;
    assert_int_equal(gs_place_choose(GS_PLACE_PACK, g, 4, 1, ~0ull, out), 1);
    assert_int_equal(out[0], 3);
}

static void more_than_there_are_gets_them_all(void **state)
{
    (void)state;
    gs_place_gpu_t g[2] = {{0, GIB, 0}, {0, GIB, 0}};
    int out[2];
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 2, 5, ~0ull, out), 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 0, 1, ~0ull, out), 0);
}

/* An admin's gpu_access: only the allowed GPUs, however empty the others. */
static void only_allowed_gpus(void **state)
{
    (void)state;
    gs_place_gpu_t g[4] = {
        {9 * GIB, 80 * GIB, 3}, {0, 80 * GIB, 0}, {5 * GIB, 80 * GIB, 1}, {0, 80 * GIB, 0}};
    int out[4];
    uint64_t mask = 1u << 0 | 1u << 2;
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 4, 1, mask, out), 1);
    assert_int_equal(out[0], 2);
    assert_int_equal(gs_place_choose(GS_PLACE_PACK, g, 4, 1, mask, out), 1);
    assert_int_equal(out[0], 0);
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 4, 3, mask, out), 2);
    assert_int_equal(gs_place_choose(GS_PLACE_SPREAD, g, 4, 1, 0, out), 0);
}

static void gpu_access_rules(void **state)
{
    (void)state;
    gs_gpu_access_t a;
    char err[200];
    /* root by name and by its group: the union; anyone else: every GPU. */
    assert_int_equal(gs_gpu_access_parse("root:0,1  @root:3", &a, err, sizeof err), 0);
    assert_int_equal(a.n, 2);
    assert_int_equal(gs_gpu_access_mask(&a, 0), 0xbu);
    assert_true(gs_gpu_access_mask(&a, 65534) == ~0ull);
    assert_int_equal(gs_gpu_access_parse("root:2-4", &a, err, sizeof err), 0);
    assert_int_equal(gs_gpu_access_mask(&a, 0), 0x1cu);
    assert_int_equal(gs_gpu_access_parse("", &a, err, sizeof err), 0);
    assert_int_equal(a.n, 0);
    struct {
        const char *text, *says;
    } bad[] = {
        {"nosuchuser-xyz:0", "no user named \"nosuchuser-xyz\""},
        {"@nosuchgroup-xyz:0", "no group named \"nosuchgroup-xyz\""},
        {"root", "expected USER:GPUS or @GROUP:GPUS"},
        {"root:", "the GPUs are indices and ranges"},
        {"root:3-1", "the GPUs are indices and ranges"},
        {"root:64", "the GPUs are indices and ranges"},
        {"root:0;1", "the GPUs are indices and ranges"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(gs_gpu_access_parse(bad[i].text, &a, err, sizeof err), -1);
        assert_non_null(strstr(err, bad[i].says));
        assert_int_equal(a.n, 0);
    }
}

static void count(const char *session, const int *gpus, int n, void *arg)
{
    (void)session;
    int *per = arg;
    for (int i = 0; i < n; i++)
        per[gpus[i]]++;
}

static void sessions_keep_their_gpus(void **state)
{
    (void)state;
    gs_placement_t *p = gs_placement_new();
    assert_non_null(p);
    int g[4];
    assert_int_equal(gs_placement_get(p, "a", g, 4), 0);
    assert_int_equal(gs_placement_set(p, "a", (int[]){2}, 1), 0);
    assert_int_equal(gs_placement_set(p, "b", (int[]){0, 1}, 2), 0);
    assert_int_equal(gs_placement_get(p, "a", g, 4), 1);
    assert_int_equal(g[0], 2);
    assert_int_equal(gs_placement_get(p, "b", g, 4), 2);
    assert_int_equal(g[1], 1);
    int per[4] = {0};
    gs_placement_each(p, count, per);
    assert_int_equal(per[0] + per[1] + per[2], 3);
    gs_placement_forget(p, "b");
    assert_int_equal(gs_placement_get(p, "b", g, 4), 0);
    assert_int_equal(gs_placement_set(p, "c", g, 0), -1);
    gs_placement_destroy(&p);
    assert_null(p);
}

static int pid_alive(long pid, unsigned long long start, void *arg)
{
    (void)start;
    return pid != *(long *)arg; /* the one pid said to be gone */
}

/* Placements made by hellos (issue 34, item 5): pending until their
 * session exists, dropped when the asking process is gone (after a while),
 * and at most
 * cap per uid (the oldest goes first); another uid's are never touched. */
static void pending_placements_are_bounded_per_uid(void **state)
{
    (void)state;
    gs_placement_t *p = gs_placement_new();
    int g[4], mine = 0;
    long gone = 0;
    char key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "junk%d@1002", i);
        assert_int_equal(gs_placement_prune(p, 1002, 4, 0, 0, pid_alive, &gone), i < 4 ? 0 : 1);
        assert_int_equal(gs_placement_set_pending(p, key, (int[]){i % 4}, 1, 1002, 500 + i, 0, 0),
                         0);
    }
    assert_int_equal(gs_placement_pending(p, 1002, &mine), 4);
    assert_int_equal(mine, 4);
    assert_int_equal(gs_placement_get(p, "junk5@1002", g, 4), 0); /* oldest went first */
    assert_int_equal(gs_placement_get(p, "junk9@1002", g, 4), 1);
    /* Alice's, one confirmed (her session joined), one pending. */
    assert_int_equal(gs_placement_set_pending(p, "train@1001", (int[]){1}, 1, 1001, 77, 0, 0), 0);
    gs_placement_confirm(p, "train@1001");
    assert_int_equal(gs_placement_set_pending(p, "eval@1001", (int[]){2}, 1, 1001, 78, 0, 0), 0);
    assert_int_equal(gs_placement_pending(p, 1001, &mine), 5);
    assert_int_equal(mine, 1);
    /* Mallory's storm goes on: Alice keeps both. */
    assert_int_equal(gs_placement_prune(p, 1002, 4, 0, 0, pid_alive, &gone), 1);
    assert_int_equal(gs_placement_get(p, "train@1001", g, 4), 1);
    assert_int_equal(gs_placement_get(p, "eval@1001", g, 4), 1);
    /* The process that asked for eval is gone, nothing joined: dropped;
     * train, whose session exists, stays whoever asked for it. */
    gone = 78; /* (kept while it is held: a later process of its session may come) */
    assert_int_equal(gs_placement_prune(p, 1001, 64, 1000, 5000, pid_alive, &gone), 0);
    assert_int_equal(gs_placement_prune(p, 1001, 64, 6000, 5000, pid_alive, &gone), 1);
    assert_int_equal(gs_placement_get(p, "eval@1001", g, 4), 0);
    gone = 77;
    assert_int_equal(gs_placement_prune(p, 1001, 64, 6000, 5000, pid_alive, &gone), 0);
    assert_int_equal(gs_placement_get(p, "train@1001", g, 4), 1);
    /* A set (the session exists) is never pending. */
    assert_int_equal(gs_placement_set(p, "junk9@1002", (int[]){3}, 1), 0);
    assert_int_equal(gs_placement_pending(p, 1002, &mine), 2);
    assert_int_equal(mine, 2);
    gs_placement_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policies_by_name),
        cmocka_unit_test(pending_placements_are_bounded_per_uid),
        cmocka_unit_test(spread_evens_out_memory_then_sessions),
        cmocka_unit_test(pack_fills_one_gpu_before_the_next),
        cmocka_unit_test(more_than_there_are_gets_them_all),
        cmocka_unit_test(only_allowed_gpus),
        cmocka_unit_test(gpu_access_rules),
        cmocka_unit_test(sessions_keep_their_gpus),
    };
    return cmocka_run_group_tests_name("placement", tests, NULL, NULL);
}
