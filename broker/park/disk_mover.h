/*
 * disk_mover.h - the disk tier's copies: a parked session's pool chunks
 * into a new image on disk (disk_file.h), and an image back into pool
 * chunks, run on a worker thread (job_queue.h) so that the event loop never
 * waits for the disk.  Progress is readable from the loop at any time
 * ("coming back from disk: 6.1 of 24 GiB"), and the segments come back in
 * order, so that the hooks can copy the first ones to the GPU while the
 * rest are still read.
 *
 * The chunks are reached through a table (map for the CPU, unmap): the
 * pool's driver calls in the broker (pool_driver.h), plain memory in the
 * tests.
 */
#ifndef GS_DISK_MOVER_H
#define GS_DISK_MOVER_H

#include <stddef.h>
#include <stdint.h>

#include "disk_file.h"
#include "job_queue.h"

typedef struct {
    int (*map)(void *arg, uint64_t handle, size_t bytes, void **cpu, char *err, size_t errlen);
    void (*unmap)(void *arg, void *cpu, size_t bytes);
    void *arg;
} gs_disk_chunks_t;

typedef struct gs_disk_move gs_disk_move_t;

/* Chunks handles[0 .. n) (each chunk_bytes; the first `bytes` of them in
 * all hold the data) into a new image in dir described by meta; NULL
 * without memory.  The move copies the arrays. */
gs_disk_move_t *gs_disk_move_out(const char *dir, const gs_disk_meta_t *meta,
                                 const uint64_t *handles, int n, uint64_t chunk_bytes,
                                 uint64_t bytes, const gs_disk_chunks_t *chunks,
                                 const gs_disk_io_t *io);
/* The image back into handles[0 .. n) (at least its segments, each
 * chunk_bytes); the move owns image from here on. */
gs_disk_move_t *gs_disk_move_in(gs_disk_file_t *image, const uint64_t *handles, int n,
                                uint64_t chunk_bytes, const gs_disk_chunks_t *chunks);

/* The job to submit to a job queue, and the move a finished job is. */
gs_job_t *gs_disk_move_job(gs_disk_move_t *self);
gs_disk_move_t *gs_disk_move_of(gs_job_t *job);
/* Runs the whole move on the calling thread (what the job does). */
void gs_disk_move_run(gs_disk_move_t *self);

/* Progress, from any thread: bytes copied so far, and segments done (in
 * order: segments 0 .. n-1 are complete). */
uint64_t gs_disk_move_done_bytes(const gs_disk_move_t *self);
int gs_disk_move_segments_done(const gs_disk_move_t *self);
/* The bytes the move has in all. */
uint64_t gs_disk_move_total_bytes(const gs_disk_move_t *self);

/* After the run: 0, or -1 with why (the disk's or the driver's words,
 * with the file and session); the seconds it took. */
int gs_disk_move_result(const gs_disk_move_t *self, const char **why, double *seconds);
/* A move out that succeeded hands its sealed image over (the caller owns
 * it); NULL otherwise.  A failed move out has removed its file. */
gs_disk_file_t *gs_disk_move_take_image(gs_disk_move_t *self);
/* Frees the move; an image it still holds is closed (kept on disk) for a
 * move in, removed for a move out that did not succeed. */
void gs_disk_move_destroy(gs_disk_move_t **self_p);

#endif
