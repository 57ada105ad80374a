/*
 * park_disk.c - the disk tier (doc/parking.md, "The disk tier"): a session
 * parked on the swap tier for park_disk_idle_s, or sooner when the host
 * ledger needs its memory, moves from its pool chunks to images in
 * park_disk_dir (one per process: each has its own lease), and its chunks
 * go back to the pool; coming back, the images are read into new chunks
 * and the swap tier's swap_in takes it from there.
 *
 * The order keeps the memory whole at every step: the hooks let go of
 * their chunks (swap_drop) only once every image is sealed, and an image
 * is removed only once its memory is back in chunks.  A copy that fails
 * (disk full, an I/O error) leaves the session in host memory and says
 * why; a read that fails (an I/O error, a checksum mismatch) leaves it on
 * disk, its unpark failed with the image's words.
 *
 * The copies run on a worker thread (disk_mover.c): the loop only starts
 * them and collects them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk_dir.h"
#include "disk_file.h"
#include "disk_mover.h"
#include "job_queue.h"
#include "log.h"
#include "park_disk.h"
#include "park_jobs.h"
#include "park_swap.h"
#include "proc_alive.h"
#include "protocol.h"

#define SEC 1000000LL

/* A move to disk that failed is not tried again for this long (the disk
 * stays full for a while; a session that does not fit stays in RAM). */
#define DISK_RETRY_US (60 * SEC)
/* Under host-memory pressure a session parked this long may go at once. */
#define DISK_PRESSURE_MIN_US SEC
/* The directory is checked again after a failed check this often. */
#define DISK_CHECK_EVERY_US (10 * SEC)
/* Space left free on the disk's file system beyond the images. */
#define DISK_FREE_MARGIN (256ull << 20)
/* An image waits this long for chunks to come back into. */
#define DISK_LEASE_WAIT_US (60 * SEC)

static int chunk_map(void *arg, uint64_t handle, size_t bytes, void **cpu, char *err, size_t errlen)
{
    return gs_pool_driver_map(arg, handle, bytes, cpu, err, errlen);
}

static void chunk_unmap(void *arg, void *cpu, size_t bytes)
{
    gs_pool_driver_unmap(arg, cpu, bytes);
}

static gs_disk_chunks_t chunks_of(gs_park_t *p, int gpu)
{
    return (gs_disk_chunks_t){chunk_map, chunk_unmap, gs_swap_pools_driver(p->pools, gpu)};
}

int park_disk_start(gs_park_t *p)
{
    p->disk_q = gs_job_queue_new(1);
    return p->disk_q ? 0 : -1;
}

static void drop_job(gs_job_t *job)
{
    gs_disk_move_t *m = gs_disk_move_of(job);
    gs_disk_move_destroy(&m);
}

void park_disk_stop(gs_park_t *p)
{
    gs_job_queue_destroy(&p->disk_q, drop_job); /* (the moves go with their jobs) */
    for (disk_img_t *d = p->disk, *next; d; d = next) {
        next = d->next;
        gs_disk_file_close(&d->file); /* kept: the next broker finds it */
        free(d);
    }
    p->disk = NULL;
    /* Images of sessions that came back, still being removed: at most 10 s
     * (one left is removed by the next broker, its process gone). */
    int left = gs_disk_file_removals_wait(10000);
    if (left)
        gs_warn("%d disk image%s still being removed at exit", left, left == 1 ? "" : "s");
}

int park_disk_fd(const gs_park_t *p)
{
    return p->disk_q ? gs_job_queue_fd(p->disk_q) : -1;
}

/* ---- the directory ------------------------------------------------------------ */

/* 1 when park_disk_dir is set and fit for use (checked once per value). */
static int dir_ready(gs_park_t *p, int64_t now)
{
    const char *dir = p->cfg.disk_dir;
    if (!dir[0] || !p->pools || !p->disk_q)
        return 0;
    if (!strcmp(dir, p->disk_dir_ok))
        return 1;
    if (p->disk_checked_at && now < p->disk_checked_at + DISK_CHECK_EVERY_US)
        return 0;
    p->disk_checked_at = now;
    char why[300];
    if (gs_disk_dir_check(dir, why, sizeof why) != 0) {
        if (strcmp(why, p->disk_dir_error) != 0)
            gs_error("the disk tier is off: %s", why);
        snprintf(p->disk_dir_error, sizeof p->disk_dir_error, "%s", why);
        return 0;
    }
    snprintf(p->disk_dir_ok, sizeof p->disk_dir_ok, "%s", dir);
    p->disk_dir_error[0] = '\0';
    gs_info("the disk tier parks sessions idle for %.0f s in %s", (double)p->cfg.disk_idle_us / SEC,
            dir);
    return 1;
}

