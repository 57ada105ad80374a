/*
 * swap_window.h - host memory lent by the broker's pool (chunks pinned on
 * the GPU's NUMA node, received as POSIX descriptors), imported and mapped
 * side by side into one reserved address range of this process, where the
 * copy engines can reach it: the place a parked GPU's memory is kept.
 *
 * The chunks' handles are released as soon as they are mapped: the
 * mappings keep the memory, and closing the window (unmap, free the range)
 * gives it back to the broker's pool, which may then zero it and lend it
 * to someone else.  While the window is open the memory stays valid even
 * if the broker dies, so a parked process can always bring itself back.
 */
#ifndef GS_SWAP_WINDOW_H
#define GS_SWAP_WINDOW_H

#include <stddef.h>

#include "swap_driver.h"

typedef struct {
    CUdeviceptr va; /* 0: closed */
    size_t bytes;   /* reserved: `chunks` positions */
    size_t chunk_bytes;
    int chunks;
    int mapped;          /* positions 0 .. mapped-1 have had their chunk mapped */
    unsigned char *gone; /* per position: unmapped early (its chunk went back) */
    int dev;
} gs_swap_window_t;

/* Imports n descriptors (the caller keeps and closes them) of chunk_bytes
 * each and maps them in order for GPU dev.  0, or -1 with err set and
 * nothing left mapped. */
int gs_swap_window_open(const gs_swap_driver_t *d, int dev, const int *fds, int n,
                        size_t chunk_bytes, gs_swap_window_t *w, char *err, size_t errlen);
/* The same for a lease that grows (a switch's relay): room for `want`
 * chunks, the first n of them mapped now (n may be 0). */
int gs_swap_window_open_part(const gs_swap_driver_t *d, int dev, const int *fds, int n, int want,
                             size_t chunk_bytes, gs_swap_window_t *w, char *err, size_t errlen);
/* Maps n more chunks at the next positions.  0, or -1 with err set (the
 * window as it was). */
int gs_swap_window_extend(const gs_swap_driver_t *d, gs_swap_window_t *w, const int *fds, int n,
                          char *err, size_t errlen);
/* Bytes from the window's start that are mapped. */
size_t gs_swap_window_mapped_bytes(const gs_swap_window_t *w);
/* Position pos no longer holds anything this process needs: unmapped now,
 * so that its chunk can go back to the pool before the window closes. */
void gs_swap_window_drop(const gs_swap_driver_t *d, gs_swap_window_t *w, int pos);
/* The disk tier has the window's contents (swap_drop, doc/protocol.md):
 * every chunk is unmapped and goes back to the pool, while the address
 * range and every range's place in it stay.  A swap in then maps chunks
 * again from position 0 (gs_swap_window_extend) as they come back from
 * the disk, before it copies from them. */
void gs_swap_window_hollow(const gs_swap_driver_t *d, gs_swap_window_t *w);
/* 1 when the window is open but holds no chunk (hollowed, or lent in part
 * and nothing came yet). */
static inline int gs_swap_window_is_hollow(const gs_swap_window_t *w)
{
    return w->va != 0 && w->mapped == 0;
}
void gs_swap_window_close(const gs_swap_driver_t *d, gs_swap_window_t *w);

#endif
