/*
 * disk_mover.c - the disk tier's copies between pool chunks and an image
 * on disk (disk_mover.h), one segment a chunk, each chunk mapped for the
 * CPU only while it is copied.
 */
#include "disk_mover.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gs_disk_move {
    gs_job_t job; /* first: the queue's view of it */
    int out;
    char dir[4096];
    gs_disk_meta_t meta;
    gs_disk_io_t io;
    int have_io;
    uint64_t *handles;
    int n;
    uint64_t chunk_bytes;
    uint64_t total;
    gs_disk_chunks_t chunks;
    gs_disk_file_t *image;
    _Atomic uint64_t done_bytes;
    _Atomic int segments_done;
    int ran, failed;
    double seconds;
    char why[700];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_job(gs_job_t *job)
{
    gs_disk_move_run(gs_disk_move_of(job));
}

static gs_disk_move_t *move_new(const uint64_t *handles, int n, uint64_t chunk_bytes,
                                const gs_disk_chunks_t *chunks)
{
    gs_disk_move_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->handles = calloc(n > 0 ? (size_t)n : 1, sizeof *m->handles);
    if (!m->handles) {
        free(m);
        return NULL;
    }
    if (n > 0)
        memcpy(m->handles, handles, (size_t)n * sizeof *handles);
    m->n = n;
    m->chunk_bytes = chunk_bytes;
    m->chunks = *chunks;
    m->job.run = run_job;
    return m;
}

gs_disk_move_t *gs_disk_move_out(const char *dir, const gs_disk_meta_t *meta,
                                 const uint64_t *handles, int n, uint64_t chunk_bytes,
                                 uint64_t bytes, const gs_disk_chunks_t *chunks,
                                 const gs_disk_io_t *io)
{
    gs_disk_move_t *m = move_new(handles, n, chunk_bytes, chunks);
    if (!m)
        return NULL;
    m->out = 1;
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m->meta = *meta;
    m->meta.segment_bytes = chunk_bytes;
    m->meta.segments = chunk_bytes ? (uint32_t)((bytes + chunk_bytes - 1) / chunk_bytes) : 0;
    m->total = bytes;
    if (io) {
        m->io = *io;
        m->have_io = 1;
    }
    return m;
}

gs_disk_move_t *gs_disk_move_in(gs_disk_file_t *image, const uint64_t *handles, int n,
                                uint64_t chunk_bytes, const gs_disk_chunks_t *chunks)
{
    gs_disk_move_t *m = move_new(handles, n, chunk_bytes, chunks);
    if (!m)
        return NULL;
    m->image = image;
    m->meta = *gs_disk_file_meta(image);
    for (uint32_t s = 0; s < m->meta.segments; s++)
        m->total += gs_disk_file_segment_length(image, s);
    return m;
}

gs_job_t *gs_disk_move_job(gs_disk_move_t *self)
{
    return &self->job;
}

gs_disk_move_t *gs_disk_move_of(gs_job_t *job)
{
    return (gs_disk_move_t *)job; /* the job is the first member */
}

/* The length of segment s of a move out: whole chunks, the last one up to
 * the data's end, in the disk's units. */
static uint64_t out_length(const gs_disk_move_t *m, uint32_t s)
{
    uint64_t start = (uint64_t)s * m->chunk_bytes;
    uint64_t left = m->total - start;
    uint64_t len = left < m->chunk_bytes ? left : m->chunk_bytes;
    return (len + GS_DISK_ALIGN - 1) / GS_DISK_ALIGN * GS_DISK_ALIGN;
}

/* Copies segment s between its chunk and the image; 0 or -1 with why. */
static int copy_segment(gs_disk_move_t *m, uint32_t s)
{
    void *cpu = NULL;
    char err[300] = "";
    if (m->chunks.map(m->chunks.arg, m->handles[s], m->chunk_bytes, &cpu, err, sizeof err) != 0) {
        snprintf(m->why, sizeof m->why, "mapping chunk %u of %s for the disk: %s", s,
                 m->meta.session, err);
        return -1;
    }
    uint64_t len = 0;
    int rc;
    if (m->out) {
        len = out_length(m, s);
        rc = gs_disk_file_write(m->image, s, cpu, len, m->why, sizeof m->why);
    } else {
        rc = gs_disk_file_read(m->image, s, cpu, m->chunk_bytes, &len, m->why, sizeof m->why);
    }
    m->chunks.unmap(m->chunks.arg, cpu, m->chunk_bytes);
    if (rc == 0)
        atomic_fetch_add(&m->done_bytes, len);
    return rc;
}

void gs_disk_move_run(gs_disk_move_t *self)
{
    double t0 = now_s();
    self->ran = 1;
    if (self->meta.segments == 0 || (int)self->meta.segments > self->n ||
        (!self->out && self->meta.segment_bytes > self->chunk_bytes)) {
        snprintf(self->why, sizeof self->why,
                 "%s's image has %u segments of %llu bytes, the chunks are %d of %llu",
                 self->meta.session, self->meta.segments,
                 (unsigned long long)self->meta.segment_bytes, self->n,
                 (unsigned long long)self->chunk_bytes);
        self->failed = 1;
    }
    if (!self->failed && self->out) {
        self->image = gs_disk_file_create(self->dir, &self->meta, self->have_io ? &self->io : NULL,
                                          self->why, sizeof self->why);
        self->failed = !self->image;
    }
    for (uint32_t s = 0; !self->failed && s < self->meta.segments; s++) {
        self->failed = copy_segment(self, s) != 0;
        if (!self->failed)
            atomic_store_explicit(&self->segments_done, (int)s + 1, memory_order_release);
    }
    if (!self->failed && self->out)
        self->failed = gs_disk_file_seal(self->image, self->why, sizeof self->why) != 0;
    if (self->failed && self->out)
        gs_disk_file_remove(&self->image); /* a half image is worth nothing */
    self->seconds = now_s() - t0;
}

uint64_t gs_disk_move_done_bytes(const gs_disk_move_t *self)
{
    return atomic_load(&((gs_disk_move_t *)self)->done_bytes);
}

int gs_disk_move_segments_done(const gs_disk_move_t *self)
{
    return atomic_load_explicit(&((gs_disk_move_t *)self)->segments_done, memory_order_acquire);
}

uint64_t gs_disk_move_total_bytes(const gs_disk_move_t *self)
{
    return self->total;
}

int gs_disk_move_result(const gs_disk_move_t *self, const char **why, double *seconds)
{
    if (why)
        *why = self->failed ? self->why : "";
    if (seconds)
        *seconds = self->seconds;
    return self->ran && !self->failed ? 0 : -1;
}

gs_disk_file_t *gs_disk_move_take_image(gs_disk_move_t *self)
{
    if (!self->out || !self->ran || self->failed)
        return NULL;
    gs_disk_file_t *f = self->image;
    self->image = NULL;
    return f;
}

void gs_disk_move_destroy(gs_disk_move_t **self_p)
{
    gs_disk_move_t *m = self_p ? *self_p : NULL;
    if (!m)
        return;
    if (m->out)
        gs_disk_file_remove(&m->image);
    else
        gs_disk_file_close(&m->image);
    free(m->handles);
    free(m);
    *self_p = NULL;
}
