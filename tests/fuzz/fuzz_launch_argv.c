/*
 * fuzz_launch_argv.c - libFuzzer target: the kernel command line that
 * gpushare-launch wraps, and the connection file's name in it
 * (launcher/connection_file.c: gs_conn_file_from_argv,
 * gs_conn_kernel_id_from_path, gs_conn_valid_kernel_id).
 *
 * The input is argv, its arguments separated by NUL bytes.  Each argument
 * is a separate allocation of exactly its length, so that reading past one
 * is caught.  The file found must be one of the arguments (or inside one,
 * after '='), and an id taken from a path must be valid and fit its buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connection_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 64

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_launch_argv: %s\n", what);
    abort();
}

/* The id of path: valid, and written into a buffer of exactly its size
 * (one byte less is refused; ASan sees a write past either). */
static void check_id(const char *path)
{
    char big[512];
    if (gs_conn_kernel_id_from_path(path, big, sizeof big) != 0)
        return;
    size_t len = strlen(big);
    if (!gs_conn_valid_kernel_id(big) || len > 128)
        fail("an invalid kernel id came from a path");
    char *exact = malloc(len + 1), *short_by_one = malloc(len);
    if (!exact || !short_by_one)
        abort();
    if (gs_conn_kernel_id_from_path(path, exact, len + 1) != 0 || strcmp(exact, big) != 0)
        fail("the id does not fit its exact size");
    if (gs_conn_kernel_id_from_path(path, short_by_one, len) == 0)
        fail("a short buffer was not refused");
    free(exact);
    free(short_by_one);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i++) {
        if (i < size && data[i] != '\0')
            continue;
        size_t len = i - start;
        argv[argc] = malloc(len + 1);
        if (!argv[argc])
            abort();
        memcpy(argv[argc], data + start, len);
        argv[argc][len] = '\0';
        argc++;
        start = i + 1;
    }
    argv[argc] = NULL;

    const char *file = gs_conn_file_from_argv(argv);
    if (file) {
        int inside = 0;
        for (int i = 0; i < argc; i++)
            if (file >= argv[i] && file <= argv[i] + strlen(argv[i]))
                inside = 1;
        if (!inside)
            fail("the connection file is not one of the arguments");
        check_id(file);
    }
    for (int i = 0; i < argc; i++)
        check_id(argv[i]);
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return 0;
}
