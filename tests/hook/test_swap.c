/*
 * test_swap.c - the hook's swap tier (libhook/swap/) on the simulated
 * driver: VMM-backed allocations, moved out to host memory and back at the
 * same addresses, bit-exact, with the GPU's memory free while parked; a
 * free while parked; a window too small moves nothing; a swap in waits for
 * memory until a deadline that another thread may move.
 *
 * The simulated driver's device pointers are host addresses, so a plain
 * host buffer serves as the window in most tests; one imports chunks of
 * pinned host memory exported as descriptors, as the broker's pool lends
 * them.  Each test runs in a
 * child process on a machine of its own (simtest.h).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "simtest.h"
#include "swap_engine.h"
#include "swap_names.h"

#define MIB (1ull << 20)

static gs_swap_driver_t drv;
static gs_swap_ranges_t *ranges;
static gs_swap_engine_t *engine;

static void *lookup(void *lib, const char *name)
{
    return dlsym(lib, name);
}

/* In the child: the driver, the table and an engine. */
static CUcontext setup(int streams)
{
    CUcontext ctx = simtest_init();
    char why[128];
    REQUIRE(gs_swap_driver_resolve(&drv, RTLD_DEFAULT, lookup, why, sizeof why) == 0);
    ranges = gs_swap_ranges_new();
    /* Segments of one granule: large ranges move piece by piece. */
    gs_swap_engine_config_t cfg = {
        .streams = streams, .piece_bytes = 1 * MIB, .batch_bytes = 4 * MIB, .seg_bytes = 2 * MIB};
    engine = gs_swap_engine_new(&drv, ranges, &cfg);
    REQUIRE(ranges && engine);
    return ctx;
}

static void teardown_engine(void)
{
    gs_swap_engine_destroy(&engine);
    gs_swap_ranges_destroy(&ranges);
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    REQ_CU(cuMemGetInfo(&f, &t));
    return f;
}

static void fill(CUdeviceptr p, size_t n, unsigned seed)
{
    unsigned char *b = malloc(n);
    REQUIRE(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 131 + seed);
    REQ_CU(cuMemcpyHtoD(p, b, n));
    free(b);
}

static void check(CUdeviceptr p, size_t n, unsigned seed)
{
    unsigned char *b = malloc(n);
    REQUIRE(b);
    REQ_CU(cuMemcpyDtoH(b, p, n));
    for (size_t i = 0; i < n; i++)
        REQUIRE(b[i] == (unsigned char)(i * 131 + seed));
    free(b);
}

static gs_swap_window_t host_window(size_t bytes, size_t chunk)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return (gs_swap_window_t){.va = (CUdeviceptr)(uintptr_t)p,
                              .bytes = bytes,
                              .chunk_bytes = chunk,
                              .chunks = (int)(bytes / chunk),
                              .mapped = (int)(bytes / chunk)};
}

/* n ranges of the given sizes, each filled with its own pattern (seed + i). */
static void alloc_filled(CUcontext ctx, CUdeviceptr *p, const size_t *sizes, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        REQ_CU(gs_swap_alloc(engine, ctx, 0, sizes[i], &p[i]));
        fill(p[i], sizes[i], seed + (unsigned)i);
    }
}

static void check_all(const CUdeviceptr *p, const size_t *sizes, int n, unsigned seed)
{
    for (int i = 0; i < n; i++)
        check(p[i], sizes[i], seed + (unsigned)i);
}

static void free_all(const CUdeviceptr *p, int n)
{
    for (int i = 0; i < n; i++) {
        int ours = 0;
        REQ_CU(gs_swap_free(engine, p[i], &ours));
        REQUIRE(ours);
    }
}

/* ---- tests ---------------------------------------------------------------- */

