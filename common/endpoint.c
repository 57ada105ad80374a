/*
 * endpoint.c - the one place that decides the broker's address (see .h).
 */
#include "endpoint.h"

#include "socket_trust.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IPC_PREFIX "ipc://"

const char *gs_endpoint_ipc_path(const char *ep)
{
    if (ep && strncmp(ep, IPC_PREFIX, strlen(IPC_PREFIX)) == 0)
        return ep + strlen(IPC_PREFIX);
    return NULL;
}

int gs_endpoint_normalise(const char *in, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!in || !*in) {
        snprintf(err, errlen, "empty broker endpoint");
        return -1;
    }
    int n;
    if (strncmp(in, IPC_PREFIX, strlen(IPC_PREFIX)) == 0)
        n = snprintf(out, outlen, "%s", in);
    else if (strncmp(in, "tcp://", 6) == 0) {
        snprintf(err, errlen,
                 "broker endpoint \"%s\": tcp:// is not supported: the broker identifies "
                 "clients by their unix socket credentials, which TCP does not carry; use an "
                 "ipc:// path (see doc/security.md)",
                 in);
        return -1;
    } else if (strstr(in, "://")) {
        snprintf(err, errlen, "broker endpoint \"%s\": only ipc:// is supported", in);
        return -1;
    } else
        n = snprintf(out, outlen, IPC_PREFIX "%s", in);
    /* Linux limits a unix socket path to 107 bytes; zmq fails obscurely. */
    const char *path = gs_endpoint_ipc_path(out);
    if (n < 0 || (size_t)n >= outlen || (path && strlen(path) > 107)) {
        snprintf(err, errlen,
                 "broker endpoint \"%s\" is too long (unix socket paths hold 107 bytes)", in);
        return -1;
    }
    if (path && !*path) {
        snprintf(err, errlen, "broker endpoint \"%s\" has an empty path", in);
        return -1;
    }
    return 0;
}

static int user_socket(char *out, size_t outlen)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (xdg && *xdg)
        n = snprintf(out, outlen, IPC_PREFIX "%s/gpushare/broker.sock", xdg);
    else
        n = snprintf(out, outlen, IPC_PREFIX "/tmp/gpushare-%u/broker.sock", (unsigned)getuid());
    return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

int gs_endpoint_for_broker(int system, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *env = getenv("GPUSHARE_BROKER");
    if (env && *env)
        return gs_endpoint_normalise(env, out, outlen, err, errlen);
    if (system)
        return gs_endpoint_normalise(GS_SYSTEM_SOCKET, out, outlen, err, errlen);
    if (user_socket(out, outlen) < 0) {
        snprintf(err, errlen, "per-user broker socket path is too long");
        return -1;
    }
    return 0;
}

int gs_endpoint_for_client(char *out, size_t outlen, char *note, size_t notelen, char *err,
                           size_t errlen)
{
    if (notelen)
        note[0] = '\0';
    const char *env = getenv("GPUSHARE_BROKER");
    if (env && *env)
        return gs_endpoint_normalise(env, out, outlen, err, errlen);
    struct stat st;
    if (user_socket(out, outlen) == 0 && lstat(gs_endpoint_ipc_path(out), &st) == 0) {
        /* Someone else may have made /tmp/gpushare-<uid> first: a socket
         * there is not the user's broker. */
        char why[400];
        if (gs_trust_path(gs_endpoint_ipc_path(out), 1, why, sizeof why) == 0)
            return 0;
        snprintf(note, notelen, "ignoring %s: %s", gs_endpoint_ipc_path(out), why);
    }
    return gs_endpoint_normalise(GS_SYSTEM_SOCKET, out, outlen, err, errlen);
}

int gs_endpoint_is_user_socket(const char *path)
{
    char ep[512];
    const char *user = user_socket(ep, sizeof ep) == 0 ? gs_endpoint_ipc_path(ep) : NULL;
    return path && user && strcmp(path, user) == 0;
}

int gs_endpoint_pool_path(const char *ep, char *out, size_t outlen)
{
    const char *path = gs_endpoint_ipc_path(ep);
    if (!path)
        return -1;
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
    /* sockaddr_un's sun_path holds 108 bytes with its terminator. */
    int n = snprintf(out, outlen, "%.*spool.sock", (int)dir, path);
    return n > 0 && (size_t)n < outlen && n < 108 ? 0 : -1;
}
