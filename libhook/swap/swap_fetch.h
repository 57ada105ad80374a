/*
 * swap_fetch.h - the hook's side of the broker's pool socket
 * (broker/park/pool_socket.h): asks for the chunks of a lease and receives
 * them as descriptors, to be imported into a window (swap_window.h).
 */
#ifndef GS_SWAP_FETCH_H
#define GS_SWAP_FETCH_H

#include <stddef.h>
#include <stdint.h>

/* Connects to path, asks for `lease`, and receives its chunks: returns how
 * many descriptors are in fds (the caller closes them) with their size in
 * *chunk_bytes, or -1 with err set (the broker's refusal, or why the
 * socket failed: "permission denied: ..." for a socket this user may not
 * connect to) and no descriptor left open.  While the socket answers that
 * it has no room for another connection now, asks again until timeout_ms
 * is spent (then err is that answer). */
int gs_swap_fetch(const char *path, uint64_t lease, int *fds, int max, uint64_t *chunk_bytes,
                  int timeout_ms, char *err, size_t errlen);

/* The same for the chunks from position `from` on of a lease that grows
 * (a switch's relay): the broker answers when it has some there, or after
 * about wait_ms with none (0: ask again).  *want: the lease's positions in
 * all. */
int gs_swap_fetch_from(const char *path, uint64_t lease, int from, int wait_ms, int *fds, int max,
                       uint64_t *chunk_bytes, int *want, int timeout_ms, char *err, size_t errlen);

/* Gives these positions of `lease` back to the pool before the rest: their
 * data is back on the GPU.  0, or -1 with err set. */
int gs_swap_return(const char *path, uint64_t lease, const int *positions, int n, int timeout_ms,
                   char *err, size_t errlen);

#endif
