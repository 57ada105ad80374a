/*
 * connection_file.h - what the cell watcher needs from a Jupyter kernel's
 * connection file, and where that file is named on the kernel's command line.
 *
 * The watcher subscribes to the kernel's IOPub and checks every message's
 * signature, so it needs the transport, ip, iopub_port, key and
 * signature_scheme.  Every problem comes back as one line naming the file
 * and the field, because the only person who will ever read it is looking
 * at a kernel log.  The key is secret: it is never part of an error text.
 */
#ifndef GS_CONNECTION_FILE_H
#define GS_CONNECTION_FILE_H

#include <stddef.h>

#define GS_CONN_KEY_MAX 1024

typedef struct {
    char transport[8];                  /* "tcp" or "ipc" */
    char ip[256];                       /* host (tcp) or path prefix (ipc) */
    int iopub_port;                     /* > 0 */
    char scheme[16];                    /* "hmac-sha256" or "hmac-sha512" */
    unsigned char key[GS_CONN_KEY_MAX]; /* the signing key's bytes; not NUL-terminated */
    size_t key_len;                     /* 0: messages are not signed */
} gs_conn_info_t;

/* Read and check path.  Returns 0, or -1 with err holding a line like
 * `connection file "/x/kernel-1.json": field "iopub_port" is missing`. */
int gs_conn_read(const char *path, gs_conn_info_t *info, char *err, size_t errlen);

/* The ZeroMQ endpoint of the kernel's IOPub socket, as a client connects
 * to it ("tcp://127.0.0.1:5555", "ipc:///path-5555"); a wildcard bind
 * address becomes the loopback address.  Returns 0, or -1 when out is small. */
int gs_conn_iopub_endpoint(const gs_conn_info_t *info, char *out, size_t outlen);

/* Wipe the key. */
void gs_conn_clear(gs_conn_info_t *info);

/* The connection file named in a kernel command: "-f FILE", "-f=FILE",
 * "--f=FILE", "--f FILE", "--connection-file[=]FILE" or
 * "--IPKernelApp.connection_file[=]FILE" (the last occurrence wins, as with
 * traitlets).  argv is NULL-terminated.  Returns the file (a pointer into
 * argv) or NULL. */
const char *gs_conn_file_from_argv(char *const argv[]);

/* The Jupyter kernel id a connection file's name carries: "kernel-<id>.json"
 * gives <id>; any other "<name>.json" (jupyter_client's temporary files)
 * gives <name>.  Writes at most outlen-1 bytes; returns 0, or -1 when the
 * name yields no usable id (empty, over 128 bytes, or holding characters
 * outside [A-Za-z0-9._-]). */
int gs_conn_kernel_id_from_path(const char *path, char *out, size_t outlen);

/* 1 when id is usable as a kernel and session id (1..128 bytes of
 * [A-Za-z0-9._-]). */
int gs_conn_valid_kernel_id(const char *id);

#endif
