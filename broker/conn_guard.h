/*
 * conn_guard.h - the broker's connections, counted per uid, so that no
 * local user can take its file descriptors.
 *
 * libzmq accepts connections on its own I/O thread and aborts the whole
 * process when accept(2) fails with EMFILE (ipc_listener.cpp asserts), and
 * a ROUTER has no way to refuse or close one peer.  So the guard watches
 * the ROUTER's monitor events: each accepted connection's descriptor is
 * looked up (SO_PEERCRED: whose it is) and counted for its uid.  The
 * connections the descriptor limit leaves (the limit less a reserve for the
 * broker's own files and for events not read yet) are shared out by
 * conn_caps.h: an eighth kept for root and the broker's own account, one
 * user's uid at most a quarter of the rest (and every uid at most
 * max_connections_per_uid).
 * A connection over its uid's cap, or of a user when the users' room is
 * full, is refused: a hello on it is answered with the error
 * too_many_connections, and after a grace period (long enough for that
 * answer) the guard shuts the socket down under libzmq, which then closes
 * it.  With no room at all, or more than a few refusals of the uid waiting
 * already, a new connection is cut at once.  The monitor's queue is short: libzmq's I/O thread
 * waits when it is full, so it never gets far ahead of the count.
 *
 * The same events tell the liveness checks that a client went
 * (gs_conn_guard_on_monitor's return value).
 */
#ifndef GS_CONN_GUARD_H
#define GS_CONN_GUARD_H

#include <czmq.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GS_CONN_DEFAULT_PER_UID 256
/* Descriptors kept out of the connections' budget: the monitor's queue
 * (about 1000 events libzmq may have accepted ahead of us) and the
 * broker's own files, sockets and threads. */
#define GS_CONN_FD_RESERVE 1536

typedef struct gs_conn_guard gs_conn_guard_t;

/* Watch router, which listens on the ipc socket path (and must outlive the
 * guard), in a process whose descriptor limit is fd_limit.  NULL with err
 * set when the monitor cannot be set up. */
gs_conn_guard_t *gs_conn_guard_new(zsock_t *router, const char *path, long fd_limit, char *err,
                                   size_t errlen);
void gs_conn_guard_destroy(gs_conn_guard_t **self_p);

/* The most connections one uid may hold (at least 1; less where a quarter
 * of the users' room is less: conn_caps.h). */
void gs_conn_guard_set_per_uid(gs_conn_guard_t *self, int max);

/* The monitor's socket, for zmq_poll; when readable (and before a hello
 * is answered), call gs_conn_guard_on_monitor.  Returns how many
 * connections ended. */
void *gs_conn_guard_socket(gs_conn_guard_t *self);
int gs_conn_guard_on_monitor(gs_conn_guard_t *self, int64_t now);

/* Cut the refused connections whose grace is over; when the next is due
 * (INT64_MAX: none). */
void gs_conn_guard_tick(gs_conn_guard_t *self, int64_t now);
int64_t gs_conn_guard_next_deadline(const gs_conn_guard_t *self);

/* 1 when uid holds connections over its limit, which are being refused:
 * text says so, for the error reply to their hello. */
int gs_conn_guard_refusing(const gs_conn_guard_t *self, uid_t uid, char *text, size_t len);

/* {"open": N, "users_open": N, "max_per_uid": N, "max_total": N,
 * "reserved_for_root": N, "refused": N} for the status (max_per_uid: a
 * user's cap; root's is max_connections_per_uid).  Returns a new
 * reference; the caller decrefs it (or hands it on with a _new setter). */
json_t *gs_conn_guard_status(const gs_conn_guard_t *self);

#endif
