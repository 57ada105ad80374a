/*
 * fuzz_file.h - for the targets whose decoder reads a file by its path
 * (the configuration file, a Jupyter connection file): the input becomes
 * the contents of one in-memory file (memfd), named /proc/self/fd/N, so
 * that no run touches the disk and nothing is left behind.  And a path in
 * a private directory for code that writes a file (gs_config_write: a
 * temporary file beside it, then rename), removed at exit.
 */
#ifndef GS_FUZZ_FILE_H
#define GS_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a file that holds exactly data[0..size). */
static inline const char *fuzz_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("gpushare-fuzz", MFD_CLOEXEC);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_file");
        abort();
    }
    return path;
}

static char fuzz_dir_[256], fuzz_dir_file_[300];

static inline void fuzz_dir_cleanup(void)
{
    unlink(fuzz_dir_file_);
    rmdir(fuzz_dir_);
}

/* dir/state in a directory of this process's own: under GPUSHARE_FUZZ_TMP
 * (run.sh's scratch, removed even after a crash), else in memory where
 * there is /dev/shm (the writer syncs every time), else under TMPDIR. */
static inline const char *fuzz_dir_file(void)
{
    if (!fuzz_dir_[0]) {
        const char *tmp = getenv("GPUSHARE_FUZZ_TMP");
        if (!tmp || !*tmp)
            tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/gpushare-fuzz.XXXXXX",
                 tmp && *tmp && strlen(tmp) < 200 ? tmp : "/tmp");
        if (!mkdtemp(fuzz_dir_)) {
            perror("mkdtemp");
            abort();
        }
        snprintf(fuzz_dir_file_, sizeof fuzz_dir_file_, "%s/state", fuzz_dir_);
        atexit(fuzz_dir_cleanup);
    }
    return fuzz_dir_file_;
}

#endif
