/*
 * unit_fixture.h - what the cmocka unit tests of tests/unit share, so that
 * no test file writes it again: cmocka's includes (in the order cmocka.h
 * needs), the units the virtual clocks and sizes count in, and private
 * temporary directories (in /tmp, or in the build tree for real disk I/O)
 * with files written into them.
 *
 * Header only (static inline): each test program is one file and links
 * nothing of this.  Nothing here allocates: the caller's buffers hold the
 * paths.
 */
#ifndef GS_UNIT_FIXTURE_H
#define GS_UNIT_FIXTURE_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* The virtual clocks count microseconds. */
#define MS  1000LL
#define SEC 1000000LL

/* Sizes in bytes. */
#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* A new private directory (mode 0700) /tmp/gs-NAME-XXXXXX, its path into
 * dir (len bytes); 0, or -1 when it could not be made (a cmocka setup
 * returns that). */
static inline int unit_fixture_tmpdir(char *dir, size_t len, const char *name)
{
    int n = snprintf(dir, len, "/tmp/gs-%s-XXXXXX", name);
    if (n < 0 || (size_t)n >= len)
        return -1;
    return mkdtemp(dir) ? 0 : -1;
}

/* The same in the current directory, the build tree (a real disk, where
 * O_DIRECT works, unlike a tmpfs /tmp): ./gs-NAME-XXXXXX, its absolute
 * path into dir; 0 or -1. */
static inline int unit_fixture_tmpdir_here(char *dir, size_t len, const char *name)
{
    char rel[128];
    int n = snprintf(rel, sizeof rel, "gs-%s-XXXXXX", name);
    if (n < 0 || (size_t)n >= sizeof rel || !mkdtemp(rel) || !getcwd(dir, len))
        return -1;
    size_t used = strlen(dir);
    n = snprintf(dir + used, len - used, "/%s", rel);
    return n > 0 && (size_t)n < len - used ? 0 : -1;
}

/* The number of entries in dir whose name ends with suffix ("" for all). */
static inline int unit_fixture_count(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    size_t t = strlen(suffix);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t k = strlen(e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && k >= t &&
            strcmp(e->d_name + k - t, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* dir and everything below it removed (a directory of unit_fixture_tmpdir:
 * its path holds no quote); 0 or -1. */
static inline int unit_fixture_rmtree(const char *dir)
{
    char cmd[512];
    int n = snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (n < 0 || (size_t)n >= sizeof cmd || strchr(dir, '\''))
        return -1;
    return system(cmd) == 0 ? 0 : -1;
}

/* The file dir/name holding text (made or replaced), its path into path
 * (len bytes); fails the test when it cannot be written. */
static inline void unit_fixture_write_file(char *path, size_t len, const char *dir,
                                           const char *name, const char *text)
{
    int n = snprintf(path, len, "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < len);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

#endif
