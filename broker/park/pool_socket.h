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
 * Request (one datagram):  {"lease": 7}
 * Answer (datagrams):      {"lease": 7, "chunk_bytes": 1073741824, "chunks": 32,
 *                           "first": 0, "count": 32}  with `count` descriptors
 *                          attached, as many datagrams as needed; or
 *                          {"error": "..."} and no descriptors.
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

typedef struct {
    pid_t pid; /* the peer, from the kernel */
    uid_t uid;
    uint64_t lease;
} gs_pool_request_t;

/* Exports the lease's chunks for req: fills fds (the socket closes them
 * after sending) and *chunk_bytes, returns how many (<= max), or -1 with
 * err set when the peer may not have the lease or an export failed. */
typedef int (*gs_pool_serve_fn)(void *arg, const gs_pool_request_t *req, int *fds, int max,
                                uint64_t *chunk_bytes, char *err, size_t errlen);

/* Binds and listens at path (an old socket file there is replaced), mode
 * `mode` (0600 for a user's broker, 0660 for the service's group).  NULL
 * with err set on failure. */
gs_pool_socket_t *gs_pool_socket_new(const char *path, mode_t mode, char *err, size_t errlen);
/* Closes every connection and removes the socket file. */
void gs_pool_socket_destroy(gs_pool_socket_t **self_p);

/* The items to poll (the listener and each open connection); how many. */
int gs_pool_socket_poll_items(gs_pool_socket_t *self, zmq_pollitem_t *items, int max);
/* After zmq_poll: accepts, reads requests, answers them through serve,
 * and drops connections past their time. */
void gs_pool_socket_handle(gs_pool_socket_t *self, const zmq_pollitem_t *items, int n,
                           int64_t now_ms, gs_pool_serve_fn serve, void *arg);

#endif
