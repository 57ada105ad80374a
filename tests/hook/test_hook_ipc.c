/*
 * test_hook_ipc.c - who gets memory through the hook's emulated legacy IPC
 * (libhook/hook_ipc.c), on the simulated driver with the hook preloaded:
 * a handle whose ask key is wrong opens nothing, nor one whose server
 * cannot answer with its proof (and the descriptors it sent are closed);
 * a freed allocation's handle does not open what was allocated after it;
 * a process that serves the name of an exporter that is gone is refused
 * before the key leaves the importer; connections that never ask do not
 * hold up an import.  The handle's fields are read and changed with
 * libhook/hook_ipc_handle.c, built in.
 *
 * Run with the hook preloaded (tests/hook/Makefile.am); the environment is
 * set here before the first CUDA call, when the hook reads it
 * (hook_fixture.h, shared with test_hook_swap.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hook_fixture.h"
#include "hook_ipc_handle.h"
#include "simtest.h"

#define MIB  (1ull << 20)
#define SIZE (6 * MIB)

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static gs_ipc_handle_t parse(const CUipcMemHandle *h)
{
    gs_ipc_handle_t g;
    REQUIRE(gs_ipc_handle_unpack((const unsigned char *)h->reserved, &g) == 1);
    return g;
}

static CUipcMemHandle packed(const gs_ipc_handle_t *g)
{
    CUipcMemHandle h;
    gs_ipc_handle_pack(g, (unsigned char *)h.reserved);
    return h;
}

/* Exports one allocation filled with seed 5, sends its handle, and keeps
 * it until the parent says so. */
static void exporter(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUdeviceptr p = 0;
    REQ_CU(cuMemAlloc(&p, SIZE));
    hook_fixture_fill(p, SIZE, 5);
    CUipcMemHandle h;
    REQ_CU(cuIpcGetMemHandle(&h, p));
    simtest_send(wr, &h, sizeof h);
    (void)simtest_recv_u64(rd);
    REQ_CU(cuMemFree(p));
}

static void keys_importer(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUipcMemHandle h;
    simtest_recv(rd, &h, sizeof h);
    gs_ipc_handle_t g = parse(&h);
    CUdeviceptr p = 0;

    gs_ipc_handle_t wrong = g;
    wrong.keys.ask[0] ^= 1;
    CUipcMemHandle bad = packed(&wrong);
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, bad, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_HANDLE);

    wrong = g;
    wrong.keys.proof[GS_SWAP_IPC_KEY - 1] ^= 0x80; /* the server's answer cannot match it */
    bad = packed(&wrong);
    int before = open_fds();
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, bad, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_HANDLE);
    REQUIRE(open_fds() == before); /* what it sent is closed, not mapped */

    REQ_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    REQUIRE(hook_fixture_holds(p, SIZE, 5));
    REQ_CU(cuIpcCloseMemHandle(p));
    simtest_send_u64(wr, 1);
}

static void a_handle_opens_only_with_its_keys(void **state)
{
    (void)state;
    hook_fixture_relay(exporter, keys_importer, sizeof(CUipcMemHandle));
}

/* Frees an exported allocation and allocates the same size again (the
 * same address, if the driver gives it back): both handles go out. */
static void reusing_exporter(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUdeviceptr p = 0, q = 0;
    CUipcMemHandle old, now;
    REQ_CU(cuMemAlloc(&p, SIZE));
    hook_fixture_fill(p, SIZE, 5);
    REQ_CU(cuIpcGetMemHandle(&old, p));
    REQ_CU(cuMemFree(p));
    REQ_CU(cuMemAlloc(&q, SIZE));
    hook_fixture_fill(q, SIZE, 9);
    REQ_CU(cuIpcGetMemHandle(&now, q));
    simtest_send(wr, &old, sizeof old);
    simtest_send(wr, &now, sizeof now);
    (void)simtest_recv_u64(rd);
    REQ_CU(cuMemFree(q));
}

