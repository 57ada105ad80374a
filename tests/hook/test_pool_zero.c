/*
 * test_pool_zero.c - the broker's host pool zeroes a chunk before another
 * user gets it (broker/park/pool_driver.h, gs_pool_driver_zero), on the
 * simulated driver: one chunk holds a user's bytes (written through a
 * descriptor, as a notebook's hook writes it through its window), the
 * pool zeroes it, and every byte reads zero, while the chunk beside it
 * keeps its bytes.  Which chunks are zeroed, and when, is the pool's
 * logic (tests/unit/test_host_pool.c); this is the driver calls doing it.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pool_driver.h"
#include "simtest.h"

#define CHUNK (4u << 20)

static unsigned char *map_chunk(gs_pool_driver_t *d, uint64_t h)
{
    char err[200];
    int fd = -1;
    REQUIRE(gs_pool_driver_export(d, h, &fd, err, sizeof err) == 0);
    unsigned char *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    close(fd);
    return p;
}

static void zero_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    char err[200];
    gs_pool_driver_t *d = gs_pool_driver_load(0, err, sizeof err);
    REQUIRE(d);
    uint64_t h[2];
    unsigned char *p[2];
    for (int i = 0; i < 2; i++) {
        REQUIRE(gs_pool_driver_pin(d, CHUNK, &h[i], err, sizeof err) == 0);
        p[i] = map_chunk(d, h[i]);
        for (size_t k = 0; k < CHUNK; k++)
            p[i][k] = (unsigned char)(k * 7 + 1 + i);
    }
    REQUIRE(gs_pool_driver_zero(d, h[0], CHUNK, err, sizeof err) == 0);
    for (size_t k = 0; k < CHUNK; k++) {
        REQUIRE(p[0][k] == 0);
        REQUIRE(p[1][k] == (unsigned char)(k * 7 + 2));
    }
    for (int i = 0; i < 2; i++) {
        munmap(p[i], CHUNK);
        REQUIRE(gs_pool_driver_unpin(d, h[i], err, sizeof err) == 0);
    }
    gs_pool_driver_free(&d);
}

static void a_chunk_is_zeroed_and_its_neighbour_kept(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(zero_child, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(a_chunk_is_zeroed_and_its_neighbour_kept, simtest_teardown),
    };
    return cmocka_run_group_tests_name("pool_zero", tests, NULL, NULL);
}
