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
 * the broker's loop, so a client that connects and says nothing costs one
 * descriptor until it is dropped (after GS_POOL_SOCKET_TIMEOUT_MS).
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
 *                          {"error": "..."} and no descriptors.
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

#define GS_POOL_SOCKET_TIMEOUT_MS 2000
#define GS_POOL_SOCKET_MAX_CONN   32

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
 * `mode` (0600 for a user's broker, 0660 for the service's group).  NULL
 * with err set on failure. */
gs_pool_socket_t *gs_pool_socket_new(const char *path, mode_t mode, char *err, size_t errlen);
/* Closes every connection and removes the socket file. */
void gs_pool_socket_destroy(gs_pool_socket_t **self_p);

/* The items to poll (the listener and each open connection); how many. */
int gs_pool_socket_poll_items(gs_pool_socket_t *self, zmq_pollitem_t *items, int max);
/* After zmq_poll: accepts, reads requests, answers them through serve
 * (again for those waiting for a growing lease), and drops connections
 * past their time. */
void gs_pool_socket_handle(gs_pool_socket_t *self, const zmq_pollitem_t *items, int n,
                           int64_t now_ms, gs_pool_serve_fn serve, void *arg);

#endif