/* ---- images a broker that is gone left ---------------------------------------- */

/* A sealed image the scan found: its process still lives (its hook holds
 * the window, hollow, and waits for a broker to bring the memory back):
 * kept until that process joins (park_disk_client_back); else removed. */
static void found(void *arg, gs_disk_file_t *f)
{
    gs_park_t *p = arg;
    const gs_disk_meta_t *m = gs_disk_file_meta(f);
    disk_img_t *img = NULL;
    if (!gs_proc_alive(m->pid, m->proc_start) || !(img = calloc(1, sizeof *img))) {
        gs_info("removing the disk image %s: pid %d of session %s is gone", gs_disk_file_path(f),
                (int)m->pid, m->session);
        gs_disk_file_remove(&f);
        return;
    }
    snprintf(img->session, sizeof img->session, "%.*s", (int)sizeof img->session - 1, m->session);
    img->pid = m->pid;
    img->uid = (long)m->uid;
    img->start = m->proc_start;
    img->gpu = m->gpu;
    img->chunks = (int)m->segments;
    img->bytes = (uint64_t)m->segments * m->segment_bytes;
    img->dropped = img->adopted = 1;
    snprintf(img->path, sizeof img->path, "%s", gs_disk_file_path(f));
    img->file = f;
    img->next = p->disk;
    p->disk = img;
    p->disk_used += img->bytes;
    gs_info("found the disk image %s of session %s (pid %d, %.1f GiB): adopted when its "
            "process joins",
            img->path, m->session, (int)m->pid, (double)img->bytes / (1 << 30));
}

static void dropped_file(void *arg, const char *path, const char *why)
{
    (void)arg;
    gs_warn("removed %s from the disk tier's directory: %s", path, why);
}

int park_disk_dir_set(gs_park_t *p, const char *dir, char *err, size_t errlen)
{
    if (!*dir) {
        p->disk_dir_ok[0] = '\0';
        return 0;
    }
    if (gs_disk_dir_check(dir, err, errlen) != 0)
        return -1;
    if (strcmp(dir, p->disk_dir_ok) != 0 && p->pools) {
        char why[300];
        if (gs_disk_dir_scan(dir, NULL, found, dropped_file, p, why, sizeof why) < 0)
            gs_warn("the disk tier's directory: %s", why);
        snprintf(p->disk_dir_ok, sizeof p->disk_dir_ok, "%s", dir);
        p->disk_dir_error[0] = '\0';
        gs_info("the disk tier parks sessions in %s", dir);
    }
    return 0;
}

void park_disk_client_back(gs_park_t *p, pclient_t *c, int64_t now)
{
    for (disk_img_t *d = p->disk; d; d = d->next) {
        if (!d->adopted || d->key[0] || d->pid != c->pid || !c->start || d->start != c->start)
            continue;
        psess_t *ps = park_state_sess(p, c->session, 1);
        if (!ps || (ps->st != PS_RESIDENT && ps->disk != DISK_ON))
            continue;
        snprintf(d->key, sizeof d->key, "%s", c->key);
        snprintf(d->session, sizeof d->session, "%s", c->session);
        if (ps->st == PS_RESIDENT) {
            memset(ps->bytes, 0, sizeof ps->bytes);
            ps->npids = 0;
        }
        ps->st = PS_PARKED;
        ps->tier = TIER_SWAP;
        ps->swap_gpu = d->gpu;
        ps->disk = DISK_ON;
        ps->parked_at = now;
        if (d->gpu >= 0 && d->gpu < GS_MAX_GPUS)
            ps->bytes[d->gpu] += d->bytes;
        if (ps->npids < GS_PARK_MAX_PIDS) {
            ps->pids[ps->npids] = (int)c->pid;
            ps->start[ps->npids++] = c->start;
        }
        gs_sched_set_residency(p->sched, ps->id, GS_SCHED_PARKED, now);
        p->changed = 1;
        gs_warn("session %s: pid %ld joined with its memory on the disk tier (left so by a "
                "previous broker): brought back when it needs the GPU",
                ps->id, c->pid);
        gs_eventlog_write(
            p->eventlog, "park_adopted",
            json_pack("{s:s, s:i, s:s}", "session", ps->id, "pid", (int)c->pid, "tier", "disk"));
    }
}

