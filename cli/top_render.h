/*
 * top_render.h - one frame of `gpushare top` from the broker's status
 * object: no I/O but the FILE it writes to, so that what a screen shows is
 * decided in one place.
 */
#ifndef GS_TOP_RENDER_H
#define GS_TOP_RENDER_H

#include <jansson.h>
#include <stdio.h>

typedef struct {
    const json_t *status; /* the status object now (NULL: no broker) */
    const json_t *prev;   /* the one of the frame before, or NULL */
    double interval_s;    /* seconds between prev and status (monotonic) */
    const char *problem;  /* why there is no status (status NULL) */
    const char *endpoint; /* where the broker was asked */
    const char *clock;    /* the wall-clock time to show, "HH:MM:SS" */
    int width;            /* columns; lines are cut to it (0: no limit) */
    int height;           /* lines; the last says how many were left out (0: no limit) */
    int interactive;      /* the header says how to quit */
} gs_top_frame_t;

/* Writes the frame's lines, each ending in '\n'. */
void gs_top_render(FILE *out, const gs_top_frame_t *frame);

/* The share of the last interval a session held the GPU, in percent, from
 * its gpu_time_s in the two status objects; without an earlier sample,
 * the broker's own window (share.used).  Exposed for its tests. */
double gs_top_gpu_percent(const json_t *session, const json_t *prev_session, double interval_s);

#endif
