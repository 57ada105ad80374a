/*
 * test_disk_file.c - the disk tier's files and directory
 * (broker/park/disk_file.h, disk_dir.h) on this machine's own disk: an
 * image reads back bit-exact with mode 0600 and no temporary file left; a
 * flipped byte is a checksum error naming the session; a full disk or an
 * I/O error (injected through the I/O table) fails with words that say so
 * and leaves nothing behind; the directory must be the broker's own; a
 * scan passes sealed images on and removes half-written and broken ones.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "disk_dir.h"
#include "disk_file.h"
#include "unit_fixture.h"

#define SEG (64u * 1024u)

/* A fresh directory in the build tree (malloc'd path). */
static char *fresh_dir(void)
{
    char dir[4096];
    assert_int_equal(unit_fixture_tmpdir_here(dir, sizeof dir, "disk"), 0);
    return strdup(dir);
}

static void remove_dir(char *d)
{
    assert_int_equal(unit_fixture_rmtree(d), 0);
    free(d);
}

static int count_files(const char *dir, const char *suffix)
{
    return unit_fixture_count(dir, suffix);
}

static void *pattern(uint64_t seed, size_t bytes)
{
    uint64_t *p = NULL;
    assert_int_equal(posix_memalign((void **)&p, GS_DISK_ALIGN, bytes), 0);
    for (size_t i = 0; i < bytes / 8; i++)
        p[i] = (seed << 40) ^ (i * 0x9E3779B97F4A7C15ull);
    return p;
}

static gs_disk_meta_t meta_for(const char *session, uint32_t segments)
{
    gs_disk_meta_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.session, sizeof m.session, "%s", session);
    m.uid = 1001;
    m.pid = 4242;
    m.proc_start = 777;
    m.gpu = 1;
    m.segments = segments;
    m.segment_bytes = SEG;
    m.lease = 9;
    return m;
}

/* Writes an image of three segments (the last one short) and seals it;
 * returns its path (the caller frees it). */
static char *write_image(const char *dir, const char *session)
{
    gs_disk_meta_t m = meta_for(session, 3);
    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_create(dir, &m, NULL, why, sizeof why);
    assert_non_null(f);
    for (uint32_t s = 0; s < 3; s++) {
        void *buf = pattern(s + 1, SEG);
        assert_int_equal(gs_disk_file_write(f, s, buf, s == 2 ? SEG / 4 : SEG, why, sizeof why), 0);
        free(buf);
    }
    assert_int_equal(gs_disk_file_seal(f, why, sizeof why), 0);
    char *path = strdup(gs_disk_file_path(f));
    gs_disk_file_close(&f);
    return path;
}

static void an_image_reads_back_bit_exact_with_mode_0600(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    char *path = write_image(dir, "alice-notebook@1001");
    assert_int_equal(count_files(dir, GS_DISK_TMP_SUFFIX), 0);
    assert_int_equal(count_files(dir, GS_DISK_SUFFIX), 1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, geteuid());

    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_open(path, NULL, why, sizeof why);
    assert_non_null(f);
    assert_true(gs_disk_file_direct(f)); /* the build tree is on a real disk */
    const gs_disk_meta_t *m = gs_disk_file_meta(f);
    assert_string_equal(m->session, "alice-notebook@1001");
    assert_int_equal(m->pid, 4242);
    assert_int_equal(m->proc_start, 777);
    assert_int_equal(m->gpu, 1);
    assert_int_equal(m->segments, 3);
    assert_int_equal(gs_disk_file_size(f), GS_DISK_ALIGN + SEG + SEG + SEG / 4);
    void *buf = pattern(0, SEG);
    for (uint32_t s = 0; s < 3; s++) {
        uint64_t got = 0;
        assert_int_equal(gs_disk_file_read(f, s, buf, SEG, &got, why, sizeof why), 0);
        assert_int_equal(got, s == 2 ? SEG / 4 : SEG);
        void *want = pattern(s + 1, SEG);
        assert_memory_equal(buf, want, got);
        free(want);
    }
    free(buf);
    assert_int_equal(gs_disk_file_remove(&f), 0);
    assert_null(f);
    assert_int_equal(access(path, F_OK), -1);
    free(path);
    remove_dir(dir);
}

