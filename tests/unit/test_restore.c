/*
 * test_restore.c - gpushare-restore's command line and its loop
 * (libhook/restore/), the loop on a fake driver and a virtual clock:
 * restore then unlock, a wait for memory said once and again every 30 s,
 * never a try without a pause, a stop honoured except for the unlock of
 * its own restore, errors tried a few times and named, a process that
 * ends or FAILED.  What the helper says is read from stderr (a file).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "restore_args.h"
#include "restore_loop.h"

/* ---- the command line ---------------------------------------------------- */

static int parse(char *err, size_t len, gs_restore_args_t *a, ...)
{
    char *argv[16] = {"gpushare-restore"};
    int argc = 1;
    va_list ap;
    va_start(ap, a);
    for (char *s; argc < 15 && (s = va_arg(ap, char *)) != NULL;)
        argv[argc++] = s;
    va_end(ap);
    err[0] = '\0';
    return gs_restore_args_parse(argc, argv, a, err, len);
}

static void args_are_read_in_both_forms(void **state)
{
    (void)state;
    gs_restore_args_t a;
    char err[200];
    assert_int_equal(parse(err, sizeof err, &a, "--pid", "42", "--start", "123456", NULL), 0);
    assert_int_equal(a.pid, 42);
    assert_true(a.start == 123456ULL);
    assert_int_equal(parse(err, sizeof err, &a, "--start=9", "--pid=7", NULL), 0);
    assert_int_equal(a.pid, 7);
    assert_true(a.start == 9ULL);
    assert_int_equal(parse(err, sizeof err, &a, "--pid", "7", "--start", "9", "--gpu",
                           "GPU-12345678-aaaa-4bbb-8ccc-123456789abc=4096", "--gpu=GPU-x=1", NULL),
                     0);
    assert_int_equal(a.ngpus, 2);
    assert_string_equal(a.gpu[0].uuid, "GPU-12345678-aaaa-4bbb-8ccc-123456789abc");
    assert_true(a.gpu[0].bytes == 4096ULL && a.gpu[1].bytes == 1ULL);
    assert_string_equal(a.gpu[1].uuid, "GPU-x");
    assert_int_equal(parse(err, sizeof err, &a, "--help", NULL), 0);
    assert_true(a.help);
}

static void bad_args_are_named(void **state)
{
    (void)state;
    static const struct {
        const char *argv[4];
        const char *problem;
    } cases[] = {
        {{NULL}, "--pid is missing"},
        {{"--pid", "5", NULL}, "--start is missing"},
        {{"--start", "5", NULL}, "--pid is missing"},
        {{"--pid", "0", "--start", "5"}, "--pid 0: not a process id"},
        {{"--pid", "3000000000", "--start", "5"}, "--pid 3000000000: not a process id"},
        {{"--pid", "12abc", "--start", "5"}, "--pid 12abc: not a process id"},
        {{"--pid", "", "--start", "5"}, "--pid : not a process id"},
        {{"--pid", "5", "--start", "-1"}, "--start -1: not a start time"},
        {{"--pid", "5", "--start"}, "--start needs the process' start time"},
        {{"--pid=", "--start", "5"}, "--pid : not a process id"},
        {{"--pidx", "5"}, "unknown argument --pidx"},
        {{"--pid", "5", "--gpu", "GPU-1"}, "--gpu GPU-1: expected UUID=BYTES"},
        {{"--pid", "5", "--gpu", "GPU-1=0"}, "--gpu GPU-1=0: BYTES must be a positive number"},
        {{"5"}, "unknown argument 5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[6] = {"gpushare-restore"};
        int argc = 1;
        for (int k = 0; k < 4 && cases[i].argv[k]; k++)
            argv[argc++] = (char *)cases[i].argv[k];
        gs_restore_args_t a;
        char err[200] = "";
        assert_int_equal(gs_restore_args_parse(argc, argv, &a, err, sizeof err), -1);
        if (!strstr(err, cases[i].problem))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err, cases[i].problem);
    }
}

/* ---- the loop on a fake driver ------------------------------------------- */

static struct fake {
    int state;     /* the target's checkpoint state */
    int oom_left;  /* restores refused for lack of memory before one works */
    int full_left; /* has_room answers 0 this many times first (the driver's count) */
    int room_asks;
    int restore_rc;      /* any other error of every restore, 0: none */
    int unlock_rc;       /* the same for unlock */
    int alive_for;       /* alive() answers 1 this many times, then 0; -1: always */
    int stop_at_nap;     /* the stop flag rises at this nap (1-based), 0: never */
    int stop_in_restore; /* the flag rises during a restore */
    int stop;
    uint64_t now;
    int naps, restores, unlocks, states;
    unsigned nap_ms[64];
    char calls[256]; /* R: restore, U: unlock, N: nap, in order */
} f;

static void call(char c)
{
    size_t n = strlen(f.calls);
    if (n + 1 < sizeof f.calls)
        f.calls[n] = c;
}

static int fake_state(void *ctx, int pid, int *st)
{
    (void)ctx, (void)pid;
    f.states++;
    *st = f.state;
    return 0;
}