/* ---- images ------------------------------------------------------------------- */

static void img_unlink(gs_park_t *p, disk_img_t *img)
{
    for (disk_img_t **d = &p->disk; *d; d = &(*d)->next)
        if (*d == img) {
            *d = img->next;
            break;
        }
}

/* Forgets img and removes its file (its memory is elsewhere, or gone). */
static void img_remove(gs_park_t *p, disk_img_t *img)
{
    img_unlink(p, img);
    if (img->dropped && p->disk_used >= img->bytes)
        p->disk_used -= img->bytes;
    if (img->file)
        gs_disk_file_remove_later(&img->file); /* (seconds for gigabytes: disk_file.h) */
    else if (img->path[0])
        unlink(img->path);
    free(img);
}

static pclient_t *client_of(gs_park_t *p, const disk_img_t *img)
{
    pclient_t *c = zhashx_lookup(p->clients, img->key);
    return c && c->pid == img->pid ? c : NULL;
}

static void event(gs_park_t *p, const psess_t *ps, const char *from, const char *to, uint64_t bytes,
                  double s, const char *error)
{
    json_t *e = json_pack("{s:s, s:s, s:s, s:I, s:f}", "session", ps->id, "from", from, "to", to,
                          "bytes", (json_int_t)bytes, "seconds", s);
    if (s >= 0.001)
        json_object_set_new(e, "gbps", json_real((double)bytes / s / 1e9));
    if (error)
        json_object_set_new(e, "error", json_string(error));
    gs_eventlog_write(p->eventlog, error ? "tier_move_failed" : "tier_move", e);
}

static uint64_t session_disk_bytes(const gs_park_t *p, const psess_t *ps)
{
    uint64_t bytes = 0;
    for (const disk_img_t *d = p->disk; d; d = d->next)
        if (!strcmp(d->session, ps->id))
            bytes += d->bytes;
    return bytes;
}

/* ---- out: chunks to images, then swap_drop ----------------------------------- */

/* Some session's park or unpark, an allocation's make_room, or an image
 * coming back from disk waits for host memory now: the ledger needs what
 * the disk can take.  (Without the last, a session read back while the
 * budget was full of parked sessions waited DISK_LEASE_WAIT_US for chunks
 * that only their move to disk could free.) */
static int host_pressure(gs_park_t *p, int64_t now)
{
    for (const disk_img_t *d = p->disk; d; d = d->next)
        if (d->reading && !d->lease)
            return 1;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if (ps->no_demand || (ps->pool_refused_at && now - ps->pool_refused_at < 5 * SEC))
            return 1;
    for (const room_t *r = p->rooms; r; r = r->next)
        if (r->host_bound)
            return 1;
    return 0;
}

/* What ps's processes hold in leases (0: one of them is busy, or none
 * holds one); *in_part: one still has memory it could move on a GPU (a
 * session parked in part, whose rest may follow into the same lease). */
static uint64_t leased_bytes(gs_park_t *p, const psess_t *ps, int *in_part)
{
    uint64_t bytes = 0, chunk = gs_swap_pools_chunk_bytes(p->pools);
    *in_part = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (strcmp(c->session, ps->id) != 0)
            continue;
        if (c->swap_wait != CW_NONE || c->pid <= 0 || c->uid < 0)
            return 0;
        for (int g = 0; g < GS_MAX_GPUS; g++)
            if (c->movable[g])
                *in_part = 1;
        bytes += (uint64_t)c->lease_chunks * chunk * (c->lease != 0);
    }
    return bytes;
}

static int due(const gs_park_t *p, const psess_t *ps, int pressure, int64_t now)
{
    if (ps->st != PS_PARKED || ps->tier != TIER_SWAP || ps->stuck || ps->job ||
        ps->swap_phase != SWAP_NONE || ps->demand_since || ps->disk != DISK_NONE || ps->demoting ||
        (ps->disk_refused_at && now < ps->disk_refused_at + DISK_RETRY_US))
        return 0;
    if (pressure && now >= ps->parked_at + DISK_PRESSURE_MIN_US)
        return 1;
    return now >= ps->parked_at + p->cfg.disk_idle_us;
}