/* Removed on a thread of its own (the broker's loop must not wait for the
 * unlink of gigabytes), and waited for at exit. */
static void an_image_removed_later_is_gone_once_waited_for(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    char *path = write_image(dir, "bob-notebook@1002");
    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_open(path, NULL, why, sizeof why);
    assert_non_null(f);
    gs_disk_file_remove_later(&f);
    assert_null(f);
    assert_int_equal(gs_disk_file_removals_wait(10000), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(count_files(dir, GS_DISK_SUFFIX), 0);
    gs_disk_file_remove_later(&f); /* (nothing: a no-op) */
    assert_int_equal(gs_disk_file_removals_wait(0), 0);
    free(path);
    remove_dir(dir);
}

static void a_flipped_byte_is_a_checksum_error_naming_the_session(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    char *path = write_image(dir, "bob-model@1002");
    int fd = open(path, O_RDWR);
    unsigned char b;
    off_t at = GS_DISK_ALIGN + SEG + 12345; /* inside segment 1 */
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);

    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_open(path, NULL, why, sizeof why);
    assert_non_null(f);
    void *buf = pattern(0, SEG);
    uint64_t got = 0;
    assert_int_equal(gs_disk_file_read(f, 0, buf, SEG, &got, why, sizeof why), 0);
    assert_int_equal(gs_disk_file_read(f, 1, buf, SEG, &got, why, sizeof why), -1);
    assert_non_null(strstr(why, "checksum mismatch in segment 1 of bob-model@1002's image"));
    free(buf);
    gs_disk_file_remove(&f);
    free(path);
    remove_dir(dir);
}

static void a_damaged_header_is_refused_naming_the_file(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    char *path = write_image(dir, "carol@1003");
    int fd = open(path, O_RDWR);
    unsigned char b = 0x5a;
    assert_int_equal(pwrite(fd, &b, 1, 100), 1); /* inside the meta */
    close(fd);
    char why[600] = "";
    assert_null(gs_disk_file_open(path, NULL, why, sizeof why));
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, "checksum does not match"));

    /* Not an image at all. */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "hello", 5), 5);
    close(fd);
    assert_null(gs_disk_file_open(path, NULL, why, sizeof why));
    assert_non_null(strstr(why, "header cannot be read"));
    free(path);
    remove_dir(dir);
}

/* Injected faults: the second write finds the disk full; reads fail. */
static int writes_before_full;
static ssize_t full_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (writes_before_full-- <= 0) {
        errno = ENOSPC;
        return -1;
    }
    return pwrite(fd, buf, n, off);
}

/* The header reads; the data does not. */
static ssize_t failing_pread(int fd, void *buf, size_t n, off_t off)
{
    if (off < (off_t)GS_DISK_ALIGN)
        return pread(fd, buf, n, off);
    errno = EIO;
    return -1;
}

static void a_full_disk_fails_the_write_and_leaves_nothing(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    gs_disk_io_t io = {.pwrite = full_pwrite};
    writes_before_full = 1;
    gs_disk_meta_t m = meta_for("dave@1004", 2);
    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_create(dir, &m, &io, why, sizeof why);
    assert_non_null(f);
    void *buf = pattern(1, SEG);
    assert_int_equal(gs_disk_file_write(f, 0, buf, SEG, why, sizeof why), 0);
    assert_int_equal(gs_disk_file_write(f, 1, buf, SEG, why, sizeof why), -1);
    assert_non_null(strstr(why, "disk full writing"));
    /* Sealing an image with a segment missing is refused too. */
    assert_int_equal(gs_disk_file_seal(f, why, sizeof why), -1);
    assert_non_null(strstr(why, "segment 1 was never written"));
    assert_int_equal(gs_disk_file_remove(&f), 0);
    assert_int_equal(count_files(dir, GS_DISK_TMP_SUFFIX), 0);
    assert_int_equal(count_files(dir, GS_DISK_SUFFIX), 0);
    free(buf);
    remove_dir(dir);
}