static void round_trip_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(3);
    size_t before = free_bytes();
    /* Sizes that are and are not multiples of the granularity. */
    size_t sizes[] = {1, 3 * MIB + 5, 2 * MIB, 9 * MIB};
    CUdeviceptr p[4];
    for (int i = 0; i < 4; i++) {
        REQ_CU(gs_swap_alloc(engine, ctx, 0, sizes[i], &p[i]));
        fill(p[i], sizes[i], (unsigned)i);
    }
    uint64_t resident, parked;
    gs_swap_ranges_totals(ranges, 0, &resident, &parked);
    REQUIRE(resident == (2 + 4 + 2 + 10) * MIB && parked == 0);
    REQUIRE(free_bytes() == before - resident);

    gs_swap_window_t w = host_window(32 * MIB, 8 * MIB);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(res.bytes == resident && res.ranges == 4);
    gs_swap_ranges_totals(ranges, 0, &resident, &parked);
    REQUIRE(resident == 0 && parked == 18 * MIB);
    REQUIRE(free_bytes() == before); /* the GPU's memory is free while parked */

    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    REQUIRE(res.ranges == 4);
    for (int i = 0; i < 4; i++) /* same addresses, same bytes */
        check(p[i], sizes[i], (unsigned)i);
    /* Again, with a range allocated meanwhile: every range gets a place of
     * its own in the window (a range back from an earlier park keeps none). */
    CUdeviceptr extra;
    REQ_CU(gs_swap_alloc(engine, ctx, 0, 4 * MIB, &extra));
    fill(extra, 4 * MIB, 9);
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(res.ranges == 5);
    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    for (int i = 0; i < 4; i++)
        check(p[i], sizes[i], (unsigned)i);
    check(extra, 4 * MIB, 9);
    int extra_ours = 0;
    REQ_CU(gs_swap_free(engine, extra, &extra_ours));
    gs_swap_range_t r;
    REQUIRE(gs_swap_ranges_find(ranges, p[1] + 3 * MIB, &r) && r.va == p[1] && r.size == sizes[1] &&
            !gs_swap_range_parked(&r));
    for (int i = 0; i < 4; i++) {
        int ours = 0;
        REQ_CU(gs_swap_free(engine, p[i], &ours));
        REQUIRE(ours);
    }
    REQUIRE(free_bytes() == before);
    teardown_engine();
}

static void parked_memory_round_trips_bit_exact(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(round_trip_child, NULL);
}

/* A partial swap out moves whole segments until it reaches its limit and
 * leaves the rest on the GPU; the swap in brings back only what went out;
 * a range that stayed takes no place in the window, so a later full park
 * places it after what is there then (a stale place would overlap). */
static void partial_out_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(2);
    size_t before = free_bytes();
    size_t sizes[] = {8 * MIB, 6 * MIB, 4 * MIB}; /* segments of 2 MiB */
    CUdeviceptr p[3];
    alloc_filled(ctx, p, sizes, 3, 80);
    gs_swap_window_t w = host_window(32 * MIB, 8 * MIB);
    gs_swap_calls_t none = {0};
    gs_swap_result_t res;
    /* 5 MiB asked: three segments of the first range (6 MiB) go. */
    REQUIRE(gs_swap_move(engine, 0, &w, 1, 5 * MIB, NULL, &none, &res) == 0);
    REQUIRE(res.bytes == 6 * MIB);
    uint64_t resident, parked;
    gs_swap_ranges_totals(ranges, 0, &resident, &parked);
    REQUIRE(resident == 12 * MIB && parked == 6 * MIB);
    REQUIRE(free_bytes() == before - 12 * MIB);
    int out = 0;
    for (int i = 0; i < 3; i++) { /* only what went out has a place */
        gs_swap_range_t r;
        REQUIRE(gs_swap_ranges_find(ranges, p[i], &r));
        REQUIRE(r.resident_bytes == r.bytes ? !r.host_set : r.host_set);
        out += r.resident_bytes < r.bytes;
    }
    REQUIRE(out >= 1 && out <= 2);
    int64_t deadline = gs_swap_deadline(1000);
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &none, &res) == 0);
    REQUIRE(res.bytes == 6 * MIB);
    check_all(p, sizes, 3, 80);
    /* Now all of it, the other way round in the window: bit-exact again. */
    REQUIRE(gs_swap_move(engine, 0, &w, 1, 10 * MIB, NULL, &none, &res) == 0);
    REQUIRE(res.bytes == 10 * MIB); /* the first range and one segment of the second */
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &none, &res) == 0);
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(res.bytes == 18 * MIB && res.ranges == 3);
    REQUIRE(free_bytes() == before);
    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    check_all(p, sizes, 3, 80);
    free_all(p, 3);
    teardown_engine();
}

