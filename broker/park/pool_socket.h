/*
 * pool_socket.h - where a notebook process fetches the host memory lent to
 * it for a park: a Unix socket beside the broker's endpoint (ZeroMQ cannot
 * carry file descriptors), answering one request per connection with the
 * lease's chunks as descriptors (SCM_RIGHTS).
 *
 * Who may fetch: the kernel tells the socket's peer (SO_PEERCRED: pid and
 * uid, which a client cannot forge), and the broker hands a lease only to
 * the process it was made for (the serve callback compares them with the
 * registered hook client).  Every connection is non-blocking and polled by
 * the broker's loop.
 *
 * Room for everyone (issue 34): the socket has GS_POOL_SOCKET_MAX_CONN
 * slots, shared out as the broker's own socket is (conn_caps.h): an eighth
 * kept for root and the broker's own account, GS_POOL_SOCKET_PER_UID for
 * one uid.  A hook's connection lives for one request: it sends it at once
 * and is answered at once (or within the wait it asked for, for a growing
 * lease), so one that says nothing for GS_POOL_SOCKET_TIMEOUT_MS is
 * dropped.  A connection that cannot have a slot, or is dropped before its
 * request, is answered {"error": "...", "retry": true} before it is closed,
 * and the hook tries again until its own timeout: a user holding idle
 * connections delays nobody else, and no request meets a closed socket
 * without being told why.
 *
 * Its path is gs_endpoint_pool_path() of the broker's endpoint.
 *
 * Request (one datagram):  {"lease": 7}, or {"lease": 7, "from": 12, "wait_ms": 500}
 *                          for the chunks from position 12 on of a lease that
 *                          grows (the relay of a switch, doc/parking.md): when
 *                          it has none there yet the answer waits for them, at
 *                          most wait_ms (then it has none: ask again).
 * Answer (datagrams):      {"lease": 7, "chunk_bytes": 1073741824, "chunks": 32,
 *                           "first": 0, "count": 32, "want": 32}  with `count`
 *                          descriptors attached, as many datagrams as needed
 *                          (`chunks`: how many this answer brings, `want`: how
 *                          many the lease will have in all); or
 *                          {"error": "..."} and no descriptors ("retry": true
 *                          when the socket had no room for the connection or
 *                          dropped it before its request: asking again may
 *                          succeed).
 * Early return:            {"return": 7, "positions": [0, 1]}: those chunks of
 *                          lease 7 are free again (their data is back on the
 *                          GPU); answered {"ok": true} or {"error": "..."}.
 * The client's side is libhook/swap/swap_fetch.h; both frame datagrams with
 * common/fd_pass.h.
 */
#ifndef GS_POOL_SOCKET_H
#define GS_POOL_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <zmq.h>

#define GS_POOL_SOCKET_TIMEOUT_MS 500 /* from connecting to the request */
#define GS_POOL_SOCKET_MAX_CONN   64
/* A process fetches on one connection at a time per GPU it parks; a user
 * has a few notebooks parked or coming back at once.  (Eight of 64: it
 * takes seven users at their caps to fill the users' 56.) */
#define GS_POOL_SOCKET_PER_UID 8

typedef struct gs_pool_socket gs_pool_socket_t;

#define GS_POOL_RETURN_MAX 256 /* positions in one early return */

typedef struct {
    pid_t pid; /* the peer, from the kernel */
    uid_t uid;
    uint64_t lease;
    int64_t now_us;                    /* the broker's clock */
    int from;                          /* fetch: the first position wanted */
    int nreturn;                       /* > 0: an early return of these positions */
    int positions[GS_POOL_RETURN_MAX]; /* (nothing is fetched then) */
} gs_pool_request_t;

/* Not yet: the lease has nothing from `from` on, but will (it grows). */
#define GS_POOL_LATER (-2)

/* Exports the lease's chunks from req->from on: fills fds (the socket
 * closes them after sending), *chunk_bytes and *want (the lease's
 * positions in all), returns how many (<= max), GS_POOL_LATER, or -1 with
 * err set when the peer may not have the lease or an export failed.  For
 * an early return (req->nreturn > 0): 0, or -1 with err. */
typedef int (*gs_pool_serve_fn)(void *arg, const gs_pool_request_t *req, int *fds, int max,
                                uint64_t *chunk_bytes, int *want, char *err, size_t errlen);

/* Binds and listens at path (an old socket file there is replaced), mode
 * `mode` and, unless it is (gid_t)-1, group `group` (as the broker's own
 * socket: 0600 for a user's broker, 0660 and the socket group or 0666 for
 * the service: gs_socket_mode).  NULL with err set on failure. */
gs_pool_socket_t *gs_pool_socket_new(const char *path, mode_t mode, gid_t group, char *err,
                                     size_t errlen);
/* Closes every connection and removes the socket file. */
void gs_pool_socket_destroy(gs_pool_socket_t **self_p);

/* The items to poll (the listener and each open connection); how many. */
int gs_pool_socket_poll_items(gs_pool_socket_t *self, zmq_pollitem_t *items, int max);
/* After zmq_poll: accepts, reads requests, answers them through serve
 * (again for those waiting for a growing lease), and drops connections
 * past their time. */
void gs_pool_socket_handle(gs_pool_socket_t *self, const zmq_pollitem_t *items, int n,
                           int64_t now_ms, gs_pool_serve_fn serve, void *arg);
/* When gs_pool_socket_handle is next due without an event (a silent
 * connection to drop, a wait to end), in ms; INT64_MAX: never. */
int64_t gs_pool_socket_next_deadline(const gs_pool_socket_t *self);

#endif