static void an_io_error_on_the_way_back_is_an_error(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    char *path = write_image(dir, "erin@1005");
    gs_disk_io_t io = {.pread = failing_pread};
    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_open(path, &io, why, sizeof why);
    assert_non_null(f);
    void *buf = pattern(0, SEG);
    uint64_t got = 0;
    assert_int_equal(gs_disk_file_read(f, 0, buf, SEG, &got, why, sizeof why), -1);
    assert_non_null(strstr(why, "reading"));
    assert_non_null(strstr(why, strerror(EIO)));
    free(buf);
    gs_disk_file_close(&f);
    free(path);
    remove_dir(dir);
}

static void unaligned_or_foreign_segments_are_refused(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    gs_disk_meta_t m = meta_for("frank@1006", 1);
    char why[600] = "";
    gs_disk_file_t *f = gs_disk_file_create(dir, &m, NULL, why, sizeof why);
    assert_non_null(f);
    void *buf = pattern(1, 2 * SEG);
    assert_int_equal(gs_disk_file_write(f, 0, buf, 1000, why, sizeof why), -1);
    assert_non_null(strstr(why, "not aligned"));
    assert_int_equal(gs_disk_file_write(f, 0, buf, 2 * SEG, why, sizeof why), -1);
    assert_int_equal(gs_disk_file_write(f, 1, buf, SEG, why, sizeof why), -1);
    assert_non_null(strstr(why, "no segment 1"));
    free(buf);
    gs_disk_file_remove(&f);
    m.segment_bytes = 1000;
    assert_null(gs_disk_file_create(dir, &m, NULL, why, sizeof why));
    assert_non_null(strstr(why, "not a valid layout"));
    remove_dir(dir);
}

static void the_checksum_sees_one_bit(void **state)
{
    (void)state;
    unsigned char *a = pattern(3, SEG);
    uint64_t sum = gs_disk_checksum(a, SEG);
    assert_int_equal(gs_disk_checksum(a, SEG), sum);
    for (size_t at = 0; at < SEG; at += 4099) {
        a[at] ^= 1;
        assert_true(gs_disk_checksum(a, SEG) != sum);
        a[at] ^= 1;
    }
    assert_true(gs_disk_checksum(a, SEG - 1) != sum);
    free(a);
}