static void reuse_importer(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUipcMemHandle old, now;
    simtest_recv(rd, &old, sizeof old);
    simtest_recv(rd, &now, sizeof now);
    CUdeviceptr p = 0;
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, old, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_HANDLE);
    REQ_CU(cuIpcOpenMemHandle(&p, now, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    REQUIRE(hook_fixture_holds(p, SIZE, 9));
    REQ_CU(cuIpcCloseMemHandle(p));
    simtest_send_u64(wr, 1);
}

static void a_freed_allocations_handle_opens_nothing(void **state)
{
    (void)state;
    hook_fixture_relay(reusing_exporter, reuse_importer, 2 * sizeof(CUipcMemHandle));
}

/* Binds the name of the handle it is sent (its exporter gone), says so,
 * takes one connection and reports how many bytes came on it. */
static void impostor(int rd, int wr, void *arg)
{
    (void)arg;
    CUipcMemHandle h;
    simtest_recv(rd, &h, sizeof h);
    gs_ipc_handle_t g = parse(&h);
    struct sockaddr_un sa;
    socklen_t len = gs_ipc_address((pid_t)g.pid, g.name, &sa, NULL, 0);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, 4) == 0);
    simtest_send_u64(wr, 1);
    int c = accept(fd, NULL, NULL);
    REQUIRE(c >= 0);
    struct pollfd pf = {c, POLLIN, 0};
    REQUIRE(poll(&pf, 1, 10000) == 1);
    char buf[256];
    ssize_t n = recv(c, buf, sizeof buf, 0); /* 0: closed without a word */
    simtest_send_u64(wr, (uint64_t)n);
    close(c);
    close(fd);
}

static void gone_importer(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUipcMemHandle h;
    simtest_recv(rd, &h, sizeof h);
    CUdeviceptr p = 0;
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_HANDLE);
    simtest_send_u64(wr, 1);
}

static void a_process_serving_a_gone_exporters_name_gets_nothing(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    struct simchild a, m, b;
    simtest_spawn(&a, exporter, NULL);
    simtest_spawn(&m, impostor, NULL);
    simtest_spawn(&b, gone_importer, NULL);
    CUipcMemHandle h;
    simtest_recv(a.rd, &h, sizeof h);
    simtest_send_u64(a.wr, 1); /* the exporter goes */
    simtest_join(&a);
    simtest_send(m.wr, &h, sizeof h);
    (void)simtest_recv_u64(m.rd); /* its name is the impostor's now */
    simtest_send(b.wr, &h, sizeof h);
    (void)simtest_recv_u64(b.rd);
    REQUIRE(simtest_recv_u64(m.rd) == 0); /* the key never reached it */
    simtest_join(&b);
    simtest_join(&m);
}

/* Connects 100 times to the server of the handle it is sent, and says
 * nothing on any of them until told to go. */
static void idler(int rd, int wr, void *arg)
{
    (void)arg;
    CUipcMemHandle h;
    simtest_recv(rd, &h, sizeof h);
    gs_ipc_handle_t g = parse(&h);
    struct sockaddr_un sa;
    socklen_t len = gs_ipc_address((pid_t)g.pid, g.name, &sa, NULL, 0);
    int fds[100];
    for (int i = 0; i < 100; i++) {
        fds[i] = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        REQUIRE(fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&sa, len) == 0);
    }
    simtest_send_u64(wr, 1);
    (void)simtest_recv_u64(rd);
    for (int i = 0; i < 100; i++)
        close(fds[i]);
}

static void prompt_importer(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUipcMemHandle h;
    simtest_recv(rd, &h, sizeof h);
    CUdeviceptr p = 0;
    uint64_t t0 = simtest_now_ns();
    REQ_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    uint64_t took = simtest_now_ns() - t0;
    REQUIRE(took < 1000000000ull); /* a server that waited on each idle one: 2 s apiece */
    REQUIRE(hook_fixture_holds(p, SIZE, 5));
    REQ_CU(cuIpcCloseMemHandle(p));
    simtest_send_u64(wr, 1);
}

static void connections_that_never_ask_do_not_hold_up_an_import(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    struct simchild a, m, b;
    simtest_spawn(&a, exporter, NULL);
    simtest_spawn(&m, idler, NULL);
    simtest_spawn(&b, prompt_importer, NULL);
    CUipcMemHandle h;
    simtest_recv(a.rd, &h, sizeof h);
    simtest_send(m.wr, &h, sizeof h);
    (void)simtest_recv_u64(m.rd);
    simtest_send(b.wr, &h, sizeof h);
    (void)simtest_recv_u64(b.rd);
    simtest_send_u64(m.wr, 1);
    simtest_send_u64(a.wr, 1);
    simtest_join(&m);
    simtest_join(&b);
    simtest_join(&a);
}

int main(void)
{
    hook_fixture_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(a_handle_opens_only_with_its_keys, simtest_teardown),
        cmocka_unit_test_teardown(a_freed_allocations_handle_opens_nothing, simtest_teardown),
        cmocka_unit_test_teardown(a_process_serving_a_gone_exporters_name_gets_nothing,
                                  simtest_teardown),
        cmocka_unit_test_teardown(connections_that_never_ask_do_not_hold_up_an_import,
                                  simtest_teardown),
    };
    return cmocka_run_group_tests_name("hook_ipc", tests, NULL, NULL);
}
