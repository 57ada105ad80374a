/*
 * hook_fixture.c - the shared setup of the preloaded hook's tests
 * (hook_fixture.h).
 */
#include "hook_fixture.h"

#include <stdlib.h>

void hook_fixture_env(void)
{
    unsetenv("GPUSHARE_DISABLE");
    setenv("GPUSHARE_SWAP", "on", 1);
    setenv("GPUSHARE_BROKER", "ipc:///nonexistent/gpushare-test.sock", 1); /* fail open */
}

void hook_fixture_fill(CUdeviceptr p, size_t size, unsigned seed)
{
    unsigned char *b = malloc(size);
    REQUIRE(b);
    for (size_t i = 0; i < size; i++)
        b[i] = (unsigned char)(i * 11 + seed);
    REQ_CU(cuMemcpyHtoD(p, b, size));
    free(b);
}

int hook_fixture_holds(CUdeviceptr p, size_t size, unsigned seed)
{
    unsigned char *b = malloc(size);
    REQUIRE(b);
    REQ_CU(cuMemcpyDtoH(b, p, size));
    int same = 1;
    for (size_t i = 0; i < size && same; i++)
        same = b[i] == (unsigned char)(i * 11 + seed);
    free(b);
    return same;
}

void hook_fixture_relay(simchild_fn exporter, simchild_fn importer, size_t handle_bytes)
{
    simtest_fresh("256M", NULL);
    struct simchild a, b;
    simtest_spawn(&a, exporter, NULL);
    simtest_spawn(&b, importer, NULL);
    unsigned char h[4 * sizeof(CUipcMemHandle)];
    REQUIRE(handle_bytes <= sizeof h);
    simtest_recv(a.rd, h, handle_bytes);
    simtest_send(b.wr, h, handle_bytes);
    simtest_send_u64(a.wr, simtest_recv_u64(b.rd));
    simtest_join(&b);
    simtest_join(&a);
}