static int fake_restore(void *ctx, int pid)
{
    (void)ctx, (void)pid;
    f.restores++;
    call('R');
    if (f.state != GS_RST_CHECKPOINTED)
        return 401; /* CUDA_ERROR_ILLEGAL_STATE */
    if (f.oom_left > 0) {
        f.oom_left--;
        return GS_RST_OUT_OF_MEMORY;
    }
    if (f.restore_rc)
        return f.restore_rc;
    if (f.stop_in_restore)
        f.stop = 1;
    f.state = GS_RST_LOCKED;
    return 0;
}

static int fake_unlock(void *ctx, int pid)
{
    (void)ctx, (void)pid;
    f.unlocks++;
    call('U');
    if (f.unlock_rc)
        return f.unlock_rc;
    if (f.state != GS_RST_LOCKED)
        return 401;
    f.state = GS_RST_RUNNING;
    return 0;
}

static const char *fake_error_name(void *ctx, int rc, char *buf, size_t len)
{
    (void)ctx;
    snprintf(buf, len, "CUDA_ERROR_%d", rc);
    return buf;
}

static int fake_alive(void *ctx, int pid, unsigned long long start)
{
    (void)ctx, (void)pid, (void)start;
    if (f.alive_for < 0)
        return 1;
    return f.alive_for-- > 0;
}

static int fake_stop(void *ctx)
{
    (void)ctx;
    return f.stop;
}

static void fake_nap(void *ctx, unsigned ms)
{
    (void)ctx;
    if (f.naps < 64)
        f.nap_ms[f.naps] = ms;
    f.naps++;
    call('N');
    f.now += ms;
    if (f.stop_at_nap && f.naps == f.stop_at_nap)
        f.stop = 1;
}

static uint64_t fake_now(void *ctx)
{
    (void)ctx;
    return f.now;
}

static int fake_has_room(void *ctx)
{
    (void)ctx;
    f.room_asks++;
    if (f.full_left > 0) {
        f.full_left--;
        return 0;
    }
    return 1;
}

static const gs_restore_ops_t ops = {
    .has_room = fake_has_room,
    .state = fake_state,
    .restore = fake_restore,
    .unlock = fake_unlock,
    .error_name = fake_error_name,
    .alive = fake_alive,
    .stop = fake_stop,
    .nap_ms = fake_nap,
    .now_ms = fake_now,
};

/* stderr goes to a file while the loop runs; what it said comes back. */
static char said[16384];

static int run(void)
{
    char path[] = "/tmp/gs-test-restore-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    gs_restore_limits_t lim = GS_RESTORE_LIMITS_DEFAULT;
    int rc = gs_restore_run(&ops, 4242, 77, &lim);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, said, sizeof said - 1, 0);
    said[n > 0 ? n : 0] = '\0';
    close(fd);
    return rc;
}

static int count(const char *text)
{
    int n = 0;
    for (const char *p = said; (p = strstr(p, text)) != NULL; p += strlen(text))
        n++;
    return n;
}

static int setup(void **state)
{
    (void)state;
    memset(&f, 0, sizeof f);
    f.alive_for = -1;
    f.now = 1000000;
    return 0;
}

static void a_running_process_is_left_alone_and_nothing_is_said(void **state)
{
    (void)state;
    f.state = GS_RST_RUNNING;
    assert_int_equal(run(), GS_RST_EXIT_RUNS);
    assert_string_equal(f.calls, "");
    assert_string_equal(said, "");
}

static void a_checkpointed_process_is_restored_then_unlocked(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    assert_int_equal(run(), GS_RST_EXIT_RUNS);
    assert_string_equal(f.calls, "RU");
    assert_int_equal(f.state, GS_RST_RUNNING);
    assert_int_equal(count("bringing pid 4242 back from the checkpoint tier (it is checkpointed)"),
                     1);
    assert_int_equal(count("pid 4242 runs again"), 1);
}

static void a_locked_process_is_unlocked(void **state)
{
    (void)state;
    f.state = GS_RST_LOCKED;
    assert_int_equal(run(), GS_RST_EXIT_RUNS);
    assert_string_equal(f.calls, "U");
    assert_int_equal(count("(it is locked)"), 1);
}

static void no_room_waits_with_a_pause_and_says_so_once_per_30_s(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    f.oom_left = 65; /* 65 s of waiting at one try a second */
    assert_int_equal(run(), GS_RST_EXIT_RUNS);
    assert_int_equal(f.restores, 66);
    assert_int_equal(f.naps, 65);
    for (int i = 0; i < 64; i++)
        assert_int_equal(f.nap_ms[i], 1000);
    /* never two tries without a pause between them */
    assert_null(strstr(f.calls, "RR"));
    assert_int_equal(count("waiting for GPU memory, looking every 1.0 s"), 1);
    assert_int_equal(count("still waiting for GPU memory for pid 4242"), 2); /* at 30 and 60 s */
    assert_int_equal(count("GPU memory for pid 4242 is free after 65 s"), 1);
    assert_int_equal(f.state, GS_RST_RUNNING);
}