static void a_partial_swap_out_leaves_the_rest_on_the_gpu(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(partial_out_child, NULL);
}

static void free_while_parked_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(2);
    size_t before = free_bytes();
    CUdeviceptr a, b;
    REQ_CU(gs_swap_alloc(engine, ctx, 0, 4 * MIB, &a));
    REQ_CU(gs_swap_alloc(engine, ctx, 0, 6 * MIB, &b));
    fill(b, 6 * MIB, 7);
    gs_swap_window_t w = host_window(16 * MIB, 4 * MIB);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    int ours = 0;
    REQ_CU(gs_swap_free(engine, a, &ours)); /* the program frees while parked */
    REQUIRE(ours);
    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    REQUIRE(res.ranges == 1);
    check(b, 6 * MIB, 7);
    REQUIRE(free_bytes() == before - 6 * MIB);
    REQ_CU(gs_swap_free(engine, b, &ours));
    /* Not ours: nothing done, the caller passes it to the driver. */
    REQ_CU(gs_swap_free(engine, 12345, &ours));
    REQUIRE(!ours);
    teardown_engine();
}

static void a_free_while_parked_gives_the_range_up(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(free_while_parked_child, NULL);
}

static void small_window_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(2);
    CUdeviceptr a;
    REQ_CU(gs_swap_alloc(engine, ctx, 0, 10 * MIB, &a));
    fill(a, 10 * MIB, 3);
    size_t before = free_bytes();
    gs_swap_window_t w = host_window(8 * MIB, 4 * MIB);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == -1);
    REQUIRE(strstr(res.error, "host window"));
    REQUIRE(res.bytes == 0 && free_bytes() == before); /* nothing moved */
    check(a, 10 * MIB, 3);
    int ours;
    REQ_CU(gs_swap_free(engine, a, &ours));
    teardown_engine();
}

static void a_window_too_small_moves_nothing(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(small_window_child, NULL);
}

static void progress_fn(void *arg, uint64_t done, uint64_t total)
{
    uint64_t *seen = arg;
    REQUIRE(done <= total && done >= seen[0]);
    seen[0] = done;
    seen[1] = total;
    seen[2]++;
}

static void progress_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(4);
    CUdeviceptr p[6];
    for (int i = 0; i < 6; i++)
        REQ_CU(gs_swap_alloc(engine, ctx, 0, 4 * MIB, &p[i]));
    gs_swap_window_t w = host_window(32 * MIB, 8 * MIB);
    uint64_t seen[3] = {0};
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, progress_fn, seen, &res) == 0);
    REQUIRE(seen[0] == 24 * MIB && seen[1] == 24 * MIB && seen[2] >= 3);
    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    for (int i = 0; i < 6; i++) {
        int ours;
        REQ_CU(gs_swap_free(engine, p[i], &ours));
    }
    teardown_engine();
}

static void progress_is_reported_batch_by_batch(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(progress_child, NULL);
}

/* Host memory as the broker's pool pins it: HOST_NUMA chunks with
 * descriptor handles, made without a context, exported as descriptors. */