/* Room on the disk for `bytes` more (the budget and the file system). */
static int room_for(gs_park_t *p, uint64_t bytes, char *why, size_t len)
{
    if (p->cfg.disk_budget && p->disk_used + bytes > p->cfg.disk_budget) {
        snprintf(why, len, "park_disk_budget (%.1f GiB) is full: %.1f GiB on disk",
                 (double)p->cfg.disk_budget / (1 << 30), (double)p->disk_used / (1 << 30));
        return 0;
    }
    uint64_t free_bytes = 0;
    if (gs_disk_dir_free(p->disk_dir_ok, &free_bytes, why, len) != 0)
        return 0;
    if (free_bytes < bytes + DISK_FREE_MARGIN) {
        snprintf(why, len, "%s has %.1f GiB free, %.1f GiB needed", p->disk_dir_ok,
                 (double)free_bytes / (1 << 30), (double)(bytes + DISK_FREE_MARGIN) / (1 << 30));
        return 0;
    }
    return 1;
}

static void refuse(gs_park_t *p, psess_t *ps, const char *why, int64_t now)
{
    char text[sizeof ps->disk_error];
    snprintf(text, sizeof text, "%s", why); /* (why may be ps->disk_error) */
    ps->disk_refused_at = now;
    if (ps->disk_refused_logged == 0 || strcmp(ps->disk_error, text) != 0)
        gs_warn("session %s stays in host memory: %s", ps->id, text);
    ps->disk_refused_logged = 1;
    memcpy(ps->disk_error, text, sizeof text);
}

static void start_out(gs_park_t *p, psess_t *ps, int64_t now)
{
    uint64_t chunk = gs_swap_pools_chunk_bytes(p->pools);
    ps->disk_pending = 0;
    ps->disk_failed = ps->disk_cancel = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (strcmp(c->session, ps->id) != 0 || !c->lease)
            continue;
        int n = c->lease_chunks, gpu = -1;
        uint64_t *handles = calloc((size_t)(n > 0 ? n : 1), sizeof *handles);
        disk_img_t *img = calloc(1, sizeof *img);
        if (!handles || !img ||
            gs_swap_pools_lease_handles(p->pools, c->lease, handles, n, &gpu) != n) {
            free(handles);
            free(img);
            ps->disk_failed = 1;
            snprintf(ps->disk_error, sizeof ps->disk_error,
                     "pid %ld: its lease %llu has not all its chunks", c->pid,
                     (unsigned long long)c->lease);
            continue;
        }
        gs_disk_meta_t meta;
        memset(&meta, 0, sizeof meta);
        snprintf(meta.session, sizeof meta.session, "%s", ps->id);
        meta.uid = (uint32_t)c->uid;
        meta.pid = (int32_t)c->pid;
        meta.proc_start = c->start;
        meta.gpu = gpu;
        meta.segments = (uint32_t)n;
        meta.segment_bytes = chunk;
        meta.lease = c->lease;
        gs_disk_chunks_t table = chunks_of(p, gpu);
        img->move = gs_disk_move_out(p->disk_dir_ok, &meta, handles, n, chunk, (uint64_t)n * chunk,
                                     &table, NULL);
        free(handles);
        if (!img->move) {
            free(img);
            ps->disk_failed = 1;
            snprintf(ps->disk_error, sizeof ps->disk_error, "out of memory");
            continue;
        }
        snprintf(img->session, sizeof img->session, "%s", ps->id);
        snprintf(img->key, sizeof img->key, "%s", c->key);
        img->pid = c->pid;
        img->uid = c->uid;
        img->start = c->start;
        img->gpu = gpu;
        img->chunks = n;
        img->bytes = (uint64_t)n * chunk;
        img->lease = c->lease;
        img->next = p->disk;
        p->disk = img;
        gs_job_queue_submit(p->disk_q, gs_disk_move_job(img->move));
        ps->disk_pending++;
    }
    ps->disk = DISK_WRITING;
    ps->disk_since = now;
    gs_info("session %s goes to the disk tier: %.1f GiB into %s", ps->id,
            (double)session_disk_bytes(p, ps) / (1 << 30), p->disk_dir_ok);
}

/* A session parked in part holds a lease for all its processes can move
 * while the rest stays on the GPU: it cannot go to disk like that (the
 * rest would follow into a lease that is gone).  Due for the disk tier,
 * with room there, its rest goes out first, into the chunks it holds
 * already (no more host memory), and then all of it goes.  Without this,
 * under host pressure a session parked in part never left the pool: on the
 * H100, two of them held the 20 GiB budget while a third waited to come
 * back from disk, whose unpark failed after 60 s, and again after that.
 * (Outside the loop over the sessions: a park looks at them too.) */
