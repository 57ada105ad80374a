/*
 * swap_names.h - the handles of the program's own physical memory
 * (cuMemCreate on a GPU: PyTorch's expandable segments), by the name the
 * program holds, with the handle the driver knows the memory by now.
 *
 * The swap tier moves such memory like its own: out, the handle is
 * released; back, the memory is a new handle to the driver, while the
 * program keeps the old name, so every call that takes a handle is
 * translated here.  A name is also chosen here when the driver hands out a
 * value that the program still holds as the name of other memory (a
 * released handle's value may come back).
 *
 * A sorted array; the swap engine's lock guards it.  Pointers returned stay
 * valid until the next add or remove.
 */
#ifndef GS_SWAP_NAMES_H
#define GS_SWAP_NAMES_H

#include <cuda.h>
#include <stddef.h>

typedef struct {
    CUmemGenericAllocationHandle name; /* what the program holds */
    CUmemGenericAllocationHandle real; /* what the driver knows now; 0 while parked */
    size_t size;
    int dev;
    CUdeviceptr va; /* mapped there once and movable (swap_ranges.h), else 0 */
    int refs;       /* cuMemCreate and each cuMemRetainAllocationHandle, less releases */
    int fixed;      /* exported, retained or mapped twice: it never moves */
} gs_swap_name_t;

typedef struct gs_swap_names gs_swap_names_t;

gs_swap_names_t *gs_swap_names_new(void);
void gs_swap_names_destroy(gs_swap_names_t **self_p);

/* 0, or -1 (the name is taken, or no memory). */
int gs_swap_names_add(gs_swap_names_t *self, const gs_swap_name_t *n);
void gs_swap_names_remove(gs_swap_names_t *self, CUmemGenericAllocationHandle name);
/* The entry of a name, or NULL. */
gs_swap_name_t *gs_swap_names_get(gs_swap_names_t *self, CUmemGenericAllocationHandle name);
/* The entry whose memory the driver knows as real, or NULL. */
gs_swap_name_t *gs_swap_names_by_real(gs_swap_names_t *self, CUmemGenericAllocationHandle real);
/* A value for the program to know new memory by: real itself when no
 * entry has that name, else one that no entry has as name or handle. */
CUmemGenericAllocationHandle gs_swap_names_choose(gs_swap_names_t *self,
                                                  CUmemGenericAllocationHandle real);
size_t gs_swap_names_count(const gs_swap_names_t *self);

#endif
