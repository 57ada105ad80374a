/*
 * test_disk_mover.c - the disk tier's copies (broker/park/disk_mover.h)
 * with plain memory standing in for pool chunks: a session's chunks go to
 * disk and come back bit-exact through a worker thread (awaited on the job
 * queue's eventfd), progress counts up to the total, and a chunk that
 * cannot be mapped or a full disk fails the move with words that say so
 * and leaves no file behind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>

#include "disk_mover.h"
#include "unit_fixture.h"

#define CHUNK  (128u * 1024u)
#define NCHUNK 3

typedef struct {
    unsigned char *mem[NCHUNK];
    int fail_on; /* this handle does not map (-1: none) */
    int mapped;  /* mapped now */
} fake_chunks_t;

static int fake_map(void *arg, uint64_t handle, size_t bytes, void **cpu, char *err, size_t errlen)
{
    fake_chunks_t *c = arg;
    assert_int_equal(bytes, CHUNK);
    if ((int)handle == c->fail_on) {
        snprintf(err, errlen, "cuMemMap: CUDA_ERROR_OUT_OF_MEMORY");
        return -1;
    }
    c->mapped++;
    *cpu = c->mem[handle];
    return 0;
}

static void fake_unmap(void *arg, void *cpu, size_t bytes)
{
    (void)cpu, (void)bytes;
    ((fake_chunks_t *)arg)->mapped--;
}

static void fake_init(fake_chunks_t *c, uint64_t seed)
{
    c->fail_on = -1;
    c->mapped = 0;
    for (int i = 0; i < NCHUNK; i++) {
        assert_int_equal(posix_memalign((void **)&c->mem[i], GS_DISK_ALIGN, CHUNK), 0);
        for (size_t b = 0; b < CHUNK; b++)
            c->mem[i][b] = seed ? (unsigned char)((b * 131 + (size_t)i * 7 + seed) & 0xff) : 0;
    }
}

static void fake_free(fake_chunks_t *c)
{
    for (int i = 0; i < NCHUNK; i++)
        free(c->mem[i]);
}

static char *fresh_dir(void)
{
    char dir[4096];
    assert_int_equal(unit_fixture_tmpdir_here(dir, sizeof dir, "disk-move"), 0);
    return strdup(dir);
}

static void remove_dir(char *d)
{
    assert_int_equal(unit_fixture_rmtree(d), 0);
    free(d);
}

static int files_in(const char *dir)
{
    return unit_fixture_count(dir, "");
}

static gs_disk_meta_t meta(void)
{
    gs_disk_meta_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.session, sizeof m.session, "hana@1001");
    m.pid = 99;
    m.gpu = 0;
    return m;
}

/* Runs the move on a worker and waits for the queue to hand it back. */
static void run_on_worker(gs_disk_move_t *m)
{
    gs_job_queue_t *q = gs_job_queue_new(1);
    assert_non_null(q);
    gs_job_queue_submit(q, gs_disk_move_job(m));
    gs_job_t *done = NULL;
    while (!done) {
        struct pollfd p = {.fd = gs_job_queue_fd(q), .events = POLLIN};
        assert_int_equal(poll(&p, 1, 60000), 1);
        done = gs_job_queue_done(q);
    }
    assert_ptr_equal(gs_disk_move_of(done), m);
    gs_job_queue_destroy(&q, NULL);
}

static const uint64_t handles[NCHUNK] = {0, 1, 2};

static void chunks_go_to_disk_and_come_back_bit_exact(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    fake_chunks_t src, dst;
    fake_init(&src, 5);
    fake_init(&dst, 0);
    uint64_t bytes = 2 * CHUNK + CHUNK / 2; /* the last chunk half used */
    gs_disk_meta_t m0 = meta();
    gs_disk_move_t *out = gs_disk_move_out(
        dir, &m0, handles, NCHUNK, CHUNK, bytes,
        &(gs_disk_chunks_t){.map = fake_map, .unmap = fake_unmap, .arg = &src}, NULL);
    assert_non_null(out);
    assert_int_equal(gs_disk_move_total_bytes(out), bytes);
    run_on_worker(out);
    const char *why = NULL;
    double s = -1;
    assert_int_equal(gs_disk_move_result(out, &why, &s), 0);
    assert_string_equal(why, "");
    assert_true(s >= 0);
    assert_int_equal(gs_disk_move_done_bytes(out), bytes);
    assert_int_equal(gs_disk_move_segments_done(out), 3);
    assert_int_equal(src.mapped, 0);
    gs_disk_file_t *image = gs_disk_move_take_image(out);
    assert_non_null(image);
    assert_null(gs_disk_move_take_image(out));
    gs_disk_move_destroy(&out);
    assert_int_equal(files_in(dir), 1); /* the sealed image stays */

    gs_disk_move_t *in =
        gs_disk_move_in(image, handles, NCHUNK, CHUNK,
                        &(gs_disk_chunks_t){.map = fake_map, .unmap = fake_unmap, .arg = &dst});
    assert_non_null(in);
    assert_int_equal(gs_disk_move_total_bytes(in), bytes);
    run_on_worker(in);
    assert_int_equal(gs_disk_move_result(in, &why, NULL), 0);
    assert_int_equal(gs_disk_move_done_bytes(in), bytes);
    assert_int_equal(gs_disk_move_segments_done(in), 3);
    for (int i = 0; i < NCHUNK; i++)
        assert_memory_equal(dst.mem[i], src.mem[i], i < 2 ? CHUNK : CHUNK / 2);
    gs_disk_move_destroy(&in); /* closes the image, keeps the file */
    assert_int_equal(files_in(dir), 1);
    fake_free(&src);
    fake_free(&dst);
    remove_dir(dir);
}

