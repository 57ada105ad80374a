/*
 * hook_capture.h - stream captures in progress: while one is, the hook
 * synchronises nothing, and captured work needs no grant.
 */
#ifndef GS_HOOK_CAPTURE_H
#define GS_HOOK_CAPTURE_H

#include "hook_cuda.h"
#include "hook_thread.h"

#include <stdatomic.h>

extern _Atomic int hook_capture_count; /* stream captures in progress */
extern _Atomic int hook_capture_want;  /* threads waiting to begin a capture */

/* A stream capture is in progress or about to begin: the burst monitor
 * calls the driver only while none is (a capture in global mode is
 * invalidated by calls such as cuEventQuery from any thread). */
static inline int hook_capture_wanted(void)
{
    return atomic_load(&hook_capture_count) > 0 || atomic_load(&hook_capture_want) > 0;
}

struct hook_capture;
/* Before the real BeginCapture on stream s (normalised): waits until no
 * drain or burst probe is calling the driver, then counts the capture as
 * begun.  Returns what hook_capture_begun() needs. */
struct hook_capture *hook_capture_begin(struct hook_thr *t, CUstream s);
/* After it: a failed BeginCapture uncounts the capture. */
void hook_capture_begun(struct hook_thr *t, struct hook_capture *c, CUresult r);
/* After the real EndCapture on s, whatever it returned. */
void hook_capture_end(struct hook_thr *t, CUstream s);
/* A stream destroyed while capturing takes its capture with it. */
void hook_capture_forget_stream(CUstream s);
void hook_capture_atfork_child(void);

#endif
