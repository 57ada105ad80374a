/*
 * test_ipc_handle.c - the emulated CUDA IPC handle's pieces
 * (libhook/hook_ipc_handle.h): its 64 bytes both ways, a handle of the
 * older format told apart, the server's name, a name taken ahead of the
 * exporter drawn again, and the importer's check of whoever serves the
 * name: only the exporter's own listening socket passes (not another pid,
 * not another uid, not a process that got the exporter's pid later).
 * Real sockets in the abstract namespace; processes forked for the other
 * parties.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hook_ipc_handle.h"
#include "proc_alive.h"

static gs_ipc_handle_t sample(void)
{
    gs_ipc_handle_t h = {.pid = 4242,
                         .uid = 1001,
                         .start = 123456789ull,
                         .name = 0x0123456789abcdefull,
                         .base = 0x7f0000200000ull};
    for (int i = 0; i < GS_SWAP_IPC_KEY; i++) {
        h.keys.ask[i] = (unsigned char)(i + 1);
        h.keys.proof[i] = (unsigned char)(0xF0 - i);
    }
    return h;
}

static void the_handle_round_trips_through_its_64_bytes(void **state)
{
    (void)state;
    gs_ipc_handle_t h = sample(), back;
    unsigned char bytes[GS_IPC_HANDLE_BYTES];
    memset(bytes, 0xEE, sizeof bytes);
    gs_ipc_handle_pack(&h, bytes);
    assert_memory_equal(bytes, "gsIPCv2", 8);
    memset(&back, 0, sizeof back);
    assert_int_equal(gs_ipc_handle_unpack(bytes, &back), 1);
    assert_int_equal(back.pid, h.pid);
    assert_int_equal(back.uid, h.uid);
    assert_true(back.start == h.start && back.name == h.name && back.base == h.base);
    assert_memory_equal(back.keys.ask, h.keys.ask, GS_SWAP_IPC_KEY);
    assert_memory_equal(back.keys.proof, h.keys.proof, GS_SWAP_IPC_KEY);
    /* The last byte is the proof's: the fields fill the handle. */
    assert_int_equal(bytes[GS_IPC_HANDLE_BYTES - 1], h.keys.proof[GS_SWAP_IPC_KEY - 1]);
}

static void other_handles_are_not_ours_and_old_ones_are_refused(void **state)
{
    (void)state;
    gs_ipc_handle_t h;
    unsigned char driver[GS_IPC_HANDLE_BYTES] = {0x12, 0x34};
    assert_int_equal(gs_ipc_handle_unpack(driver, &h), 0); /* the driver's: passed on */
    unsigned char v1[GS_IPC_HANDLE_BYTES] = "gsIPCv1";
    assert_int_equal(gs_ipc_handle_unpack(v1, &h), -1); /* names a pid only: refused */
}

static void the_name_has_the_pid_and_a_random_part(void **state)
{
    (void)state;
    struct sockaddr_un sa;
    char text[80];
    socklen_t len = gs_ipc_address(77, 0xabcull, &sa, text, sizeof text);
    assert_string_equal(text, "@gpushare-ipc-77-0000000000000abc");
    assert_int_equal(sa.sun_path[0], '\0');
    assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + strlen(text));
    assert_memory_equal(sa.sun_path + 1, text + 1, strlen(text) - 1);
}

static void random_bytes_differ(void **state)
{
    (void)state;
    unsigned char a[32], b[32];
    assert_int_equal(gs_ipc_random(a, sizeof a), 0);
    assert_int_equal(gs_ipc_random(b, sizeof b), 0);
    assert_memory_not_equal(a, b, sizeof a);
}

/* A draw that names `taken` first and then taken + 1 .. */
static uint64_t next_draw;
static int draw_from(void *buf, size_t n)
{
    assert_int_equal(n, sizeof next_draw);
    memcpy(buf, &next_draw, n);
    next_draw++;
    return 0;
}
static int draw_same(void *buf, size_t n)
{
    memcpy(buf, &next_draw, n);
    return 0;
}

static int bind_name(pid_t pid, uint64_t name)
{
    struct sockaddr_un sa;
    socklen_t len = gs_ipc_address(pid, name, &sa, NULL, 0);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
    return fd;
}

