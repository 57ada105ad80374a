/*
 * disk_dir.h - the disk tier's directory (park_disk_dir): checked before
 * the broker writes a byte there, and read at start for the images a
 * broker that died left behind (doc/parking.md, "the disk tier").
 *
 * The directory holds other users' GPU memory, so it must be the broker's
 * own: a directory (not a symlink to one), owned by the broker's user, and
 * writable by nobody else; an absent one is made with mode 0700.
 */
#ifndef GS_DISK_DIR_H
#define GS_DISK_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "disk_file.h"

/* Makes dir (0700) if it is absent, and checks it as above.  0, or -1 with
 * why set ("park_disk_dir /x is writable by others (mode 0777)"). */
int gs_disk_dir_check(const char *dir, char *why, size_t whylen);

/* A sealed image found by a scan; the callee owns f (keeps it, or closes
 * or removes it). */
typedef void (*gs_disk_dir_found_fn)(void *arg, gs_disk_file_t *f);
/* A file the scan removed, and why (a half-written temporary file, an
 * image that does not read back). */
typedef void (*gs_disk_dir_dropped_fn)(void *arg, const char *path, const char *why);

/* Every image in dir: sealed ones are passed to found, temporary ones (a
 * broker died writing them) and broken ones are removed and passed to
 * dropped (which may be NULL).  Files of other names are left alone.  The
 * count of images found, or -1 with why set. */
int gs_disk_dir_scan(const char *dir, const gs_disk_io_t *io, gs_disk_dir_found_fn found,
                     gs_disk_dir_dropped_fn dropped, void *arg, char *why, size_t whylen);

/* The bytes the broker may still write on dir's file system (statvfs's
 * f_bavail); 0, or -1 with why set. */
int gs_disk_dir_free(const char *dir, uint64_t *bytes, char *why, size_t whylen);

#endif
