/*
 * disk_file.c - one parked memory image on disk (disk_file.h): a header
 * block (what it is, whose, and every segment's length and checksum),
 * then the segments at fixed offsets, each a pool chunk's room.
 */
#define _GNU_SOURCE
#include "disk_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC   "GSPARKD1"
#define VERSION 1u
/* A sanity bound for a header read back: 1M segments of 64 MiB is 64 TiB. */
#define MAX_SEGMENTS (1u << 20)

typedef struct {
    uint64_t length;
    uint64_t sum;
} seg_entry_t;

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    gs_disk_meta_t meta;
    uint64_t head_sum; /* over the whole header block with this field 0 */
} head_t;

struct gs_disk_file {
    int fd;
    int direct;
    int sealed;
    gs_disk_io_t io;
    gs_disk_meta_t meta;
    uint32_t header_bytes;
    seg_entry_t *segs; /* meta.segments entries */
    char path[4096];   /* the final name */
    char tmp[4096];    /* the name while it is written ("" once sealed or opened) */
};

static uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full

static uint64_t round64(uint64_t acc, uint64_t w)
{
    return rotl(acc + w * P2, 31) * P1;
}

uint64_t gs_disk_checksum(const void *buf, size_t bytes)
{
    const unsigned char *p = buf;
    uint64_t a = P1 + P2, b = P2, c = 0, d = 0 - P1;
    size_t i = 0;
    /* Four independent lanes keep the multiplier busy: each is a chain. */
    for (; i + 32 <= bytes; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, sizeof w);
        a = round64(a, w[0]);
        b = round64(b, w[1]);
        c = round64(c, w[2]);
        d = round64(d, w[3]);
    }
    uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + (uint64_t)bytes;
    for (; i < bytes; i++)
        h = round64(h, p[i]);
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    return h;
}

static ssize_t real_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

static ssize_t real_pread(int fd, void *buf, size_t n, off_t off)
{
    return pread(fd, buf, n, off);
}

static void set_io(gs_disk_file_t *f, const gs_disk_io_t *io)
{
    f->io.pwrite = io && io->pwrite ? io->pwrite : real_pwrite;
    f->io.pread = io && io->pread ? io->pread : real_pread;
    f->io.fdatasync = io && io->fdatasync ? io->fdatasync : fdatasync;
}

static uint32_t header_bytes_for(uint32_t segments)
{
    uint64_t n = sizeof(head_t) + (uint64_t)segments * sizeof(seg_entry_t);
    return (uint32_t)((n + GS_DISK_ALIGN - 1) / GS_DISK_ALIGN * GS_DISK_ALIGN);
}

static off_t seg_offset(const gs_disk_file_t *f, uint32_t seg)
{
    return (off_t)f->header_bytes + (off_t)seg * (off_t)f->meta.segment_bytes;
}

static void io_why(char *why, size_t len, const char *doing, const char *path, int err)
{
    if (err == ENOSPC || err == EDQUOT)
        snprintf(why, len, "disk full %s %s", doing, path);
    else
        snprintf(why, len, "%s %s: %s", doing, path, strerror(err ? err : EIO));
}

/* Writes or reads all of buf at off, in pieces; 0 or the errno. */
static int whole(gs_disk_file_t *f, int write_it, void *buf, uint64_t bytes, off_t off)
{
    uint64_t done = 0;
    while (done < bytes) {
        size_t n = bytes - done > (64u << 20) ? (64u << 20) : (size_t)(bytes - done);
        errno = 0;
        ssize_t r = write_it ? f->io.pwrite(f->fd, (const char *)buf + done, n, off + (off_t)done)
                             : f->io.pread(f->fd, (char *)buf + done, n, off + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 && errno ? errno : (write_it ? ENOSPC : EIO);
        done += (uint64_t)r;
    }
    return 0;
}

static void *aligned(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, GS_DISK_ALIGN, bytes) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static gs_disk_file_t *file_new(const gs_disk_meta_t *meta, const gs_disk_io_t *io)
{
    gs_disk_file_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = -1;
    f->meta = *meta;
    f->meta.session[sizeof f->meta.session - 1] = '\0';
    f->header_bytes = header_bytes_for(meta->segments);
    f->segs = calloc(meta->segments ? meta->segments : 1, sizeof *f->segs);
    if (!f->segs) {
        free(f);
        return NULL;
    }
    set_io(f, io);
    return f;
}

static void file_free(gs_disk_file_t *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->segs);
    free(f);
}

/* Opens with O_DIRECT where the file system takes it (tmpfs does not). */
static int open_file(const char *path, int flags, int *direct)
{
    int fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0600);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL)
        fd = open(path, flags | O_CLOEXEC, 0600);
    return fd;
}