static void pin_chunks(int *fds, int n, size_t chunk)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    for (int i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        REQ_CU(cuMemCreate(&h, chunk, &prop, 0));
        REQ_CU(
            cuMemExportToShareableHandle(&fds[i], h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        REQ_CU(cuMemRelease(h)); /* the descriptor keeps it */
    }
}

static void pooled_window_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(4);
    size_t before = free_bytes();
    int fds[4];
    pin_chunks(fds, 4, 4 * MIB);
    REQUIRE(free_bytes() == before); /* pinned host memory is no GPU memory */
    CUdeviceptr p[3];
    size_t sizes[] = {6 * MIB, 2 * MIB, 4 * MIB + 3};
    alloc_filled(ctx, p, sizes, 3, 40);
    gs_swap_window_t w;
    char err[200];
    REQUIRE(gs_swap_window_open(&drv, 0, fds, 4, 4 * MIB, &w, err, sizeof err) == 0);
    for (int i = 0; i < 4; i++)
        close(fds[i]); /* the window's mappings hold the memory */
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(free_bytes() == before);
    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    check_all(p, sizes, 3, 40);
    gs_swap_window_close(&drv, &w);
    free_all(p, 3);
    /* Not exportable: a descriptor is refused, as on the driver. */
    CUmemAllocationProp plain;
    memset(&plain, 0, sizeof plain);
    plain.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    plain.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    CUmemGenericAllocationHandle h;
    int fd = -1;
    REQ_CU(cuMemCreate(&h, 2 * MIB, &plain, 0));
    REQ_CU_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemRelease(h));
    teardown_engine();
}

static void a_window_of_pinned_chunks_holds_the_parked_memory(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(pooled_window_child, NULL);
}

/* A window mapped as the copies go, and given back as they come back (the
 * relay of a switch, swap_engine.h gs_swap_calls_t): swap out maps each
 * further chunk only when the next segment needs it; swap in reports each
 * position once nothing of it is still to come back, and the caller
 * unmaps it at once (were it still needed, the copy would read unmapped
 * memory). */
struct relay_probe {
    int *fds, nfds, next;
    int more_calls, waited;
    int reported[8], reports;
};

static int probe_more(void *arg, gs_swap_window_t *w, uint64_t upto, int wait, char *err,
                      size_t errlen)
{
    struct relay_probe *r = arg;
    r->more_calls++;
    r->waited += wait;
    while (gs_swap_window_mapped_bytes(w) < upto && r->next < r->nfds) {
        if (gs_swap_window_extend(&drv, w, &r->fds[r->next], 1, err, errlen) != 0)
            return -1;
        r->next++;
    }
    return gs_swap_window_mapped_bytes(w) >= upto ? 0 : wait ? -1 : 1;
}

static void probe_done(void *arg, gs_swap_window_t *w, const int *positions, int n)
{
    struct relay_probe *r = arg;
    r->reports++;
    for (int i = 0; i < n; i++) {
        REQUIRE(positions[i] >= 0 && positions[i] < 8);
        r->reported[positions[i]]++;
        gs_swap_window_drop(&drv, w, positions[i]);
    }
}

static void relay_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(4);
    size_t before = free_bytes();
    int fds[5];
    pin_chunks(fds, 5, 4 * MIB);
    CUdeviceptr p[3];
    size_t sizes[] = {6 * MIB, 2 * MIB, 4 * MIB + 3}; /* 14 MiB backed: 4 chunks of 5 */
    alloc_filled(ctx, p, sizes, 3, 60);
    gs_swap_window_t w;
    char err[200];
    REQUIRE(gs_swap_window_open_part(&drv, 0, fds, 1, 5, 4 * MIB, &w, err, sizeof err) == 0);
    struct relay_probe r = {.fds = fds, .nfds = 5, .next = 1};
    gs_swap_calls_t out = {NULL, probe_more, NULL, &r};
    gs_swap_result_t res;
    REQUIRE(gs_swap_move(engine, 0, &w, 1, 0, NULL, &out, &res) == 0);
    REQUIRE(free_bytes() == before);
    REQUIRE(w.mapped == 4); /* the fifth chunk was never needed */
    REQUIRE(r.waited == 0); /* every chunk was at hand */
    REQUIRE(r.more_calls >= 3);
    gs_swap_calls_t in = {NULL, NULL, probe_done, &r};
    int64_t deadline = gs_swap_deadline(1000);
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &in, &res) == 0);
    for (int i = 0; i < 4; i++)
        REQUIRE(r.reported[i] == 1); /* each once */
    REQUIRE(r.reports >= 3);         /* as the batches came back, not at the end */
    check_all(p, sizes, 3, 60);
    gs_swap_window_close(&drv, &w);
    for (int i = 0; i < 5; i++)
        close(fds[i]);
    free_all(p, 3);
    teardown_engine();
}