static void rest_goes_first(gs_park_t *p, psess_t *ps, int64_t now)
{
    if (park_jobs_park(p, ps,
                       "parked in part, its rest goes out so that it can go to the disk tier",
                       now) == 0)
        gs_info("session %s: its rest goes out first, into the host memory it holds, so that all "
                "of it can go to the disk tier",
                ps->id);
}

void park_disk_poll(gs_park_t *p, int64_t now)
{
    /* Images waiting for chunks are tried again soon (park_disk_collect):
     * the pool pins towards its target meanwhile. */
    for (const disk_img_t *d = p->disk; d; d = d->next)
        if (d->reading && !d->lease && now + SEC / 20 < p->wake)
            p->wake = now + SEC / 20;
    if (!dir_ready(p, now))
        return;
    int pressure = host_pressure(p, now);
    psess_t *rest = NULL;
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        if (ps->disk == DISK_READING)
            continue; /* (images waiting for chunks: park_disk_collect) */
        if (!due(p, ps, pressure, now)) {
            int64_t at = ps->parked_at + p->cfg.disk_idle_us;
            if (ps->st == PS_PARKED && ps->tier == TIER_SWAP && ps->disk == DISK_NONE && at > now &&
                at < p->wake)
                p->wake = at;
            continue;
        }
        int in_part;
        uint64_t bytes = leased_bytes(p, ps, &in_part);
        char why[400];
        if (!bytes)
            continue;
        if (!room_for(p, bytes, why, sizeof why)) {
            refuse(p, ps, why, now);
            continue;
        }
        if (in_part) {
            if (!rest && ps->partial)
                rest = ps; /* one at a time: the next poll sees the next */
            continue;
        }
        start_out(p, ps, now);
        if (!ps->disk_pending) { /* nothing started */
            ps->disk = DISK_NONE;
            refuse(p, ps, ps->disk_error[0] ? ps->disk_error : "nothing to write", now);
        }
    }
    if (rest)
        rest_goes_first(p, rest, now);
}

static void send_drop(gs_park_t *p, pclient_t *c, const disk_img_t *img)
{
    gs_client_t *client = gs_sessions_client_by_key(p->sessions, c->key);
    json_t *m = gs_msg_new(GS_MSG_SWAP_DROP);
    json_object_set_new(m, "device", json_string(p->uuids[img->gpu]));
    json_object_set_new(m, "lease", json_integer((json_int_t)img->lease));
    c->swap_wait = CW_DROP;
    if (!client || !client->identity) {
        gs_warn("could not send swap_drop to pid %ld: no connection", c->pid);
        json_decref(m);
        return;
    }
    park_state_answer(p, client->identity, m);
}

static void start_in(gs_park_t *p, psess_t *ps, int64_t now);

/* Every image of ps is written (or failed). */
static void written(gs_park_t *p, psess_t *ps, int64_t now)
{
    if (ps->disk_failed || ps->disk_cancel) {
        for (disk_img_t *d = p->disk, *next; d; d = next) {
            next = d->next;
            if (!strcmp(d->session, ps->id))
                img_remove(p, d);
        }
        ps->disk = DISK_NONE;
        if (ps->disk_failed) {
            event(p, ps, "swap", "disk", 0, (double)(now - ps->disk_since) / SEC, ps->disk_error);
            refuse(p, ps, ps->disk_error, now);
        }
        if (ps->st == PS_UNPARKING) /* wanted back meanwhile: from its chunks */
            park_swap_unpark(p, ps, now);
        return;
    }
    ps->disk = DISK_DROPPING;
    ps->disk_pending = 0;
    for (disk_img_t *d = p->disk, *next; d; d = next) {
        next = d->next;
        if (strcmp(d->session, ps->id) != 0)
            continue;
        pclient_t *c = client_of(p, d);
        if (!c || c->lease != d->lease || c->swap_wait != CW_NONE) {
            img_remove(p, d); /* it went, or its memory moved meanwhile */
            continue;
        }
        send_drop(p, c, d);
        ps->disk_pending++;
    }
    if (!ps->disk_pending)
        ps->disk = DISK_NONE;
}