gs_disk_file_t *gs_disk_file_create(const char *dir, const gs_disk_meta_t *meta,
                                    const gs_disk_io_t *io, char *why, size_t whylen)
{
    if (!meta->segments || meta->segments > MAX_SEGMENTS || !meta->segment_bytes ||
        meta->segment_bytes % GS_DISK_ALIGN) {
        snprintf(why, whylen, "disk image: %u segments of %llu bytes is not a valid layout",
                 meta->segments, (unsigned long long)meta->segment_bytes);
        return NULL;
    }
    gs_disk_file_t *f = file_new(meta, io);
    if (!f) {
        snprintf(why, whylen, "disk image: out of memory");
        return NULL;
    }
    /* The name says whose process and GPU, never the session's own text
     * (a user's string has no place in a path); a clash is retried. */
    static unsigned serial;
    for (int attempt = 0; attempt < 100 && f->fd < 0; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int n = snprintf(f->path, sizeof f->path, "%s/p%d-g%d-l%llu-%lx%04x%s", dir, meta->pid,
                         meta->gpu, (unsigned long long)meta->lease, (long)ts.tv_sec,
                         (serial++ ^ (unsigned)ts.tv_nsec) & 0xffff, GS_DISK_SUFFIX);
        if (n < 0 || (size_t)n + 5 >= sizeof f->path) {
            snprintf(why, whylen, "disk image: the directory's path is too long: %s", dir);
            file_free(f);
            return NULL;
        }
        snprintf(f->tmp, sizeof f->tmp, "%.*s%s", n - (int)strlen(GS_DISK_SUFFIX), f->path,
                 GS_DISK_TMP_SUFFIX);
        f->fd = open_file(f->tmp, O_RDWR | O_CREAT | O_EXCL, &f->direct);
        if (f->fd < 0 && errno != EEXIST) {
            io_why(why, whylen, "creating", f->tmp, errno);
            file_free(f);
            return NULL;
        }
    }
    if (f->fd < 0) {
        snprintf(why, whylen, "disk image: no free name in %s", dir);
        file_free(f);
        return NULL;
    }
    /* umask may only narrow it; a broker's umask of 0 must not widen it. */
    if (fchmod(f->fd, 0600) != 0) {
        io_why(why, whylen, "setting the mode of", f->tmp, errno);
        gs_disk_file_remove(&f);
        return NULL;
    }
    return f;
}

static int check_buffer(const gs_disk_file_t *f, uint32_t seg, const void *buf, uint64_t bytes,
                        char *why, size_t whylen)
{
    if (seg >= f->meta.segments) {
        snprintf(why, whylen, "disk image %s has no segment %u (of %u)", f->path, seg,
                 f->meta.segments);
        return -1;
    }
    if (bytes > f->meta.segment_bytes || bytes % GS_DISK_ALIGN ||
        (f->direct && (uintptr_t)buf % GS_DISK_ALIGN)) {
        snprintf(why, whylen,
                 "disk image %s: segment %u of %llu bytes at %p is not aligned to %u or too long",
                 f->path, seg, (unsigned long long)bytes, buf, GS_DISK_ALIGN);
        return -1;
    }
    return 0;
}

int gs_disk_file_write(gs_disk_file_t *self, uint32_t seg, const void *buf, uint64_t bytes,
                       char *why, size_t whylen)
{
    if (gs_disk_file_write_raw(self, seg, buf, bytes, why, whylen) != 0)
        return -1;
    gs_disk_file_set_sum(self, seg, gs_disk_checksum(buf, bytes));
    return 0;
}

void gs_disk_file_set_sum(gs_disk_file_t *self, uint32_t seg, uint64_t sum)
{
    if (seg < self->meta.segments)
        self->segs[seg].sum = sum;
}

int gs_disk_file_write_raw(gs_disk_file_t *self, uint32_t seg, const void *buf, uint64_t bytes,
                           char *why, size_t whylen)
{
    if (self->sealed) {
        snprintf(why, whylen, "disk image %s is sealed", self->path);
        return -1;
    }
    if (check_buffer(self, seg, buf, bytes, why, whylen) != 0)
        return -1;
    int err = whole(self, 1, (void *)buf, bytes, seg_offset(self, seg));
    if (err) {
        io_why(why, whylen, "writing", self->tmp, err);
        return -1;
    }
    self->segs[seg].length = bytes;
    return 0;
}

