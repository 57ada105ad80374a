/*
 * swap_ranges.h - the device memory the swap tier can move: every
 * allocation the hook backed with the virtual-memory API (a reserved
 * address range with physical memory mapped into it), resident on its GPU
 * or parked in host memory with its addresses kept.
 *
 * A set sorted by address behind one mutex: allocation and free are rare
 * next to launches and never on the launch path; lookups by an address
 * inside a range (cuMemGetAddressRange, cuPointerGetAttribute) are a
 * binary search.
 */
#ifndef GS_SWAP_RANGES_H
#define GS_SWAP_RANGES_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What a legacy IPC handle of a range proves (libhook/hook_ipc_handle.h):
 * `ask`, which whoever opens the handle presents to get the memory (the
 * handle is the capability, as the driver's), and `proof`, which only the
 * exporter can answer with.  Random, drawn once per range and process. */
#define GS_SWAP_IPC_KEY 12
typedef struct {
    unsigned char ask[GS_SWAP_IPC_KEY], proof[GS_SWAP_IPC_KEY];
} gs_swap_ipc_keys_t;

/* Equal keys, compared in a time that does not depend on their bytes. */
static inline int gs_swap_ipc_same(const unsigned char *a, const unsigned char *b)
{
    unsigned char d = 0;
    for (size_t i = 0; i < GS_SWAP_IPC_KEY; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* A range's physical memory comes in segments (256 MiB by default; the last
 * may be smaller), so that a large allocation leaves the GPU and comes back
 * piece by piece: a switch between two notebooks overlaps one's way out
 * with the other's way in even when each holds one huge tensor. */
typedef struct {
    CUdeviceptr va; /* what the program got */
    size_t size;    /* what it asked for */
    size_t bytes;   /* reserved: size rounded to the granularity */
    CUcontext ctx;  /* the context it was allocated in */
    int dev;
    size_t seg_bytes; /* segment size */
    int nseg;
    /* Per segment, its physical memory (0: its bytes are in host memory).
     * Touched only under the swap engine's lock; the array is freed with
     * the range (gs_swap_free, or gs_swap_ranges_destroy for one left). */
    CUmemGenericAllocationHandle *seg;
    uint64_t resident_bytes; /* of `bytes`, on the GPU now */
    int pinned;              /* shared with another process (IPC): never moved */
    /* Its legacy IPC keys (gs_swap_ipc_keys), drawn by the process ipc_pid
     * at its first cuIpcGetMemHandle (0: never shared; a forked child's
     * copy is not its own and is drawn again). */
    gs_swap_ipc_keys_t ipc;
    pid_t ipc_pid;
    int host_set;      /* host_off is assigned: some of it went out */
    uint64_t host_off; /* where its bytes are in the host window */
    /* The program's own mapping (its cuMemMap of memory it made with
     * cuMemCreate, as PyTorch's expandable segments do), adopted so that it
     * moves with the rest: one segment at the program's addresses, made
     * again as `prop` says, with the access the program gave, and known to
     * the program as `name` (swap_names.h). */
    int vmm;
    CUmemGenericAllocationHandle name; /* 0: the program released it (the mapping holds it) */
    CUmemAllocationProp prop;
    uint64_t access_rw, access_ro; /* GPUs the program gave access (cuMemSetAccess) */
} gs_swap_range_t;

/* Some of the range is in host memory. */
static inline int gs_swap_range_parked(const gs_swap_range_t *r)
{
    return r->resident_bytes < r->bytes;
}

typedef struct gs_swap_ranges gs_swap_ranges_t;

gs_swap_ranges_t *gs_swap_ranges_new(void);
void gs_swap_ranges_destroy(gs_swap_ranges_t **self_p);

/* The ranges that overlap [va, va + size), in address order: fills
 * out[0 .. max) and returns how many there are (may exceed max). */
size_t gs_swap_ranges_span(gs_swap_ranges_t *self, CUdeviceptr va, size_t size,
                           gs_swap_range_t *out, size_t max);

/* 0, or -1 (overlap with a range already there, or no memory). */
int gs_swap_ranges_add(gs_swap_ranges_t *self, const gs_swap_range_t *r);
/* Takes out the range that starts at va: 1 and *out, or 0. */
int gs_swap_ranges_remove(gs_swap_ranges_t *self, CUdeviceptr va, gs_swap_range_t *out);
/* The range holding addr (anywhere in [va, va + size)): 1 and *out, or 0. */
int gs_swap_ranges_find(gs_swap_ranges_t *self, CUdeviceptr addr, gs_swap_range_t *out);
/* Replaces the stored range that starts at r->va; 0, or -1 if gone (freed
 * meanwhile: the caller releases what it made for it). */
int gs_swap_ranges_update(gs_swap_ranges_t *self, const gs_swap_range_t *r);

/* The ranges of GPU dev (all GPUs: dev < 0) with something in host memory
 * (parked = 1), with something on the GPU that may move (0), or all of
 * them (GS_SWAP_ALL), in address order: fills out[0 .. max) and returns
 * how many there are (may exceed max). */
#define GS_SWAP_ALL (-1)
size_t gs_swap_ranges_list(gs_swap_ranges_t *self, int dev, int parked, gs_swap_range_t *out,
                           size_t max);

/* Bytes (rounded, as reserved) on the GPU and in host memory, for GPU dev;
 * pinned ranges count in neither (they cannot move). */
void gs_swap_ranges_totals(gs_swap_ranges_t *self, int dev, uint64_t *resident, uint64_t *parked);

#endif