static void a_window_is_mapped_as_it_goes_and_given_back_as_it_comes(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(relay_child, NULL);
}

/* The disk tier (swap_window.h, gs_swap_window_hollow): after a swap out
 * the broker copies the window's chunks to its disk and back into other
 * chunks; meanwhile the window is hollow, its chunks unmapped and gone
 * back, its address range and every range's place kept.  A swap in that
 * cannot map chunks there fails before it copies anything; one that maps
 * the other chunks as they come brings everything back bit-exact. */
static void hollow_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(4);
    size_t before = free_bytes();
    int a[4], b[4];
    pin_chunks(a, 4, 4 * MIB);
    pin_chunks(b, 4, 4 * MIB);
    CUdeviceptr p[3];
    size_t sizes[] = {6 * MIB, 2 * MIB, 4 * MIB + 3};
    alloc_filled(ctx, p, sizes, 3, 70);
    gs_swap_window_t w, disk;
    char err[200];
    REQUIRE(gs_swap_window_open(&drv, 0, a, 4, 4 * MIB, &w, err, sizeof err) == 0);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(free_bytes() == before);
    /* The disk's round trip: chunks a into chunks b (the simulated
     * driver's mappings are host addresses). */
    REQUIRE(gs_swap_window_open(&drv, 0, b, 4, 4 * MIB, &disk, err, sizeof err) == 0);
    memcpy((void *)(uintptr_t)disk.va, (const void *)(uintptr_t)w.va, 16 * MIB);
    gs_swap_window_close(&drv, &disk);
    gs_swap_window_hollow(&drv, &w);
    REQUIRE(gs_swap_window_is_hollow(&w) && w.va != 0 && w.chunks == 4);
    /* Nothing to read from: refused before any copy, nothing lost. */
    int64_t deadline = gs_swap_deadline(1000);
    gs_swap_calls_t bare = {NULL, NULL, NULL, NULL};
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &bare, &res) != 0);
    REQUIRE(strstr(res.error, "beyond the host memory mapped") != NULL);
    REQUIRE(free_bytes() == before);
    /* Chunks b mapped as the copies need them, from position 0. */
    struct relay_probe r = {.fds = b, .nfds = 4, .next = 0};
    gs_swap_calls_t in = {NULL, probe_more, probe_done, &r};
    deadline = gs_swap_deadline(1000);
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &in, &res) == 0);
    REQUIRE(r.more_calls >= 2); /* chunk by chunk, not all before the first copy */
    for (int i = 0; i < 4; i++)
        REQUIRE(r.reported[i] == 1);
    check_all(p, sizes, 3, 70);
    gs_swap_window_close(&drv, &w);
    for (int i = 0; i < 4; i++) {
        close(a[i]);
        close(b[i]);
    }
    free_all(p, 3);
    teardown_engine();
}

static void a_hollow_window_comes_back_from_other_chunks(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(hollow_child, NULL);
}

/* A swap in that fails half way has given some positions back already (and
 * the spare ones at once); a park before the rest came back must not place
 * anything there: it fails cleanly instead (their memory is unmapped), and
 * everything still comes back bit-exact. */