/* Every hook of ps answered its swap_drop. */
static void dropped_all(gs_park_t *p, psess_t *ps, int64_t now)
{
    uint64_t bytes = 0;
    for (disk_img_t *d = p->disk, *next; d; d = next) {
        next = d->next;
        if (strcmp(d->session, ps->id) != 0)
            continue;
        if (!d->dropped) {
            img_remove(p, d); /* its hook kept its chunks: its memory is there */
            continue;
        }
        bytes += d->bytes;
    }
    if (!bytes) {
        ps->disk = DISK_NONE;
        refuse(p, ps, "its hooks kept their host memory (swap_drop failed)", now);
    } else {
        ps->disk = DISK_ON;
        double s = (double)(now - ps->disk_since) / SEC;
        gs_info("session %s is on the disk tier: %.1f GiB in %.2f s", ps->id,
                (double)bytes / (1 << 30), s);
        event(p, ps, "swap", "disk", bytes, s, NULL);
    }
    if (ps->disk_cancel && ps->st == PS_UNPARKING) {
        ps->disk_cancel = 0;
        if (ps->disk == DISK_ON)
            start_in(p, ps, now);
        else
            park_swap_unpark(p, ps, now);
    }
}

void park_disk_dropped(gs_park_t *p, pclient_t *c, int gpu, const json_t *msg, int64_t now)
{
    psess_t *ps = park_state_sess(p, c->session, 0);
    uint64_t lease = (uint64_t)gs_msg_int(msg, "lease", 0);
    disk_img_t *img = NULL;
    for (disk_img_t *d = p->disk; d; d = d->next)
        if (!strcmp(d->key, c->key) && d->lease == lease && d->gpu == gpu && !d->dropped)
            img = d;
    if (!ps || !img || ps->disk != DISK_DROPPING || c->swap_wait != CW_DROP) {
        gs_debug("swapped (drop) from pid %ld that nothing waits for: ignored", c->pid);
        return;
    }
    c->swap_wait = CW_NONE;
    if (json_is_true(json_object_get(msg, "ok"))) {
        gs_swap_pools_return(p->pools, c->lease, now); /* zeroed, then lent again */
        c->lease = 0;
        c->lease_chunks = 0;
        img->lease = 0; /* (the one it comes back into is a new one) */
        img->dropped = 1;
        p->disk_used += img->bytes;
    } else {
        gs_warn("pid %ld kept its host memory: swap_drop: %s", c->pid,
                gs_msg_str(msg, "error", "failed"));
    }
    if (--ps->disk_pending <= 0)
        dropped_all(p, ps, now);
}

/* ---- in: images to new chunks, then swap_in ----------------------------------- */

/* Starts reading img into a new lease, if the pool has the chunks. */
static int read_one(gs_park_t *p, disk_img_t *img, char *why, size_t len)
{
    uint64_t chunk = gs_swap_pools_chunk_bytes(p->pools), short_bytes = 0;
    int chunks = 0;
    uint64_t lease = gs_swap_pools_lease(p->pools, img->gpu, (uid_t)img->uid, (pid_t)img->pid,
                                         img->bytes, &chunks, &short_bytes);
    if (!lease)
        return 0; /* the pool pins what it lacks (its target counts it) */
    uint64_t *handles = calloc((size_t)chunks, sizeof *handles);
    int gpu = -1;
    gs_disk_file_t *f = gs_disk_file_open(img->path, NULL, why, len);
    if (!handles || !f || chunks < img->chunks ||
        gs_swap_pools_lease_handles(p->pools, lease, handles, chunks, &gpu) != chunks) {
        if (f && handles)
            snprintf(why, len, "the pool lent %d chunks for %d", chunks, img->chunks);
        else if (!handles)
            snprintf(why, len, "out of memory");
        free(handles);
        gs_disk_file_close(&f);
        gs_swap_pools_return(p->pools, lease, 0);
        return -1;
    }
    gs_disk_chunks_t table = chunks_of(p, gpu);
    img->move = gs_disk_move_in(f, handles, chunks, chunk, &table);
    free(handles);
    if (!img->move) {
        snprintf(why, len, "out of memory");
        gs_swap_pools_return(p->pools, lease, 0);
        return -1;
    }
    img->lease = lease;
    gs_job_queue_submit(p->disk_q, gs_disk_move_job(img->move));
    return 1;
}

/* What images waiting for chunks need, per GPU, for the pools' targets.
 * (No lookups in p->sess here: callers walk it, and a lookup moves its
 * one cursor.) */
