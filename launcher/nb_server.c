/*
 * nb_server.c - see nb_server.h.
 */
#include "nb_server.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int copy(char *out, size_t outlen, const char *s)
{
    size_t n = strlen(s);
    if (n >= outlen)
        return -1;
    memcpy(out, s, n + 1);
    return 0;
}

int gs_nb_server_parse(const char *text, size_t len, gs_nb_server_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j || !json_is_object(j)) {
        snprintf(err, errlen, "not a JSON object");
        json_decref(j);
        return -1;
    }
    const char *host = json_string_value(json_object_get(j, "hostname"));
    const char *sock = json_string_value(json_object_get(j, "sock"));
    const char *base = json_string_value(json_object_get(j, "base_url"));
    const char *token = json_string_value(json_object_get(j, "token"));
    json_int_t port = json_integer_value(json_object_get(j, "port"));
    out->secure = json_is_true(json_object_get(j, "secure"));
    int rc = -1;
    if (!host || !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "*"))
        host = "127.0.0.1"; /* listening everywhere: loopback is one of them */
    else if (!strcmp(host, "::") || !strcmp(host, "[::]"))
        host = "::1";
    if (sock && *sock) {
        if (copy(out->sock, sizeof out->sock, sock) != 0) {
            snprintf(err, errlen, "\"sock\" is too long");
            goto done;
        }
    } else if (port < 1 || port > 65535) {
        snprintf(err, errlen, "no \"port\" (or \"sock\")");
        goto done;
    }
    out->port = (int)port;
    if (!base || !*base)
        base = "/";
    size_t bl = strlen(base);
    if (base[0] != '/' || bl + 2 > sizeof out->base_url || strpbrk(base, " \r\n\t")) {
        snprintf(err, errlen, "\"base_url\" is not a path");
        goto done;
    }
    snprintf(out->base_url, sizeof out->base_url, "%s%s", base, base[bl - 1] == '/' ? "" : "/");
    if (copy(out->host, sizeof out->host, host) != 0 || strpbrk(host, " \r\n\t/")) {
        snprintf(err, errlen, "\"hostname\" is not a host name");
        goto done;
    }
    if (copy(out->token, sizeof out->token, token ? token : "") != 0 ||
        strpbrk(out->token, "\r\n")) {
        snprintf(err, errlen, "\"token\" is not a token");
        goto done;
    }
    rc = 0;
done:
    json_decref(j);
    return rc;
}

int gs_nb_sessions_request(const gs_nb_server_t *s, char *out, size_t outlen)
{
    char host[300];
    if (s->sock[0])
        snprintf(host, sizeof host, "localhost");
    else if (strchr(s->host, ':'))
        snprintf(host, sizeof host, "[%s]:%d", s->host, s->port);
    else
        snprintf(host, sizeof host, "%s:%d", s->host, s->port);
    /* HTTP/1.0: the answer ends with the connection, never chunked. */
    int n = snprintf(out, outlen,
                     "GET %sapi/sessions HTTP/1.0\r\nHost: %s\r\nAccept: application/json\r\n"
                     "%s%s%s\r\n",
                     s->base_url, host, s->token[0] ? "Authorization: token " : "", s->token,
                     s->token[0] ? "\r\n" : "");
    return n < 0 || (size_t)n >= outlen ? -1 : n;
}

int gs_nb_sessions_find(const char *resp, size_t len, const char *kernel_id, char *out,
                        size_t outlen, char *err, size_t errlen)
{
    /* "HTTP/1.x NNN": resp is not NUL-terminated, so no sscanf. */
    int status = 0;
    for (size_t i = 9; i < 12 && i < len && resp[i] >= '0' && resp[i] <= '9'; i++)
        status = status * 10 + (resp[i] - '0');
    if (len < 12 || strncmp(resp, "HTTP/1.", 7) != 0 || status < 100) {
        snprintf(err, errlen, "not an HTTP answer");
        return -1;
    }
    if (status != 200) {
        snprintf(err, errlen, "the server answered %d%s", status,
                 status == 403 ? " (it takes a password, or another token)" : "");
        return -1;
    }
    const char *body = NULL;
    for (size_t i = 0; i + 4 <= len; i++)
        if (!memcmp(resp + i, "\r\n\r\n", 4)) {
            body = resp + i + 4;
            break;
        }
    if (!body) {
        snprintf(err, errlen, "the answer has no body");
        return -1;
    }
    json_error_t je;
    json_t *list = json_loadb(body, len - (size_t)(body - resp), 0, &je);
    if (!json_is_array(list)) {
        snprintf(err, errlen, "the answer is not a JSON list");
        json_decref(list);
        return -1;
    }
    int rc = 0;
    size_t i;
    json_t *s;
    json_array_foreach(list, i, s)
    {
        const char *kid = json_string_value(json_object_get(json_object_get(s, "kernel"), "id"));
        const char *path = json_string_value(json_object_get(s, "path"));
        if (!path) /* older servers: notebook.path */
            path = json_string_value(json_object_get(json_object_get(s, "notebook"), "path"));
        if (!kid || strcmp(kid, kernel_id) != 0 || !path || !*path)
            continue;
        rc = 1;
        for (const char *p = path; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                rc = -2;
        if (rc == 1 && copy(out, outlen, path) != 0)
            rc = -2;
        break;
    }
    json_decref(list);
    return rc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n > t && !strcmp(s + n - t, tail);
}

int gs_nb_from_cmdline(const char *cmdline, size_t len, char *out, size_t outlen)
{
    const char *first = NULL;
    int count = 0, papermill = 0, arg = 0, skip = 0;
    for (size_t i = 0; i < len; arg++) {
        const char *a = cmdline + i;
        size_t n = strnlen(a, len - i);
        if (n == len - i) /* not NUL-terminated: the last, cut short */
            break;
        const char *base = strrchr(a, '/');
        base = base ? base + 1 : a;
        if (arg < 3 && !strcmp(base, "papermill"))
            papermill = 1;
        if (arg > 0 && !skip && ends_with(a, ".ipynb") && a[0] != '-') {
            if (!first)
                first = a;
            count++;
        }
        skip = !strcmp(a, "--output"); /* nbconvert's output, not its input */
        i += n + 1;
    }
    if (!first || (count != 1 && !papermill))
        return 0;
    for (const char *p = first; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return 0;
    return copy(out, outlen, first) == 0;
}