static void partial_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(4);
    int fds[5];
    pin_chunks(fds, 5, 4 * MIB);
    CUdeviceptr p[3];
    size_t sizes[] = {6 * MIB, 2 * MIB, 4 * MIB + 3}; /* 14 MiB backed */
    alloc_filled(ctx, p, sizes, 3, 70);
    gs_swap_window_t w;
    char err[200];
    REQUIRE(gs_swap_window_open_part(&drv, 0, fds, 5, 5, 4 * MIB, &w, err, sizeof err) == 0);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    /* Room for the first range only: the swap in brings it back, then
     * waits for memory past its deadline. */
    CUdeviceptr block;
    REQ_CU(cuMemAlloc(&block, free_bytes() - 6 * MIB));
    struct relay_probe r = {.fds = fds, .nfds = 5, .next = 5};
    gs_swap_calls_t in = {NULL, NULL, probe_done, &r};
    int64_t deadline = gs_swap_deadline(200);
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &in, &res) == -1);
    REQUIRE(r.reported[4] == 1 && r.reported[0] == 1); /* the spare one, and range 0's first */
    REQ_CU(cuMemFree(block));
    /* Parked again now: range 0 would go to [14, 20) MiB, onto position 4. */
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == -1);
    REQUIRE(strstr(res.error, "window") != NULL);
    deadline = gs_swap_deadline(1000);
    REQUIRE(gs_swap_move(engine, 0, &w, 0, 0, &deadline, &in, &res) == 0);
    check_all(p, sizes, 3, 70);
    gs_swap_window_close(&drv, &w);
    for (int i = 0; i < 5; i++)
        close(fds[i]);
    free_all(p, 3);
    teardown_engine();
}

static void a_park_after_a_failed_swap_in_avoids_what_it_gave_back(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(partial_child, NULL);
}

/* ---- the program's own virtual memory (swap_vmm.c) ---------------------------- */

/* What PyTorch's expandable segments do: reserve, then per page create,
 * map (through the engine, as the hook's wrapper does) and give access. */
static CUdeviceptr vmm_segment(CUcontext ctx, int pages, size_t page,
                               CUmemGenericAllocationHandle *h)
{
    CUdeviceptr base = 0;
    REQ_CU(cuMemAddressReserve(&base, pages * page, 0, 0, 0));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    for (int i = 0; i < pages; i++) {
        REQ_CU(cuMemCreate(&h[i], page, &prop, 0));
        gs_swap_vmm_created(engine, &h[i], page, 0);
        CUresult r = CUDA_ERROR_UNKNOWN;
        int dev = -1;
        REQUIRE(gs_swap_vmm_map(engine, ctx, base + i * page, page, 0, h[i], 0, &r, &dev) ==
                GS_SWAP_VMM_DONE);
        REQ_CU(r);
    }
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUresult r = CUDA_ERROR_UNKNOWN;
    int dev = -1;
    REQUIRE(gs_swap_vmm_set_access(engine, base, pages * page, &a, 1, &r, &dev) ==
            GS_SWAP_VMM_DONE);
    REQ_CU(r);
    return base;
}