static void coming(gs_park_t *p)
{
    memset(p->disk_coming, 0, sizeof p->disk_coming);
    for (const disk_img_t *d = p->disk; d; d = d->next)
        if (d->reading && !d->lease && d->gpu >= 0 && d->gpu < GS_MAX_GPUS)
            p->disk_coming[d->gpu] += d->bytes;
}

static void read_failed(gs_park_t *p, psess_t *ps, const char *why, int64_t now)
{
    char text[500];
    snprintf(text, sizeof text, "coming back from disk: %s", why);
    for (disk_img_t *d = p->disk; d; d = d->next)
        if (!strcmp(d->session, ps->id)) {
            if (d->lease && !d->move)
                gs_swap_pools_return(p->pools, d->lease, now); /* what was read is no use alone */
            d->lease = 0;
            d->reading = 0;
        }
    ps->disk = DISK_ON;
    event(p, ps, "disk", "swap", 0, (double)(now - ps->disk_since) / SEC, why);
    coming(p);
    park_swap_unpark_failed(p, ps, text);
}

/* Starts (or goes on starting) the reads of ps's images; the swap_in
 * follows once they are all in chunks. */
static void reads(gs_park_t *p, psess_t *ps, int64_t now)
{
    int waiting = 0;
    char why[400] = "";
    for (disk_img_t *d = p->disk; d; d = d->next) {
        if (strcmp(d->session, ps->id) != 0 || d->move || d->lease)
            continue;
        int rc = read_one(p, d, why, sizeof why);
        if (rc < 0) {
            ps->disk_failed = 1;
            snprintf(ps->disk_error, sizeof ps->disk_error, "%s", why);
        }
        if (rc == 0)
            waiting++;
        else if (rc > 0)
            ps->disk_pending++;
    }
    coming(p);
    if (ps->disk_failed && !ps->disk_pending) {
        read_failed(p, ps, ps->disk_error, now);
        return;
    }
    if (waiting && now > ps->disk_since + DISK_LEASE_WAIT_US && !ps->disk_pending) {
        read_failed(p, ps, "the host pool had no chunks for it", now);
        return;
    }
}

static void start_in(gs_park_t *p, psess_t *ps, int64_t now)
{
    for (disk_img_t *d = p->disk; d; d = d->next)
        if (!strcmp(d->session, ps->id))
            d->reading = 1;
    ps->disk = DISK_READING;
    ps->disk_since = now;
    ps->disk_pending = 0;
    ps->disk_failed = 0;
    ps->job = ++p->next_job;
    gs_info("session %s comes back from the disk tier: %.1f GiB", ps->id,
            (double)session_disk_bytes(p, ps) / (1 << 30));
    reads(p, ps, now);
}

/* Every image of ps is in chunks (or failed). */
static void read_all(gs_park_t *p, psess_t *ps, int64_t now)
{
    if (ps->disk_failed) {
        read_failed(p, ps, ps->disk_error, now);
        return;
    }
    uint64_t bytes = 0;
    for (disk_img_t *d = p->disk, *next; d; d = next) {
        next = d->next;
        if (strcmp(d->session, ps->id) != 0)
            continue;
        pclient_t *c = client_of(p, d);
        if (c) { /* its new lease: swap_in brings the memory from there */
            c->lease = d->lease;
            c->lease_chunks = d->chunks;
        } else {
            gs_swap_pools_return(p->pools, d->lease, now);
        }
        d->lease = 0;
        bytes += d->bytes;
        img_remove(p, d);
    }
    ps->disk = DISK_NONE;
    coming(p);
    double s = (double)(now - ps->disk_since) / SEC;
    gs_info("session %s read back from the disk tier: %.1f GiB in %.2f s", ps->id,
            (double)bytes / (1 << 30), s);
    event(p, ps, "disk", "swap", bytes, s, NULL);
    park_swap_unpark(p, ps, now);
}

int park_disk_unpark(gs_park_t *p, psess_t *ps, int64_t now)
{
    switch (ps->disk) {
    case DISK_WRITING:
    case DISK_DROPPING:
        ps->disk_cancel = 1; /* goes on when its copy or drop ends */
        return 1;
    case DISK_ON:
        start_in(p, ps, now);
        return 1;
    case DISK_READING:
        return 1;
    default:
        return 0;
    }
}

/* ---- copies that finished ----------------------------------------------------- */

