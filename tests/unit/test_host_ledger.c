/*
 * test_host_ledger.c - the host ledger (broker/park/host_ledger.h) and the
 * machine's memory as read from meminfo and cgroup files
 * (host_meminfo.h), on files the test writes: the room for parked memory
 * is bound by the machine's free memory less the reserve, by what
 * gpushare may count on less what it holds, and by an explicit budget;
 * what is under way counts before the machine shows it; the tightest
 * cgroup limit on the way up decides.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "host_ledger.h"
#include "host_meminfo.h"
#include "unit_fixture.h"

/* The H100 server of issue 33: 128 GiB of RAM, 8 GiB reserve. */
static gs_host_ledger_t server(void)
{
    return (gs_host_ledger_t){.limit = 128 * GIB,
                              .available = 120 * GIB,
                              .reserve = gs_host_ledger_auto_reserve(128 * GIB)};
}

static void the_reserve_is_a_sixteenth_at_least_2_gib(void **state)
{
    (void)state;
    assert_int_equal(gs_host_ledger_auto_reserve(128 * GIB), 8 * GIB);
    assert_int_equal(gs_host_ledger_auto_reserve(24 * GIB), 2 * GIB);
    assert_int_equal(gs_host_ledger_auto_reserve(2 * GIB), 1 * GIB); /* at most half */
}

/* A checkpoint image (40 GiB) and the pool pinned (40 GiB): what is left
 * is what the machine has free less the reserve, not half the RAM on top
 * of the image (the OOM kill of issue 33). */
static void images_and_pins_share_one_room(void **state)
{
    (void)state;
    gs_host_ledger_t l = server();
    assert_int_equal(gs_host_ledger_room(&l), 112 * GIB);
    l.images = 40 * GIB;
    l.pinned = 40 * GIB;
    l.available = 36 * GIB; /* the machine shows both, and the notebooks' own 4 GiB */
    assert_int_equal(gs_host_ledger_room(&l), 28 * GIB);
    assert_string_equal(gs_host_ledger_bound(&l), "reserve");
    assert_int_equal(gs_host_ledger_capacity(&l), 108 * GIB);
    /* Another 30 GiB image cannot be taken. */
    assert_true(gs_host_ledger_room(&l) < 30 * GIB);
}

/* What is under way counts at once: a checkpoint of 20 GiB just started
 * does not show in MemAvailable yet. */
static void pending_counts_before_the_machine_shows_it(void **state)
{
    (void)state;
    gs_host_ledger_t l = server();
    l.pending = 20 * GIB;
    assert_int_equal(gs_host_ledger_room(&l), 92 * GIB);
}

/* park_host_memory (or a cgroup) below the RAM: the limit less what
 * gpushare holds decides, even where the machine has more free. */
static void a_limit_bounds_what_gpushare_holds(void **state)
{
    (void)state;
    gs_host_ledger_t l = {.limit = 4 * GIB, .available = UINT64_MAX, .reserve = 1 * GIB};
    l.pinned = 2 * GIB;
    assert_int_equal(gs_host_ledger_room(&l), 1 * GIB);
    assert_string_equal(gs_host_ledger_bound(&l), "limit");
    l.images = 2 * GIB;
    assert_int_equal(gs_host_ledger_room(&l), 0);
    assert_int_equal(gs_host_ledger_capacity(&l), 4 * GIB);
}

static void an_explicit_budget_bounds_it_too(void **state)
{
    (void)state;
    gs_host_ledger_t l = server();
    l.budget = 10 * GIB;
    l.pinned = 4 * GIB;
    assert_int_equal(gs_host_ledger_room(&l), 6 * GIB);
    assert_string_equal(gs_host_ledger_bound(&l), "budget");
    l.images = 8 * GIB; /* over the budget: no room, never wraps */
    assert_int_equal(gs_host_ledger_room(&l), 0);
}

static char dir[64];

static void write_file(const char *rel, const char *text)
{
    char path[256];
    unit_fixture_write_file(path, sizeof path, dir, rel, text);
}

static void meminfo_and_the_tightest_cgroup(void **state)
{
    (void)state;
    char p[256], cg[256];
    assert_int_equal(unit_fixture_tmpdir(dir, sizeof dir, "host-ledger"), 0);
    write_file("meminfo", "MemTotal:       134217728 kB\nMemFree:         1000 kB\n"
                          "MemAvailable:   125829120 kB\n");
    snprintf(p, sizeof p, "%s/meminfo", dir);
    gs_host_meminfo_t m;
    char err[200];
    assert_int_equal(gs_host_meminfo_read(p, NULL, NULL, &m, err, sizeof err), 0);
    assert_int_equal(m.total, 128 * GIB);
    assert_int_equal(m.available, 120 * GIB);
    assert_int_equal(m.cgroup, 0);
    /* cgroup v2: user.slice/alice with 16 GiB, 6 GiB used; its parent
     * with 64 GiB, 60 GiB used: 4 GiB left there is the room. */
    snprintf(cg, sizeof cg, "%s/cg/user.slice/alice", dir);
    char mk[300];
    snprintf(mk, sizeof mk, "mkdir -p %s", cg);
    assert_int_equal(system(mk), 0);
    write_file("cgroup", "0::/user.slice/alice\n");
    write_file("cg/user.slice/alice/memory.max", "17179869184\n");
    write_file("cg/user.slice/alice/memory.current", "6442450944\n");
    write_file("cg/user.slice/memory.max", "68719476736\n");
    write_file("cg/user.slice/memory.current", "64424509440\n");
    char cgfile[256], root[256];
    snprintf(cgfile, sizeof cgfile, "%s/cgroup", dir);
    snprintf(root, sizeof root, "%s/cg", dir);
    assert_int_equal(gs_host_meminfo_read(p, cgfile, root, &m, err, sizeof err), 0);
    assert_int_equal(m.total, 16 * GIB);
    assert_int_equal(m.available, 4 * GIB);
    assert_int_equal(m.cgroup, 1);
    /* "max": no limit there. */
    write_file("cg/user.slice/alice/memory.max", "max\n");
    write_file("cg/user.slice/memory.max", "max\n");
    assert_int_equal(gs_host_meminfo_read(p, cgfile, root, &m, err, sizeof err), 0);
    assert_int_equal(m.total, 128 * GIB);
    /* Bad input names the problem. */
    write_file("meminfo", "Nothing: 1 kB\n");
    assert_int_equal(gs_host_meminfo_read(p, NULL, NULL, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "no MemTotal"));
    snprintf(p, sizeof p, "%s/missing", dir);
    assert_int_equal(gs_host_meminfo_read(p, NULL, NULL, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot read"));
    assert_int_equal(unit_fixture_rmtree(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_reserve_is_a_sixteenth_at_least_2_gib),
        cmocka_unit_test(images_and_pins_share_one_room),
        cmocka_unit_test(pending_counts_before_the_machine_shows_it),
        cmocka_unit_test(a_limit_bounds_what_gpushare_holds),
        cmocka_unit_test(an_explicit_budget_bounds_it_too),
        cmocka_unit_test(meminfo_and_the_tightest_cgroup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
