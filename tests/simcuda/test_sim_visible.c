/*
 * test_sim_visible.c - CUDA_VISIBLE_DEVICES on the simulated machine, as
 * the driver reads it (issue 18): indices and UUIDs (or unique prefixes)
 * in the order given, the list cut at the first entry that names no
 * device or repeats one, cuInit failing with CUDA_ERROR_NO_DEVICE when it
 * names none; ordinals (cuDeviceGet, a memory location's id, the
 * DEVICE_ORDINAL attribute) are this process' own while the UUID and the
 * memory a device holds are the machine's.  Each case runs in a child:
 * the variable is read once, at cuInit.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "simtest.h"

/* Four devices; `spec` NULL leaves the variable unset. */
static void machine(void)
{
    simtest_fresh("1G", NULL);
    setenv("GPUSHARE_SIM_DEVICES", "4", 1);
}

static void uuid_str(CUdevice d, char out[64])
{
    CUuuid u;
    REQ_CU(cuDeviceGetUuid(&u, d));
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(out, 64, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* The UUIDs of all four, as an unrestricted process sees them. */
static char all[4][64];

static void read_all(int rd, int wr, void *arg)
{
    (void)rd, (void)arg;
    REQ_CU(cuInit(0));
    int n = 0;
    REQ_CU(cuDeviceGetCount(&n));
    REQUIRE(n == 4);
    for (int i = 0; i < 4; i++) {
        CUdevice d;
        REQ_CU(cuDeviceGet(&d, i));
        char s[64];
        uuid_str(d, s);
        simtest_send(wr, s, sizeof s);
    }
    _exit(0);
}

static void learn_uuids(void)
{
    struct simchild c;
    simtest_spawn(&c, read_all, NULL);
    for (int i = 0; i < 4; i++)
        simtest_recv(c.rd, all[i], sizeof all[i]);
    simtest_join(&c);
}

struct expect {
    const char *spec;
    int n;       /* devices visible */
    int want[4]; /* machine index of each ordinal */
};

/* Sees exactly e->want, in order, by UUID. */
static void sees(int rd, int wr, void *arg)
{
    (void)rd, (void)wr;
    const struct expect *e = arg;
    setenv("CUDA_VISIBLE_DEVICES", e->spec, 1);
    if (e->n == 0) {
        REQ_CU_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
        _exit(0);
    }
    REQ_CU(cuInit(0));
    int n = -1;
    REQ_CU(cuDeviceGetCount(&n));
    REQUIRE(n == e->n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        REQ_CU(cuDeviceGet(&d, i));
        char s[64];
        uuid_str(d, s);
        REQUIRE(strcmp(s, all[e->want[i]]) == 0);
    }
    CUdevice d;
    REQ_CU_EQ(cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
    _exit(0);
}

static void indices_and_uuids_in_the_order_given(void **state)
{
    (void)state;
    machine();
    learn_uuids();
    char by_uuid[200], prefix[32];
    snprintf(by_uuid, sizeof by_uuid, "%s,%s", all[3], all[1]);
    snprintf(prefix, sizeof prefix, "%.12s", all[2]); /* GPU-xxxxxxxx: unique here */
    struct expect cases[] = {
        {"2", 1, {2}},        {"3,0", 2, {3, 0}}, {by_uuid, 2, {3, 1}}, {prefix, 1, {2}},
        {"1,7,2", 1, {1}}, /* cut at the first entry that is no device */
        {"1,1,2", 1, {1}}, /* or repeats one */
        {"0,GPU-zz", 1, {0}}, {"", 0, {0}},       {"-1", 0, {0}},       {"GPU-", 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        simtest_in_child(sees, &cases[i]);
}

/* Device 2 seen as ordinal 0: memory it creates there is the machine's
 * device 2 (another process sees it used there), its location id and
 * DEVICE_ORDINAL are 0, and ordinal 1 does not exist. */
static void ordinals_are_the_process_own(int rd, int wr, void *arg)
{
    (void)rd, (void)arg;
    setenv("CUDA_VISIBLE_DEVICES", "2", 1);
    simtest_init();
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 1;
    CUmemGenericAllocationHandle h;
    REQ_CU_EQ(cuMemCreate(&h, 2 << 20, &p, 0), CUDA_ERROR_INVALID_DEVICE);
    p.location.id = 0;
    REQ_CU(cuMemCreate(&h, 64 << 20, &p, 0));
    CUmemAllocationProp got;
    REQ_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
    REQUIRE(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0);
    CUdeviceptr va;
    REQ_CU(cuMemAddressReserve(&va, 64 << 20, 0, 0, 0));
    REQ_CU(cuMemMap(va, 64 << 20, 0, h, 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    REQ_CU(cuMemSetAccess(va, 64 << 20, &a, 1));
    CUdeviceptr plain;
    REQ_CU(cuMemAlloc(&plain, 32 << 20));
    unsigned int ord = 99;
    REQ_CU(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, plain));
    REQUIRE(ord == 0);
    simtest_send_u64(wr, 1); /* the parent looks at the machine now */
    simtest_recv_u64(rd);
    _exit(0);
}

static void memory_lands_on_the_machine_device(void **state)
{
    (void)state;
    machine();
    learn_uuids();
    struct simchild c;
    simtest_spawn(&c, ordinals_are_the_process_own, NULL);
    assert_int_equal(simtest_recv_u64(c.rd), 1);
    /* An unrestricted process: 96 MiB used on device 2, nothing on 0. */
    CK(cuInit(0));
    size_t free0, total0, free2, total2;
    CUcontext ctx;
    CUdevice d0, d2;
    CK(cuDeviceGet(&d0, 0));
    CK(cuDeviceGet(&d2, 2));
    CK(cuDevicePrimaryCtxRetain(&ctx, d2));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemGetInfo(&free2, &total2));
    CK(cuDevicePrimaryCtxRetain(&ctx, d0));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemGetInfo(&free0, &total0));
    assert_int_equal(total2 - free2, 96 << 20);
    assert_int_equal(total0 - free0, 0);
    simtest_send_u64(c.wr, 1);
    simtest_join(&c);
}

/* Memory exported by a process that sees machine device 2 as ordinal 0
 * is device 2 in a process that sees it as ordinal 1 ("3,2"), and a
 * process that does not see device 2 cannot import it. */
static CUmemAllocationProp device_prop(int ordinal)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = ordinal;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

static void exporter(int rd, int wr, void *arg)
{
    int sock = *(int *)arg;
    setenv("CUDA_VISIBLE_DEVICES", "2", 1);
    simtest_init();
    CUmemAllocationProp p = device_prop(0);
    CUmemGenericAllocationHandle h;
    REQ_CU(cuMemCreate(&h, 2 << 20, &p, 0));
    int fd = -1;
    REQ_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    simtest_send_fd(sock, fd);
    simtest_send_fd(sock, fd);
    simtest_send_u64(wr, 1);
    simtest_recv_u64(rd);
    _exit(0);
}

struct importer_arg {
    int sock;
    const char *visible;
    int want; /* its ordinal of the memory's device; -1: cannot import */
};

static void importer(int rd, int wr, void *arg)
{
    const struct importer_arg *a = arg;
    setenv("CUDA_VISIBLE_DEVICES", a->visible, 1);
    simtest_init();
    int fd = simtest_recv_fd(a->sock);
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (a->want < 0) {
        REQUIRE(r != CUDA_SUCCESS);
    } else {
        REQ_CU(r);
        CUmemAllocationProp got;
        REQ_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
        REQUIRE(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == a->want);
    }
    simtest_send_u64(wr, 1);
    simtest_recv_u64(rd);
    _exit(0);
}

static void exported_memory_keeps_its_machine_device(void **state)
{
    (void)state;
    machine();
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct importer_arg sees = {sv[1], "3,2", 1}, blind = {sv[1], "0,1", -1};
    struct simchild e, i1, i2;
    simtest_spawn(&e, exporter, &sv[0]);
    assert_int_equal(simtest_recv_u64(e.rd), 1);
    simtest_spawn(&i1, importer, &sees);
    assert_int_equal(simtest_recv_u64(i1.rd), 1);
    simtest_spawn(&i2, importer, &blind);
    assert_int_equal(simtest_recv_u64(i2.rd), 1);
    for (struct simchild *c = &i1; c; c = c == &i1 ? &i2 : NULL) {
        simtest_send_u64(c->wr, 1);
        simtest_join(c);
    }
    simtest_send_u64(e.wr, 1);
    simtest_join(&e);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(indices_and_uuids_in_the_order_given, simtest_teardown),
        cmocka_unit_test_teardown(memory_lands_on_the_machine_device, simtest_teardown),
        cmocka_unit_test_teardown(exported_memory_keeps_its_machine_device, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda CUDA_VISIBLE_DEVICES", tests, NULL, NULL);
}