/* The driver's count says the memory is not free: no restore is tried
 * (one that runs out of memory leaves the process checkpointed for good),
 * only looked again a second later, until it is. */
static void no_restore_is_tried_before_the_memory_is_free(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    f.full_left = 5;
    assert_int_equal(run(), GS_RST_EXIT_RUNS);
    assert_int_equal(f.restores, 1);
    assert_int_equal(f.room_asks, 6);
    assert_int_equal(f.naps, 5);
    assert_int_equal(count("waiting for GPU memory, looking every 1.0 s"), 1);
    assert_int_equal(count("GPU memory for pid 4242 is free after 5 s"), 1);
    assert_int_equal(f.state, GS_RST_RUNNING);
}

static void a_stop_while_waiting_ends_it_without_another_try(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    f.oom_left = 1000;
    f.stop_at_nap = 3;
    assert_int_equal(run(), GS_RST_EXIT_NOT_DONE);
    assert_string_equal(f.calls, "RNRNRN");
    assert_int_equal(count("stopped (a gpushare broker is back): pid 4242, checkpointed"), 1);
}

static void a_stop_during_its_own_restore_still_unlocks(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    f.stop_in_restore = 1;
    assert_int_equal(run(), GS_RST_EXIT_RUNS);
    assert_string_equal(f.calls, "RU");
    assert_int_equal(f.state, GS_RST_RUNNING);
}

static void a_stop_before_anything_leaves_a_locked_process_to_the_broker(void **state)
{
    (void)state;
    f.state = GS_RST_LOCKED;
    f.stop = 1;
    assert_int_equal(run(), GS_RST_EXIT_NOT_DONE);
    assert_string_equal(f.calls, "");
}

static void other_errors_are_named_and_tried_a_few_times(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    f.restore_rc = 999;
    assert_int_equal(run(), GS_RST_EXIT_FAILED);
    assert_int_equal(f.restores, 5);
    assert_string_equal(f.calls, "RNRNRNRNR");
    assert_int_equal(count("restoring pid 4242 failed (cuCheckpointProcessRestore: "
                           "CUDA_ERROR_999); trying again"),
                     4);
    assert_int_equal(count("restoring pid 4242 failed 5 times (cuCheckpointProcessRestore: "
                           "CUDA_ERROR_999); giving up"),
                     1);
    /* growing pauses, none longer than 2 s */
    assert_int_equal(f.nap_ms[0], 200);
    assert_int_equal(f.nap_ms[1], 400);
    assert_int_equal(f.nap_ms[3], 1600);
}

static void a_failing_unlock_is_named(void **state)
{
    (void)state;
    f.state = GS_RST_LOCKED;
    f.unlock_rc = 700;
    assert_int_equal(run(), GS_RST_EXIT_FAILED);
    assert_int_equal(f.unlocks, 5);
    assert_true(count("unlocking pid 4242 failed (cuCheckpointProcessUnlock: CUDA_ERROR_700)") >=
                1);
}

static void a_process_that_ends_while_waiting_ends_the_helper(void **state)
{
    (void)state;
    f.state = GS_RST_CHECKPOINTED;
    f.oom_left = 1000;
    f.alive_for = 4;
    assert_int_equal(run(), GS_RST_EXIT_NOT_DONE);
    assert_int_equal(f.restores, 4);
    assert_int_equal(count("pid 4242 ended before it was back"), 1);
}

static void a_failed_process_is_said_and_given_up(void **state)
{
    (void)state;
    f.state = GS_RST_FAILED;
    assert_int_equal(run(), GS_RST_EXIT_FAILED);
    assert_string_equal(f.calls, "");
    assert_int_equal(count("reports pid 4242 FAILED"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(args_are_read_in_both_forms),
        cmocka_unit_test(bad_args_are_named),
        cmocka_unit_test_setup(a_running_process_is_left_alone_and_nothing_is_said, setup),
        cmocka_unit_test_setup(a_checkpointed_process_is_restored_then_unlocked, setup),
        cmocka_unit_test_setup(a_locked_process_is_unlocked, setup),
        cmocka_unit_test_setup(no_room_waits_with_a_pause_and_says_so_once_per_30_s, setup),
        cmocka_unit_test_setup(no_restore_is_tried_before_the_memory_is_free, setup),
        cmocka_unit_test_setup(a_stop_while_waiting_ends_it_without_another_try, setup),
        cmocka_unit_test_setup(a_stop_during_its_own_restore_still_unlocks, setup),
        cmocka_unit_test_setup(a_stop_before_anything_leaves_a_locked_process_to_the_broker, setup),
        cmocka_unit_test_setup(other_errors_are_named_and_tried_a_few_times, setup),
        cmocka_unit_test_setup(a_failing_unlock_is_named, setup),
        cmocka_unit_test_setup(a_process_that_ends_while_waiting_ends_the_helper, setup),
        cmocka_unit_test_setup(a_failed_process_is_said_and_given_up, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