static void *header_block(const gs_disk_file_t *f)
{
    unsigned char *block = aligned(f->header_bytes);
    if (!block)
        return NULL;
    head_t h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, sizeof h.magic);
    h.version = VERSION;
    h.header_bytes = f->header_bytes;
    h.meta = f->meta;
    memcpy(block, &h, sizeof h);
    memcpy(block + sizeof h, f->segs, (size_t)f->meta.segments * sizeof *f->segs);
    h.head_sum = gs_disk_checksum(block, f->header_bytes);
    memcpy(block, &h, sizeof h);
    return block;
}

int gs_disk_file_seal(gs_disk_file_t *self, char *why, size_t whylen)
{
    for (uint32_t s = 0; s < self->meta.segments; s++)
        if (!self->segs[s].length) {
            snprintf(why, whylen, "disk image %s: segment %u was never written", self->tmp, s);
            return -1;
        }
    void *block = header_block(self);
    if (!block) {
        snprintf(why, whylen, "disk image: out of memory");
        return -1;
    }
    int err = whole(self, 1, block, self->header_bytes, 0);
    free(block);
    if (!err && self->io.fdatasync(self->fd) != 0)
        err = errno ? errno : EIO;
    if (err) {
        io_why(why, whylen, "writing", self->tmp, err);
        return -1;
    }
    /* The directory is not synced: an image only matters while its process
     * lives, and a machine that lost power has lost the process too. */
    if (rename(self->tmp, self->path) != 0) {
        io_why(why, whylen, "renaming", self->tmp, errno);
        return -1;
    }
    self->tmp[0] = '\0';
    self->sealed = 1;
    return 0;
}

/* What is wrong with a header read back, or NULL. */
static const char *bad_header(const head_t *h, uint64_t file_bytes)
{
    if (memcmp(h->magic, MAGIC, sizeof h->magic) != 0)
        return "not a gpushare disk image";
    if (h->version != VERSION)
        return "written by another version of gpushare";
    if (!h->meta.segments || h->meta.segments > MAX_SEGMENTS || !h->meta.segment_bytes ||
        h->meta.segment_bytes % GS_DISK_ALIGN)
        return "its layout is not valid";
    if (h->header_bytes != header_bytes_for(h->meta.segments) || h->header_bytes > file_bytes)
        return "its header is cut short";
    if (!memchr(h->meta.session, '\0', sizeof h->meta.session))
        return "its session name is not terminated";
    return NULL;
}

gs_disk_file_t *gs_disk_file_open(const char *path, const gs_disk_io_t *io, char *why,
                                  size_t whylen)
{
    gs_disk_meta_t none;
    memset(&none, 0, sizeof none);
    none.segments = 1;
    none.segment_bytes = GS_DISK_ALIGN;
    gs_disk_file_t *f = file_new(&none, io);
    if (!f) {
        snprintf(why, whylen, "disk image: out of memory");
        return NULL;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open_file(path, O_RDWR | O_NOFOLLOW, &f->direct);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        io_why(why, whylen, "opening", path, errno);
        file_free(f);
        return NULL;
    }
    const char *bad = NULL;
    head_t *h = aligned(GS_DISK_ALIGN);
    if (!h || st.st_size < (off_t)GS_DISK_ALIGN || whole(f, 0, h, GS_DISK_ALIGN, 0) != 0)
        bad = "its header cannot be read";
    else
        bad = bad_header(h, (uint64_t)st.st_size);
    unsigned char *block = NULL;
    if (!bad) {
        block = aligned(h->header_bytes);
        if (!block || whole(f, 0, block, h->header_bytes, 0) != 0)
            bad = "its header cannot be read";
    }
    if (!bad) {
        head_t copy;
        memcpy(&copy, block, sizeof copy);
        uint64_t sum = copy.head_sum;
        copy.head_sum = 0;
        memcpy(block, &copy, sizeof copy);
        if (gs_disk_checksum(block, copy.header_bytes) != sum)
            bad = "its header's checksum does not match";
    }
    if (!bad) {
        seg_entry_t *segs = calloc(h->meta.segments, sizeof *segs);
        if (!segs)
            bad = "out of memory";
        else {
            free(f->segs);
            f->segs = segs;
            f->meta = h->meta;
            f->header_bytes = h->header_bytes;
            memcpy(f->segs, block + sizeof(head_t), (size_t)f->meta.segments * sizeof *f->segs);
            for (uint32_t s = 0; s < f->meta.segments && !bad; s++)
                if (f->segs[s].length > f->meta.segment_bytes ||
                    f->segs[s].length % GS_DISK_ALIGN ||
                    (uint64_t)seg_offset(f, s) + f->segs[s].length > (uint64_t)st.st_size)
                    bad = "a segment lies beyond its end";
        }
    }
    free(h);
    free(block);
    if (bad) {
        snprintf(why, whylen, "disk image %s: %s", path, bad);
        file_free(f);
        return NULL;
    }
    f->sealed = 1;
    return f;
}