static void the_directory_must_be_the_brokers_own(void **state)
{
    (void)state;
    char *base = fresh_dir();
    char dir[4200], why[600];
    assert_int_equal(gs_disk_dir_check("relative/park", why, sizeof why), -1);
    assert_non_null(strstr(why, "not an absolute path"));
    char abs[4096];
    assert_non_null(realpath(base, abs));
    snprintf(dir, sizeof dir, "%s/park", abs);
    assert_int_equal(gs_disk_dir_check(dir, why, sizeof why), 0); /* made */
    struct stat st;
    assert_int_equal(lstat(dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);

    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(gs_disk_dir_check(dir, why, sizeof why), -1);
    assert_non_null(strstr(why, "writable by others (mode 0777)"));
    assert_int_equal(chmod(dir, 0700), 0);

    char link[4200];
    snprintf(link, sizeof link, "%s/link", abs);
    assert_int_equal(symlink(dir, link), 0);
    assert_int_equal(gs_disk_dir_check(link, why, sizeof why), -1);
    assert_non_null(strstr(why, "symbolic link"));

    char file[4200];
    snprintf(file, sizeof file, "%s/file", abs);
    close(open(file, O_CREAT | O_WRONLY, 0600));
    assert_int_equal(gs_disk_dir_check(file, why, sizeof why), -1);
    assert_non_null(strstr(why, "not a directory"));

    /* Somebody else's directory: as root, one given away; else /usr. */
    if (geteuid() == 0) {
        assert_int_equal(chown(dir, 65534, 65534), 0);
        assert_int_equal(gs_disk_dir_check(dir, why, sizeof why), -1);
    } else {
        assert_int_equal(gs_disk_dir_check("/usr", why, sizeof why), -1);
    }
    assert_non_null(strstr(why, "belongs to uid"));

    uint64_t free_bytes = 0;
    assert_int_equal(gs_disk_dir_free(abs, &free_bytes, why, sizeof why), 0);
    assert_true(free_bytes > 0);
    remove_dir(base);
}

typedef struct {
    int found;
    int dropped;
    char session[256];
    char last_drop[700];
} scan_t;

static void on_found(void *arg, gs_disk_file_t *f)
{
    scan_t *s = arg;
    s->found++;
    snprintf(s->session, sizeof s->session, "%s", gs_disk_file_meta(f)->session);
    gs_disk_file_close(&f);
}

static void on_dropped(void *arg, const char *path, const char *why)
{
    scan_t *s = arg;
    s->dropped++;
    snprintf(s->last_drop, sizeof s->last_drop, "%s: %s", path, why);
}

static void a_scan_keeps_sealed_images_and_removes_the_rest(void **state)
{
    (void)state;
    char *dir = fresh_dir();
    char *good = write_image(dir, "gina@1007");
    /* A broker that died mid-write left a temporary file. */
    gs_disk_meta_t m = meta_for("half@1008", 2);
    char why[600] = "";
    gs_disk_file_t *half = gs_disk_file_create(dir, &m, NULL, why, sizeof why);
    assert_non_null(half);
    gs_disk_file_close(&half); /* kept on disk, unsealed */
    /* A broken image, and a file that is none of ours. */
    char path[600];
    snprintf(path, sizeof path, "%s/junk%s", dir, GS_DISK_SUFFIX);
    FILE *j = fopen(path, "w");
    fputs("junk", j);
    fclose(j);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    j = fopen(path, "w");
    fputs("keep me", j);
    fclose(j);

    scan_t s;
    memset(&s, 0, sizeof s);
    assert_int_equal(gs_disk_dir_scan(dir, NULL, on_found, on_dropped, &s, why, sizeof why), 1);
    assert_int_equal(s.found, 1);
    assert_string_equal(s.session, "gina@1007");
    assert_int_equal(s.dropped, 2);
    assert_int_equal(count_files(dir, GS_DISK_TMP_SUFFIX), 0);
    assert_int_equal(count_files(dir, GS_DISK_SUFFIX), 1);
    assert_int_equal(access(good, F_OK), 0);
    assert_int_equal(access(path, F_OK), 0); /* notes.txt left alone */
    free(good);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_image_reads_back_bit_exact_with_mode_0600),
        cmocka_unit_test(an_image_removed_later_is_gone_once_waited_for),
        cmocka_unit_test(a_flipped_byte_is_a_checksum_error_naming_the_session),
        cmocka_unit_test(a_damaged_header_is_refused_naming_the_file),
        cmocka_unit_test(a_full_disk_fails_the_write_and_leaves_nothing),
        cmocka_unit_test(an_io_error_on_the_way_back_is_an_error),
        cmocka_unit_test(unaligned_or_foreign_segments_are_refused),
        cmocka_unit_test(the_checksum_sees_one_bit),
        cmocka_unit_test(the_directory_must_be_the_brokers_own),
        cmocka_unit_test(a_scan_keeps_sealed_images_and_removes_the_rest),
    };
    return cmocka_run_group_tests_name("disk_file", tests, NULL, NULL);
}