static void a_name_taken_ahead_is_drawn_again(void **state)
{
    (void)state;
    uint64_t first;
    assert_int_equal(gs_ipc_random(&first, sizeof first), 0);
    int squat = bind_name(getpid(), first); /* someone else holds the first name drawn */
    next_draw = first;
    uint64_t got = 0;
    int fd = gs_ipc_listen(getpid(), draw_from, &got);
    assert_true(fd >= 0);
    assert_true(got == first + 1);
    /* Only a name that keeps being taken fails, and says so. */
    next_draw = first;
    errno = 0;
    assert_int_equal(gs_ipc_listen(getpid(), draw_same, &got), -1);
    assert_int_equal(errno, EADDRINUSE);
    close(fd);
    close(squat);
}

/* A connection to a listener this process made: the check passes for a
 * handle naming this process as it is, fails with the reason otherwise. */
static void only_the_exporter_passes_the_servers_check(void **state)
{
    (void)state;
    uint64_t name;
    int lfd = gs_ipc_listen(getpid(), NULL, &name);
    assert_true(lfd >= 0);
    gs_ipc_handle_t h = sample();
    h.pid = getpid();
    h.uid = geteuid();
    h.start = gs_proc_start(getpid());
    h.name = name;
    assert_true(h.start != 0);
    struct sockaddr_un sa;
    socklen_t len = gs_ipc_address(getpid(), name, &sa, NULL, 0);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, len), 0);
    char why[200] = "";
    assert_int_equal(gs_ipc_check_server(s, &h, why, sizeof why), 0);

    gs_ipc_handle_t other = h;
    other.uid = h.uid + 1;
    assert_int_equal(gs_ipc_check_server(s, &other, why, sizeof why), -1);
    assert_non_null(strstr(why, "not by the exporter"));
    other = h;
    other.pid = h.pid + 1;
    assert_int_equal(gs_ipc_check_server(s, &other, why, sizeof why), -1);
    assert_non_null(strstr(why, "not by the exporter"));
    other = h;
    other.start = h.start - 1; /* the exporter's pid, reused by this process */
    assert_int_equal(gs_ipc_check_server(s, &other, why, sizeof why), -1);
    assert_non_null(strstr(why, "another process than the exporter"));
    close(s);
    close(lfd);
}

/* A process of another uid that binds the name of an exporter that is gone:
 * the kernel names it, and the check refuses it (needs root to be another
 * uid: skipped otherwise). */
static void another_user_serving_the_name_is_refused(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        skip();
        return;
    }
    uint64_t name;
    assert_int_equal(gs_ipc_random(&name, sizeof name), 0);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t exporter = getpid(); /* the handle's: this process, as if it were gone */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        struct sockaddr_un sa;
        socklen_t len = gs_ipc_address(exporter, name, &sa, NULL, 0);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 4) != 0)
            _exit(3);
        char c = 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(4);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    gs_ipc_handle_t h = sample();
    h.pid = exporter;
    h.uid = geteuid();
    h.start = gs_proc_start(exporter);
    h.name = name;
    struct sockaddr_un sa;
    socklen_t len = gs_ipc_address(exporter, name, &sa, NULL, 0);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, len), 0);
    char why[200] = "";
    assert_int_equal(gs_ipc_check_server(s, &h, why, sizeof why), -1);
    char want[80];
    snprintf(want, sizeof want, "served by pid %d of uid 65534", (int)child);
    assert_non_null(strstr(why, want));
    close(s);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_handle_round_trips_through_its_64_bytes),
        cmocka_unit_test(other_handles_are_not_ours_and_old_ones_are_refused),
        cmocka_unit_test(the_name_has_the_pid_and_a_random_part),
        cmocka_unit_test(random_bytes_differ),
        cmocka_unit_test(a_name_taken_ahead_is_drawn_again),
        cmocka_unit_test(only_the_exporter_passes_the_servers_check),
        cmocka_unit_test(another_user_serving_the_name_is_refused),
    };
    return cmocka_run_group_tests_name("ipc_handle", tests, NULL, NULL);
}
