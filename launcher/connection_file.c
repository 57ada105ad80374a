/*
 * connection_file.c - read the parts of a Jupyter connection file that the
 * cell watcher needs (see connection_file.h).  jansson does the parsing;
 * this file decides what is required and says precisely what is wrong.
 */
#include "connection_file.h"

#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* Refuse files larger than this before parsing: a real one is ~300 bytes. */
#define CONN_FILE_MAX (64 * 1024)

static int field_error(char *err, size_t errlen, const char *path, const char *field,
                       const char *what)
{
    snprintf(err, errlen, "connection file \"%s\": field \"%s\" %s", path, field, what);
    return -1;
}

/* The fields the watcher reads, in the order FIELDS unpacks them: where in
 * FIELDS an unpack error stands (json_error_t.position) names the field. */
#define FIELDS "{s?s, s:s, s:s%, s?s, s:I}"
static const char *const field_names[] = {"transport", "ip", "key", "signature_scheme",
                                          "iopub_port"};

static const char *failed_field(const json_error_t *e)
{
    int n = 0;
    for (int i = 0; i < e->position && FIELDS[i]; i++)
        n += FIELDS[i] == ',';
    return field_names[n];
}

/* What is wrong with the field, as a person reads it. */
static const char *field_problem(const json_error_t *e, const char *field)
{
    switch (json_error_code(e)) {
    case json_error_item_not_found:
        return "is missing";
    case json_error_wrong_type:
        return strcmp(field, "iopub_port") == 0 ? "is not an integer" : "is not a string";
    default:
        return e->text; /* out of memory */
    }
}

int gs_conn_read(const char *path, gs_conn_info_t *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read connection file \"%s\": %s", path, strerror(errno));
        return -1;
    }
    static char buf[CONN_FILE_MAX + 1];
    size_t n = fread(buf, 1, sizeof buf, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        snprintf(err, errlen, "cannot read connection file \"%s\"", path);
        return -1;
    }
    if (n > CONN_FILE_MAX) {
        snprintf(err, errlen, "connection file \"%s\" is larger than %d bytes", path,
                 CONN_FILE_MAX);
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &jerr);
    sodium_memzero(buf, n); /* it held the key */
    if (!root) {
        snprintf(err, errlen, "connection file \"%s\" is not valid JSON: %s (line %d, column %d)",
                 path, jerr.text, jerr.line, jerr.column);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "connection file \"%s\" does not hold a JSON object", path);
        goto out;
    }
    const char *transport = "tcp", *ip, *key, *scheme = "hmac-sha256";
    size_t klen;
    json_int_t p;
    json_error_t uerr;
    if (json_unpack_ex(root, &uerr, 0, FIELDS, "transport", &transport, "ip", &ip, "key", &key,
                       &klen, "signature_scheme", &scheme, "iopub_port", &p) != 0) {
        const char *field = failed_field(&uerr);
        field_error(err, errlen, path, field, field_problem(&uerr, field));
        goto out;
    }
    if (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0) {
        field_error(err, errlen, path, "transport", "is neither \"tcp\" nor \"ipc\"");
        goto out;
    }
    snprintf(info->transport, sizeof info->transport, "%s", transport);
    if (!*ip || strlen(ip) >= sizeof info->ip) {
        field_error(err, errlen, path, "ip", !*ip ? "is empty" : "is too long");
        goto out;
    }
    snprintf(info->ip, sizeof info->ip, "%s", ip);
    if (p < 1 || p > 65535) {
        field_error(err, errlen, path, "iopub_port", "is not a port number (1..65535)");
        goto out;
    }
    info->iopub_port = (int)p;
    if (strcmp(scheme, "hmac-sha256") != 0 && strcmp(scheme, "hmac-sha512") != 0) {
        field_error(err, errlen, path, "signature_scheme",
                    "is not supported (hmac-sha256 and hmac-sha512 are)");
        goto out;
    }
    snprintf(info->scheme, sizeof info->scheme, "%s", scheme);
    /* Jupyter signs with the key string's bytes as they are (not hex-decoded). */
    if (klen > sizeof info->key) {
        field_error(err, errlen, path, "key", "is longer than 1024 bytes");
        goto out;
    }
    memcpy(info->key, key, klen);
    info->key_len = klen;
    rc = 0;
out:
    /* jansson keeps the key in its string; overwrite it before freeing. */
    {
        json_t *k = json_object_get(root, "key");
        if (json_is_string(k))
            sodium_memzero((char *)json_string_value(k), json_string_length(k));
    }
    json_decref(root);
    if (rc != 0)
        gs_conn_clear(info);
    return rc;
}

int gs_conn_iopub_endpoint(const gs_conn_info_t *info, char *out, size_t outlen)
{
    int n;
    if (strcmp(info->transport, "ipc") == 0) {
        /* jupyter_client's convention: the socket file is "<ip>-<port>". */
        n = snprintf(out, outlen, "ipc://%s-%d", info->ip, info->iopub_port);
    } else {
        const char *ip = info->ip;
        if (!strcmp(ip, "0.0.0.0") || !strcmp(ip, "*") || !strcmp(ip, ""))
            ip = "127.0.0.1";
        else if (!strcmp(ip, "::"))
            ip = "::1";
        if (strchr(ip, ':'))
            n = snprintf(out, outlen, "tcp://[%s]:%d", ip, info->iopub_port);
        else
            n = snprintf(out, outlen, "tcp://%s:%d", ip, info->iopub_port);
    }
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

void gs_conn_clear(gs_conn_info_t *info)
{
    sodium_memzero(info->key, sizeof info->key);
    info->key_len = 0;
}

const char *gs_conn_file_from_argv(char *const argv[])
{
    static const char *const names[] = {"-f", "--f", "--connection-file",
                                        "--IPKernelApp.connection_file", NULL};
    const char *found = NULL;
    for (int i = 0; argv[i]; i++) {
        const char *a = argv[i];
        for (int k = 0; names[k]; k++) {
            size_t len = strlen(names[k]);
            if (strncmp(a, names[k], len) != 0)
                continue;
            if (a[len] == '=' && a[len + 1])
                found = a + len + 1;
            else if (a[len] == '\0' && argv[i + 1])
                found = argv[i + 1];
            else
                continue;
            break;
        }
    }
    return found;
}

int gs_conn_valid_kernel_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 128)
        return 0;
    for (const char *p = id; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
            c != '-' && c != '_' && c != '.')
            return 0;
    }
    return 1;
}

int gs_conn_kernel_id_from_path(const char *path, char *out, size_t outlen)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n >= 5 && strcmp(base + n - 5, ".json") == 0)
        n -= 5;
    if (n > 7 && strncmp(base, "kernel-", 7) == 0) {
        base += 7;
        n -= 7;
    }
    char id[160];
    if (n == 0 || n >= sizeof id || n >= outlen)
        return -1;
    memcpy(id, base, n);
    id[n] = '\0';
    if (!gs_conn_valid_kernel_id(id))
        return -1;
    memcpy(out, id, n + 1);
    return 0;
}
