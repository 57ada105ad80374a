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
 * socket failed) and no descriptor left open. */
int gs_swap_fetch(const char *path, uint64_t lease, int *fds, int max, uint64_t *chunk_bytes,
                  int timeout_ms, char *err, size_t errlen);

#endif