void park_disk_collect(gs_park_t *p, int64_t now)
{
    gs_job_t *job;
    while (p->disk_q && (job = gs_job_queue_done(p->disk_q)) != NULL) {
        gs_disk_move_t *m = gs_disk_move_of(job);
        disk_img_t *img = NULL;
        for (disk_img_t *d = p->disk; d; d = d->next)
            if (d->move == m)
                img = d;
        const char *why = NULL;
        double s = 0;
        int ok = gs_disk_move_result(m, &why, &s) == 0;
        psess_t *ps = img ? park_state_sess(p, img->session, 0) : NULL;
        if (img && ps && ps->disk == DISK_WRITING) {
            if (ok) {
                img->file = gs_disk_move_take_image(m);
                snprintf(img->path, sizeof img->path, "%s", gs_disk_file_path(img->file));
            } else if (!ps->disk_failed) {
                ps->disk_failed = 1;
                snprintf(ps->disk_error, sizeof ps->disk_error, "%s", why ? why : "failed");
            }
        } else if (img && ps && ps->disk == DISK_READING && !ok && !ps->disk_failed) {
            ps->disk_failed = 1;
            snprintf(ps->disk_error, sizeof ps->disk_error, "%s", why ? why : "failed");
        }
        gs_disk_move_destroy(&m);
        if (!img)
            continue;
        img->move = NULL;
        if (!ps) {                          /* the session ended meanwhile */
            if (img->dropped && img->lease) /* a new lease read into */
                gs_swap_pools_return(p->pools, img->lease, now);
            img_remove(p, img);
            continue;
        }
        if (--ps->disk_pending > 0)
            continue;
        if (ps->disk == DISK_WRITING)
            written(p, ps, now);
        else if (ps->disk == DISK_READING) {
            int still = 0;
            for (disk_img_t *d = p->disk; d; d = d->next)
                still += !strcmp(d->session, ps->id) && !d->lease;
            if (!still)
                read_all(p, ps, now);
        }
    }
    /* Images still waiting for chunks (their sessions looked up one by
     * one: reads may end phases). */
    for (disk_img_t *d = p->disk; d; d = d->next) {
        psess_t *ps = d->reading && !d->lease ? park_state_sess(p, d->session, 0) : NULL;
        if (ps && ps->disk == DISK_READING && !ps->disk_pending) {
            reads(p, ps, now);
            break; /* (the list may have changed: the next poll goes on) */
        }
    }
}

void park_disk_client_gone(gs_park_t *p, pclient_t *c, int exited, int64_t now)
{
    (void)now;
    /* (A process that is not alive has exited, whatever the way its
     * departure was noticed.) */
    if (!exited && c->pid > 0 && c->start && gs_proc_alive(c->pid, c->start))
        return; /* it may join again: its image stays its own */
    for (disk_img_t *d = p->disk, *next; d; d = next) {
        next = d->next;
        if (!strcmp(d->key, c->key) && d->pid == c->pid && !d->move) {
            if (d->lease && d->dropped)
                gs_swap_pools_return(p->pools, d->lease, now);
            img_remove(p, d);
        }
    }
}

/* ---- what users see ------------------------------------------------------------- */

const char *park_disk_progress(const gs_park_t *p, const psess_t *ps, char *buf, size_t len)
{
    if (!ps || ps->disk != DISK_READING)
        return NULL;
    uint64_t done = 0, total = 0;
    for (const disk_img_t *d = p->disk; d; d = d->next)
        if (!strcmp(d->session, ps->id)) {
            total += d->bytes;
            if (d->move)
                done += gs_disk_move_done_bytes(d->move);
        }
    snprintf(buf, len, "coming back from disk: %.1f of %.1f GiB", (double)done / (1 << 30),
             (double)total / (1 << 30));
    return buf;
}

json_t *park_disk_status(const gs_park_t *p)
{
    int sessions = 0;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        sessions += ps->disk == DISK_ON || ps->disk == DISK_READING;
    json_t *o = json_pack("{s:s, s:I, s:I, s:i}", "dir", p->cfg.disk_dir, "budget_bytes",
                          (json_int_t)p->cfg.disk_budget, "bytes", (json_int_t)p->disk_used,
                          "sessions", sessions);
    json_object_set_new(o, "idle_s", json_real((double)p->cfg.disk_idle_us / SEC));
    json_object_set_new(
        o, "on", json_boolean(p->cfg.disk_dir[0] && !strcmp(p->cfg.disk_dir, p->disk_dir_ok)));
    json_object_set_new(o, "error",
                        p->disk_dir_error[0] ? json_string(p->disk_dir_error) : json_null());
    return o;
}
