/*
 * fuzz_file.h - for the targets whose decoder reads a file by its path
 * (the configuration file, a Jupyter connection file): the input becomes
 * the contents of one in-memory file (memfd), named /proc/self/fd/N, so
 * that no run touches the disk and nothing is left behind.
 */
#ifndef GS_FUZZ_FILE_H
#define GS_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a file that holds exactly data[0..size). */
static const char *fuzz_file(const uint8_t *data, size_t size)
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

#endif
