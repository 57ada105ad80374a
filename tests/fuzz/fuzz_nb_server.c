/*
 * fuzz_nb_server.c - libFuzzer target: what the cell watcher reads to find
 * a kernel's notebook (launcher/nb_server.c): a notebook server's runtime
 * file (gs_nb_server_parse) and the request made from it
 * (gs_nb_sessions_request), the server's answer to GET api/sessions
 * (gs_nb_sessions_find), a parent's command line (gs_nb_from_cmdline).
 *
 * The first byte picks the decoder, the rest is its input, in an
 * allocation of exactly its size.  Properties: an accepted runtime file
 * has a port in 1..65535 or a socket, a base_url that starts and ends with
 * '/', and no CR or LF in what goes into the request's headers; a path
 * found has no control character and fits a buffer of exactly its size (one
 * byte short is refused); a notebook from a command line is one of its
 * arguments.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nb_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_nb_server: %s\n", what);
    abort();
}

static void server_file(const char *text, size_t len)
{
    gs_nb_server_t s;
    char err[200], req[1024];
    if (gs_nb_server_parse(text, len, &s, err, sizeof err) != 0)
        return;
    if (!s.sock[0] && (s.port < 1 || s.port > 65535))
        fail("no port and no socket");
    size_t bl = strlen(s.base_url);
    if (bl == 0 || s.base_url[0] != '/' || s.base_url[bl - 1] != '/')
        fail("base_url is not /.../");
    if (strpbrk(s.base_url, "\r\n") || strpbrk(s.host, "\r\n") || strpbrk(s.token, "\r\n"))
        fail("CR or LF would go into the request");
    int n = gs_nb_sessions_request(&s, req, sizeof req);
    if (n > 0) {
        char *end = strstr(req, "\r\n\r\n");
        if (!end || end + 4 != req + n)
            fail("the request's headers do not end once, at its end");
    }
}

static void sessions(const char *resp, size_t len)
{
    char big[4096], err[200];
    const char *kid = "k1";
    if (gs_nb_sessions_find(resp, len, kid, big, sizeof big, err, sizeof err) != 1)
        return;
    size_t n = strlen(big);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)big[i] < 0x20 || big[i] == 0x7f)
            fail("a path with a control character");
    char *exact = malloc(n + 1), *short_by_one = malloc(n);
    if (!exact || !short_by_one)
        abort();
    if (gs_nb_sessions_find(resp, len, kid, exact, n + 1, err, sizeof err) != 1 ||
        strcmp(exact, big) != 0)
        fail("the path does not fit its exact size");
    if (gs_nb_sessions_find(resp, len, kid, short_by_one, n, err, sizeof err) == 1)
        fail("a short buffer was not refused");
    free(exact);
    free(short_by_one);
}

static void cmdline(const char *args, size_t len)
{
    char out[4096];
    if (!gs_nb_from_cmdline(args, len, out, sizeof out))
        return;
    size_t n = strlen(out);
    for (size_t i = 0; i + n < len; i++)
        if ((i == 0 || args[i - 1] == '\0') && !memcmp(args + i, out, n + 1))
            return;
    fail("the notebook is not one of the arguments");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = malloc(size - 1 ? size - 1 : 1);
    if (!text)
        abort();
    memcpy(text, data + 1, size - 1);
    switch (data[0] % 3) {
    case 0:
        server_file(text, size - 1);
        break;
    case 1:
        sessions(text, size - 1);
        break;
    default:
        cmdline(text, size - 1);
        break;
    }
    free(text);
    return 0;
}