static void a_chunk_that_does_not_map_fails_the_move_and_leaves_no_file(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    fake_chunks_t src;
    fake_init(&src, 7);
    src.fail_on = 1;
    gs_disk_meta_t m0 = meta();
    gs_disk_move_t *out = gs_disk_move_out(
        dir, &m0, handles, NCHUNK, CHUNK, 3 * CHUNK,
        &(gs_disk_chunks_t){.map = fake_map, .unmap = fake_unmap, .arg = &src}, NULL);
    gs_disk_move_run(out);
    const char *why = NULL;
    assert_int_equal(gs_disk_move_result(out, &why, NULL), -1);
    assert_non_null(strstr(why, "mapping chunk 1 of hana@1001 for the disk: cuMemMap"));
    assert_int_equal(gs_disk_move_segments_done(out), 1);
    assert_null(gs_disk_move_take_image(out));
    assert_int_equal(files_in(dir), 0);
    assert_int_equal(src.mapped, 0);
    gs_disk_move_destroy(&out);
    fake_free(&src);
    remove_dir(dir);
}

static int writes_left;
static ssize_t filling_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (writes_left-- <= 0) {
        errno = ENOSPC;
        return -1;
    }
    return pwrite(fd, buf, n, off);
}

static void a_full_disk_fails_the_move_and_leaves_no_file(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    fake_chunks_t src;
    fake_init(&src, 9);
    writes_left = 2;
    gs_disk_meta_t m0 = meta();
    gs_disk_move_t *out =
        gs_disk_move_out(dir, &m0, handles, NCHUNK, CHUNK, 3 * CHUNK,
                         &(gs_disk_chunks_t){.map = fake_map, .unmap = fake_unmap, .arg = &src},
                         &(gs_disk_io_t){.pwrite = filling_pwrite});
    gs_disk_move_run(out);
    const char *why = NULL;
    assert_int_equal(gs_disk_move_result(out, &why, NULL), -1);
    assert_non_null(strstr(why, "disk full writing"));
    assert_int_equal(files_in(dir), 0);
    gs_disk_move_destroy(&out);
    fake_free(&src);
    remove_dir(dir);
}

static void an_image_larger_than_the_chunks_is_refused(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    fake_chunks_t src, dst;
    fake_init(&src, 3);
    fake_init(&dst, 0);
    gs_disk_meta_t m0 = meta();
    gs_disk_move_t *out = gs_disk_move_out(
        dir, &m0, handles, NCHUNK, CHUNK, 3 * CHUNK,
        &(gs_disk_chunks_t){.map = fake_map, .unmap = fake_unmap, .arg = &src}, NULL);
    gs_disk_move_run(out);
    gs_disk_file_t *image = gs_disk_move_take_image(out);
    gs_disk_move_destroy(&out);
    gs_disk_move_t *in =
        gs_disk_move_in(image, handles, 2, CHUNK,
                        &(gs_disk_chunks_t){.map = fake_map, .unmap = fake_unmap, .arg = &dst});
    gs_disk_move_run(in);
    const char *why = NULL;
    assert_int_equal(gs_disk_move_result(in, &why, NULL), -1);
    assert_non_null(strstr(why, "hana@1001's image has 3 segments"));
    assert_int_equal(dst.mapped, 0);
    gs_disk_move_destroy(&in);
    fake_free(&src);
    fake_free(&dst);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_go_to_disk_and_come_back_bit_exact),
        cmocka_unit_test(a_chunk_that_does_not_map_fails_the_move_and_leaves_no_file),
        cmocka_unit_test(a_full_disk_fails_the_move_and_leaves_no_file),
        cmocka_unit_test(an_image_larger_than_the_chunks_is_refused),
    };
    return cmocka_run_group_tests_name("disk_mover", tests, NULL, NULL);
}
