/*
 * socket_trust.h - may this program trust the broker's unix socket, and the
 * process that listens on it?
 *
 * A client that talks to the wrong broker is at its mercy: a broker that
 * welcomes a hook and never grants blocks the program for good, and it
 * learns every notebook's kernel id and path.  Anyone who may write to a
 * directory on the socket's path can put their own socket there (or, for a
 * missing per-user directory in /tmp, create the directory first).  So,
 * before connecting, a client checks (doc/security.md):
 *  - the path: every directory from / down to the socket's belongs to root,
 *    to the user or to the service account (GPUSHARE_BROKER_USER), and no
 *    one else may write to it, unless it is sticky (/tmp) and the entry
 *    below it is trusted too; the per-user directory must be the user's
 *    own, mode 0700;
 *  - connect(2) itself, so that the errors that libzmq would hide behind a
 *    reconnect loop are named: EACCES (not in the socket's group) and
 *    ECONNREFUSED (a stale socket left by a broker that died);
 *  - the listener's credentials (SO_PEERCRED): root, the user, or the
 *    service account;
 * and after connecting, the same credentials on the broker's welcome
 * (gs_trust_peer), which libzmq reads from the connection it really uses.
 * The broker uses gs_trust_path for the directory it binds in.
 *
 * libgscommon (no czmq), so the hook can use it.
 */
#ifndef GS_SOCKET_TRUST_H
#define GS_SOCKET_TRUST_H

#include <stddef.h>
#include <sys/types.h>

#include "peer.h"

/* 1 for root, this process's (real or effective) uid, and the account a
 * system broker runs as when it is not root: GPUSHARE_BROKER_USER (a user
 * name or a number). */
int gs_trust_uid(uid_t uid);

/* Check the directories of a socket path as above; private_dir: the
 * socket's own directory must also belong to this process's user and have
 * mode 0700 (the per-user broker's directory).  A missing socket is fine
 * (a broker checks before it binds); an existing one must belong to a
 * trusted uid.  0, or -1 with a message naming the directory and what is
 * wrong with it. */
int gs_trust_path(const char *path, int private_dir, char *err, size_t errlen);

typedef enum {
    GS_PROBE_OK = 0,    /* a trusted process listens (or is too busy to say) */
    GS_PROBE_ABSENT,    /* no socket file */
    GS_PROBE_STALE,     /* a socket file nobody listens on (ECONNREFUSED) */
    GS_PROBE_DENIED,    /* not allowed to connect (EACCES) */
    GS_PROBE_UNTRUSTED, /* the path or the listener is not to be trusted */
    GS_PROBE_ERROR      /* anything else */
} gs_probe_t;

/* Check path as gs_trust_path does, connect to it once and check who
 * listens.  The message in err names the path and the problem:
 * "permission denied: cannot connect to PATH (not in group G?)",
 * "broker not running (stale socket PATH ...)", ... */
gs_probe_t gs_trust_probe(const char *path, int private_dir, char *err, size_t errlen);

/* The credentials libzmq attached to a message from the broker at
 * endpoint (ipc://, the only transport: they are always there) belong to a
 * trusted uid.  0, or -1 with a message in err. */
int gs_trust_peer(const gs_peer_t *peer, const char *endpoint, char *err, size_t errlen);

#endif
