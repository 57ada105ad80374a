/*
 * size.h - byte counts as people write them: "512", "64K", "16G", "1.5T".
 */
#ifndef GS_SIZE_H
#define GS_SIZE_H

#include <stdint.h>

/* Binary units (K = 1024).  Returns 0, or -1 for empty, negative, junk or
 * overflowing input. */
int gs_size_parse(const char *text, uint64_t *bytes);

#endif