static void program_vmm_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(3);
    size_t before = free_bytes();
    enum { PAGES = 5 };
    CUmemGenericAllocationHandle h[PAGES];
    CUdeviceptr base = vmm_segment(ctx, PAGES, 2 * MIB, h);
    /* A plain allocation of the tier beside it moves too. */
    CUdeviceptr own;
    REQ_CU(gs_swap_alloc(engine, ctx, 0, 4 * MIB, &own));
    fill(base, PAGES * 2 * MIB, 21);
    fill(own, 4 * MIB, 22);
    uint64_t resident, parked;
    gs_swap_ranges_totals(ranges, 0, &resident, &parked);
    REQUIRE(resident == (PAGES * 2 + 4) * MIB && parked == 0);

    gs_swap_window_t w = host_window(32 * MIB, 8 * MIB);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(res.ranges == PAGES + 1);
    REQUIRE(free_bytes() == before); /* the program's pages are off the GPU too */
    /* While out, calls that need the memory say so instead of calling the
     * driver (the hook then brings it back and calls again). */
    CUresult r = CUDA_SUCCESS;
    int dev = -1;
    REQUIRE(gs_swap_vmm_unmap(engine, base, 2 * MIB, &r, &dev) == GS_SWAP_VMM_PARKED && dev == 0);
    CUmemGenericAllocationHandle real = 0;
    REQUIRE(gs_swap_vmm_handle(engine, h[1], 1, &real, &dev) == GS_SWAP_VMM_PARKED);
    /* A release while out: the mapping alone holds the memory from now on. */
    REQUIRE(gs_swap_vmm_release(engine, h[4], &r, &dev) == GS_SWAP_VMM_DONE);
    REQ_CU(r);

    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    check(base, PAGES * 2 * MIB, 21); /* same addresses, same bytes */
    check(own, 4 * MIB, 22);
    /* The program's names now stand for new handles to the driver. */
    CUmemAllocationProp p;
    REQUIRE(gs_swap_vmm_handle(engine, h[0], 0, &real, &dev) == GS_SWAP_VMM_DONE);
    REQ_CU(cuMemGetAllocationPropertiesFromHandle(&p, real));
    REQUIRE(p.location.type == CU_MEM_LOCATION_TYPE_DEVICE && p.location.id == 0);
    unsigned long long flags = 0;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    REQ_CU(cuMemGetAccess(&flags, &loc, base + 3 * MIB)); /* the access given again */
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    /* Exported: fixed where it is; the next park leaves it on the GPU. */
    REQUIRE(gs_swap_vmm_handle(engine, h[2], 1, &real, &dev) == GS_SWAP_VMM_DONE);
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    REQUIRE(res.ranges == PAGES); /* 4 pages + own; the fixed page stayed */
    REQUIRE(free_bytes() == before - 2 * MIB);
    REQUIRE(gs_swap_in(engine, 0, &w, 1000, NULL, NULL, &res) == 0);
    check(base, PAGES * 2 * MIB, 21);

    /* The program gives it all back as PyTorch does: unmap, release. */
    REQUIRE(gs_swap_vmm_unmap(engine, base, PAGES * 2 * MIB, &r, &dev) == GS_SWAP_VMM_DONE);
    REQ_CU(r);
    for (int i = 0; i < PAGES - 1; i++) { /* h[4] was released while out */
        REQUIRE(gs_swap_vmm_release(engine, h[i], &r, &dev) == GS_SWAP_VMM_DONE);
        REQ_CU(r);
    }
    REQ_CU(cuMemAddressFree(base, PAGES * 2 * MIB));
    int ours = 0;
    REQ_CU(gs_swap_free(engine, own, &ours));
    REQUIRE(free_bytes() == before); /* nothing leaked, nothing released twice */
    /* Not tracked: the caller calls the driver. */
    REQUIRE(gs_swap_vmm_release(engine, 777, &r, &dev) == GS_SWAP_VMM_PASS);
    teardown_engine();
}

static void the_programs_own_mappings_move_too(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(program_vmm_child, NULL);
}

static void names_are_translated_and_chosen_apart(void **state)
{
    (void)state;
    gs_swap_names_t *n = gs_swap_names_new();
    REQUIRE(n);
    gs_swap_name_t a = {.name = 100, .real = 100, .size = 2 * MIB, .refs = 1};
    REQUIRE(gs_swap_names_add(n, &a) == 0);
    REQUIRE(gs_swap_names_add(n, &a) == -1); /* a name is one entry */
    /* The driver hands out 100 again (released and reused) while the
     * program still holds 100 for other memory: the new one is renamed. */
    gs_swap_names_get(n, 100)->real = 0; /* parked */
    CUmemGenericAllocationHandle c = gs_swap_names_choose(n, 100);
    REQUIRE(c != 100 && c != 0);
    gs_swap_name_t b = {.name = c, .real = 100, .size = 2 * MIB, .refs = 1};
    REQUIRE(gs_swap_names_add(n, &b) == 0);
    REQUIRE(gs_swap_names_by_real(n, 100)->name == c);
    REQUIRE(gs_swap_names_choose(n, 555) == 555); /* free values stay as they are */
    gs_swap_names_remove(n, 100);
    REQUIRE(!gs_swap_names_get(n, 100) && gs_swap_names_get(n, c));
    REQUIRE(gs_swap_names_count(n) == 1);
    gs_swap_names_destroy(&n);
    REQUIRE(!n);
}

/* ---- a swap in's wait for memory, moved by another thread ------------------ */

