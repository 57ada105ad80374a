/*
 * disk_file.h - one parked memory image on disk, the disk tier's unit
 * (doc/parking.md, "the disk tier"): the segments a parked session's hooks
 * had copied into pool chunks, written to a file of the broker's so that
 * the chunks can go back to the pool, and read back, each segment checked
 * against the checksum written with it.
 *
 * The file is written under a temporary name and renamed when sealed, so a
 * broker that dies mid-write leaves only a temporary file (disk_dir.c
 * removes it) and a sealed file is always whole.  Its header names the
 * session, user, process (pid and start time, for adoption by the next
 * broker) and GPU, and holds every segment's length and checksum.
 *
 * I/O is O_DIRECT where the file system allows it (the data is read once,
 * much later: caching it would only push the notebooks' own memory out);
 * then buffers, lengths and offsets are multiples of GS_DISK_ALIGN.  The
 * calls go through a table that tests replace to inject ENOSPC or EIO.
 */
#ifndef GS_DISK_FILE_H
#define GS_DISK_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Buffers, segment lengths and offsets are multiples of this. */
#define GS_DISK_ALIGN 4096u
/* What a sealed file's name ends with, and a file being written. */
#define GS_DISK_SUFFIX     ".gspark"
#define GS_DISK_TMP_SUFFIX ".gspark.tmp"

typedef struct {
    char session[256];      /* the session's id */
    uint32_t uid;           /* its user */
    int32_t pid;            /* the process whose memory this is */
    uint64_t proc_start;    /* that process' start time (gs_proc_start), 0: unknown */
    int32_t gpu;            /* the GPU it was parked from */
    uint32_t segments;      /* how many segments */
    uint64_t segment_bytes; /* the room each segment has (a pool chunk) */
    uint64_t lease;         /* the pool lease it came from, for the broker's records */
} gs_disk_meta_t;

/* The system calls, replaceable (NULL: the real ones). */
typedef struct {
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    int (*fdatasync)(int fd);
} gs_disk_io_t;

typedef struct gs_disk_file gs_disk_file_t;

/* A new file in dir (mode 0600, O_EXCL) for meta's segments, or NULL with
 * why set.  Nothing is visible under the final name until it is sealed. */
gs_disk_file_t *gs_disk_file_create(const char *dir, const gs_disk_meta_t *meta,
                                    const gs_disk_io_t *io, char *why, size_t whylen);
/* Writes segment seg (bytes <= segment_bytes, a multiple of GS_DISK_ALIGN,
 * buf aligned to it) and notes its checksum.  0, or -1 with why set
 * ("disk full", the file's path and the system's words). */
int gs_disk_file_write(gs_disk_file_t *self, uint32_t seg, const void *buf, uint64_t bytes,
                       char *why, size_t whylen);
/* The two halves, for a writer that sums a segment while it writes it:
 * gs_disk_file_write_raw writes without summing, gs_disk_file_set_sum
 * notes the segment's checksum (gs_disk_checksum of what was written). */
int gs_disk_file_write_raw(gs_disk_file_t *self, uint32_t seg, const void *buf, uint64_t bytes,
                           char *why, size_t whylen);
void gs_disk_file_set_sum(gs_disk_file_t *self, uint32_t seg, uint64_t sum);
/* Writes the header, syncs and renames the file to its final name.  Every
 * segment must have been written.  0, or -1 with why set; then the caller
 * removes it (gs_disk_file_remove): a half image is worth nothing. */
int gs_disk_file_seal(gs_disk_file_t *self, char *why, size_t whylen);

/* Opens a sealed file and checks its header, or NULL with why set (naming
 * the file and what is wrong with it). */
gs_disk_file_t *gs_disk_file_open(const char *path, const gs_disk_io_t *io, char *why,
                                  size_t whylen);
/* Reads segment seg into buf (at least its length, aligned) and checks it
 * against its checksum; its length in *bytes.  0, or -1 with why set: a
 * mismatch says "checksum mismatch in segment N of SESSION's image PATH".
 * The two halves, for a reader that checks one segment while it reads the
 * next: gs_disk_file_read_raw reads without checking, gs_disk_file_verify
 * checks what it read. */
int gs_disk_file_read_raw(gs_disk_file_t *self, uint32_t seg, void *buf, uint64_t cap,
                          uint64_t *bytes, char *why, size_t whylen);
int gs_disk_file_verify(const gs_disk_file_t *self, uint32_t seg, const void *buf, uint64_t bytes,
                        char *why, size_t whylen);
int gs_disk_file_read(gs_disk_file_t *self, uint32_t seg, void *buf, uint64_t cap, uint64_t *bytes,
                      char *why, size_t whylen);

/* Borrowed: valid until the file is closed. */
const gs_disk_meta_t *gs_disk_file_meta(const gs_disk_file_t *self);
const char *gs_disk_file_path(const gs_disk_file_t *self);
/* The length of segment seg as written (0 before). */
uint64_t gs_disk_file_segment_length(const gs_disk_file_t *self, uint32_t seg);
/* The bytes the file takes on disk (header and every segment written). */
uint64_t gs_disk_file_size(const gs_disk_file_t *self);
/* 1 when the file is read and written with O_DIRECT. */
int gs_disk_file_direct(const gs_disk_file_t *self);

/* Closes the file and keeps it on disk. */
void gs_disk_file_close(gs_disk_file_t **self_p);
/* Closes the file and removes it (sealed or not).  0, or -1 when unlink
 * failed for another reason than its being gone already. */
int gs_disk_file_remove(gs_disk_file_t **self_p);
/* The same on a thread of its own, for the broker's loop: unlinking an
 * image of gigabytes takes seconds while the disk writes another (4 GiB:
 * 2.3 s on the build machine; on the H100 machine the broker missed every
 * client's heartbeats at each read back and dropped them all).  In place
 * when no thread can be started. */
void gs_disk_file_remove_later(gs_disk_file_t **self_p);
/* Waits up to timeout_ms for the removals started by
 * gs_disk_file_remove_later (at exit: no image left behind by one).  The
 * number still under way. */
int gs_disk_file_removals_wait(unsigned timeout_ms);

/* The checksum of a segment (64 bits, four lanes: several GB/s on one
 * core, so that it keeps up with the disk). */
uint64_t gs_disk_checksum(const void *buf, size_t bytes);

#endif
