/*
 * fuzz_connection_file.c - libFuzzer target: a Jupyter connection file as
 * gpushare-launch reads it (launcher/connection_file.c).
 *
 * The input is the file's contents; gs_conn_read parses and checks it.
 * Whatever it accepts must hold what its header promises (a transport of
 * "tcp" or "ipc", a non-empty ip, a port in 1..65535, a known scheme, a key
 * of at most GS_CONN_KEY_MAX bytes), must give an IOPub endpoint, and an
 * error must leave the key wiped.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connection_file.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_connection_file: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static gs_conn_info_t info; /* 1.3 KiB: not on the fuzzer's stack */
    char err[512];
    const char *path = fuzz_file(data, size);
    err[0] = '\0';
    if (gs_conn_read(path, &info, err, sizeof err) != 0) {
        if (!err[0] || !memchr(err, '\0', sizeof err))
            fail("refused without a reason");
        if (info.key_len != 0)
            fail("the key survives an error");
        for (size_t i = 0; i < sizeof info.key; i++)
            if (info.key[i])
                fail("the key's bytes survive an error");
        return 0;
    }
    if (strcmp(info.transport, "tcp") != 0 && strcmp(info.transport, "ipc") != 0)
        fail("an unknown transport was accepted");
    if (!info.ip[0] || !memchr(info.ip, '\0', sizeof info.ip))
        fail("an empty or unterminated ip was accepted");
    if (info.iopub_port < 1 || info.iopub_port > 65535)
        fail("a port out of range was accepted");
    if (strcmp(info.scheme, "hmac-sha256") != 0 && strcmp(info.scheme, "hmac-sha512") != 0)
        fail("an unknown signature scheme was accepted");
    if (info.key_len > sizeof info.key)
        fail("the key is longer than its buffer");

    /* The endpoint fits its documented room, and a short buffer is refused
     * rather than overrun (the sizes are exact: ASan sees one byte more). */
    char big[sizeof info.ip + 32];
    if (gs_conn_iopub_endpoint(&info, big, sizeof big) != 0)
        fail("no endpoint for an accepted file");
    size_t need = strlen(big) + 1;
    char *exact = malloc(need), *short_by_one = malloc(need - 1);
    if (!exact || !short_by_one)
        abort();
    if (gs_conn_iopub_endpoint(&info, exact, need) != 0 || strcmp(exact, big) != 0)
        fail("the endpoint does not fit its exact size");
    if (gs_conn_iopub_endpoint(&info, short_by_one, need - 1) == 0)
        fail("a short buffer was not refused");
    free(exact);
    free(short_by_one);
    gs_conn_clear(&info);
    if (info.key_len != 0)
        fail("gs_conn_clear left the key");
    return 0;
}