struct mover {
    CUcontext ctx;
    int64_t *deadline;
    int extend;          /* 1: push the deadline 30 s out, then free the blocker */
    CUdeviceptr blocker; /* the memory that keeps the swap in waiting */
};

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void *move_deadline(void *arg)
{
    struct mover *m = arg;
    pause_ms(200); /* the swap in waits for memory by now */
    if (!m->extend) {
        __atomic_store_n(m->deadline, 0, __ATOMIC_RELEASE); /* a swap_out came */
        return NULL;
    }
    /* The broker asked again (hook_swap.c): a later deadline, past the
     * first one; the memory comes free after the first one passed. */
    __atomic_store_n(m->deadline, gs_swap_deadline(30000), __ATOMIC_RELEASE);
    pause_ms(400);
    REQ_CU(cuCtxSetCurrent(m->ctx));
    REQ_CU(cuMemFree(m->blocker));
    return NULL;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void moved_deadline_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = setup(2);
    CUdeviceptr p;
    REQ_CU(gs_swap_alloc(engine, ctx, 0, 16 * MIB, &p));
    fill(p, 16 * MIB, 5);
    gs_swap_window_t w = host_window(16 * MIB, 4 * MIB);
    gs_swap_result_t res;
    REQUIRE(gs_swap_out(engine, 0, &w, NULL, NULL, &res) == 0);
    /* Another program takes the GPU's memory: the swap in must wait. */
    struct mover m = {.ctx = ctx};
    REQ_CU(cuMemAlloc(&m.blocker, free_bytes() - 4 * MIB));

    /* A swap_out behind it ends the wait at once, not 30 s later. */
    int64_t deadline = gs_swap_deadline(30000);
    m.deadline = &deadline;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, move_deadline, &m) == 0);
    int64_t t0 = mono_ms();
    REQUIRE(gs_swap_in_until(engine, 0, &w, &deadline, NULL, NULL, &res) == -1);
    REQUIRE(mono_ms() - t0 < 10000);
    REQUIRE(strstr(res.error, "OUT_OF_MEMORY"));
    pthread_join(t, NULL);

    /* A deadline pushed out keeps it waiting past the first one. */
    deadline = gs_swap_deadline(400); /* moved at 200 ms; memory free at 600 ms */
    m.extend = 1;
    REQUIRE(pthread_create(&t, NULL, move_deadline, &m) == 0);
    REQUIRE(gs_swap_in_until(engine, 0, &w, &deadline, NULL, NULL, &res) == 0);
    pthread_join(t, NULL);
    check(p, 16 * MIB, 5);
    teardown_engine();
}

static void a_swap_in_waits_for_memory_until_a_deadline_others_move(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(moved_deadline_child, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(parked_memory_round_trips_bit_exact, simtest_teardown),
        cmocka_unit_test_teardown(a_partial_swap_out_leaves_the_rest_on_the_gpu, simtest_teardown),
        cmocka_unit_test_teardown(a_free_while_parked_gives_the_range_up, simtest_teardown),
        cmocka_unit_test_teardown(a_window_too_small_moves_nothing, simtest_teardown),
        cmocka_unit_test_teardown(progress_is_reported_batch_by_batch, simtest_teardown),
        cmocka_unit_test_teardown(a_window_of_pinned_chunks_holds_the_parked_memory,
                                  simtest_teardown),
        cmocka_unit_test_teardown(a_window_is_mapped_as_it_goes_and_given_back_as_it_comes,
                                  simtest_teardown),
        cmocka_unit_test_teardown(a_park_after_a_failed_swap_in_avoids_what_it_gave_back,
                                  simtest_teardown),
        cmocka_unit_test_teardown(a_hollow_window_comes_back_from_other_chunks, simtest_teardown),
        cmocka_unit_test_teardown(the_programs_own_mappings_move_too, simtest_teardown),
        cmocka_unit_test(names_are_translated_and_chosen_apart),
        cmocka_unit_test_teardown(a_swap_in_waits_for_memory_until_a_deadline_others_move,
                                  simtest_teardown),
    };
    return cmocka_run_group_tests_name("swap", tests, NULL, NULL);
}