int gs_disk_file_read_raw(gs_disk_file_t *self, uint32_t seg, void *buf, uint64_t cap,
                          uint64_t *bytes, char *why, size_t whylen)
{
    if (!self->sealed) {
        snprintf(why, whylen, "disk image %s is not sealed yet", self->tmp);
        return -1;
    }
    uint64_t len = seg < self->meta.segments ? self->segs[seg].length : 0;
    if (check_buffer(self, seg, buf, len, why, whylen) != 0)
        return -1;
    if (len > cap) {
        snprintf(why, whylen, "disk image %s: segment %u needs %llu bytes, the buffer has %llu",
                 self->path, seg, (unsigned long long)len, (unsigned long long)cap);
        return -1;
    }
    int err = whole(self, 0, buf, len, seg_offset(self, seg));
    if (err) {
        io_why(why, whylen, "reading", self->path, err);
        return -1;
    }
    *bytes = len;
    return 0;
}

int gs_disk_file_verify(const gs_disk_file_t *self, uint32_t seg, const void *buf, uint64_t bytes,
                        char *why, size_t whylen)
{
    if (seg >= self->meta.segments || bytes != self->segs[seg].length ||
        gs_disk_checksum(buf, bytes) != self->segs[seg].sum) {
        snprintf(why, whylen, "checksum mismatch in segment %u of %s's image %s", seg,
                 self->meta.session, self->path);
        return -1;
    }
    return 0;
}

int gs_disk_file_read(gs_disk_file_t *self, uint32_t seg, void *buf, uint64_t cap, uint64_t *bytes,
                      char *why, size_t whylen)
{
    if (gs_disk_file_read_raw(self, seg, buf, cap, bytes, why, whylen) != 0)
        return -1;
    return gs_disk_file_verify(self, seg, buf, *bytes, why, whylen);
}

const gs_disk_meta_t *gs_disk_file_meta(const gs_disk_file_t *self)
{
    return &self->meta;
}

const char *gs_disk_file_path(const gs_disk_file_t *self)
{
    return self->sealed ? self->path : self->tmp;
}

uint64_t gs_disk_file_segment_length(const gs_disk_file_t *self, uint32_t seg)
{
    return seg < self->meta.segments ? self->segs[seg].length : 0;
}

uint64_t gs_disk_file_size(const gs_disk_file_t *self)
{
    uint64_t n = self->header_bytes;
    for (uint32_t s = 0; s < self->meta.segments; s++)
        n += self->segs[s].length;
    return n;
}

int gs_disk_file_direct(const gs_disk_file_t *self)
{
    return self->direct;
}

void gs_disk_file_close(gs_disk_file_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    file_free(*self_p);
    *self_p = NULL;
}

int gs_disk_file_remove(gs_disk_file_t **self_p)
{
    if (!self_p || !*self_p)
        return 0;
    gs_disk_file_t *f = *self_p;
    const char *path = f->sealed ? f->path : f->tmp;
    int rc = unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    file_free(f);
    *self_p = NULL;
    return rc;
}

/* ---- removal off the caller's thread --------------------------------------- */

static pthread_mutex_t removals_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t removals_cv = PTHREAD_COND_INITIALIZER;
static int removals; /* under way */

static void *remove_main(void *arg)
{
    gs_disk_file_t *f = arg;
    gs_disk_file_remove(&f);
    pthread_mutex_lock(&removals_mu);
    removals--;
    pthread_cond_broadcast(&removals_cv);
    pthread_mutex_unlock(&removals_mu);
    return NULL;
}

void gs_disk_file_remove_later(gs_disk_file_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gs_disk_file_t *f = *self_p;
    *self_p = NULL;
    pthread_attr_t attr;
    pthread_t t;
    int started = 0;
    pthread_mutex_lock(&removals_mu);
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &attr, remove_main, f) == 0;
        pthread_attr_destroy(&attr);
    }
    removals += started;
    pthread_mutex_unlock(&removals_mu);
    if (!started)
        gs_disk_file_remove(&f);
}

int gs_disk_file_removals_wait(unsigned timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&removals_mu);
    while (removals > 0 && pthread_cond_timedwait(&removals_cv, &removals_mu, &until) != ETIMEDOUT)
        ;
    int left = removals;
    pthread_mutex_unlock(&removals_mu);
    return left;
}
