/*
 * endpoint.h - where the broker listens and where clients find it.
 *
 * One rule for every program, so the broker, hook, launcher and CLI can never
 * disagree: GPUSHARE_BROKER wins; otherwise a per-user broker in
 * $XDG_RUNTIME_DIR/gpushare/ (or /tmp/gpushare-<uid>/ without it), when its
 * directory is the user's own; otherwise the system service's
 * /run/gpushare/broker.sock.  Only ipc:// endpoints exist.
 */
#ifndef GS_ENDPOINT_H
#define GS_ENDPOINT_H

#include <stddef.h>

#define GS_SYSTEM_SOCKET "/run/gpushare/broker.sock"

/* Normalise a user-supplied endpoint: "ipc://PATH" passes, a bare path
 * becomes "ipc://PATH".  Returns 0, or -1 when it is empty, too long or of
 * another transport (message in err).  tcp:// is refused on purpose: the
 * broker knows who a client is only from the credentials of a unix socket
 * (SO_PEERCRED), which TCP does not carry (doc/security.md). */
int gs_endpoint_normalise(const char *in, char *out, size_t outlen, char *err, size_t errlen);

/* The endpoint a broker binds when none is given: the system socket when
 * system is set, else the per-user socket. */
int gs_endpoint_for_broker(int system, char *out, size_t outlen, char *err, size_t errlen);

/* The endpoint a client connects to: GPUSHARE_BROKER, else the per-user
 * socket if it exists in a directory that is the user's own (mode 0700),
 * else the system socket.  A per-user socket passed over for its directory
 * is named in note, with why (note is "" otherwise), so that the client
 * can say why it did not use it. */
int gs_endpoint_for_client(char *out, size_t outlen, char *note, size_t notelen, char *err,
                           size_t errlen);

/* 1 when path is this user's default per-user socket, whose directory must
 * be private (mode 0700, the user's own; see socket_trust.h). */
int gs_endpoint_is_user_socket(const char *path);

/* For an ipc endpoint, the filesystem path (pointer into ep), else NULL. */
const char *gs_endpoint_ipc_path(const char *ep);

/* The broker's pool socket (host memory for the swap tier) beside an ipc
 * endpoint: "ipc:///run/gpushare/broker.sock" gives
 * "/run/gpushare/pool.sock".  0, or -1 when ep is not ipc:// or too long. */
int gs_endpoint_pool_path(const char *ep, char *out, size_t outlen);

#endif
