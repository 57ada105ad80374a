/*
 * gpushare_hook.h - what libgpushare-hook.so exports besides the CUDA driver
 * ABI names and dlsym: introspection for tests and tools.  Programs find
 * these with dlsym(RTLD_DEFAULT, ...) since the hook is preloaded, not
 * linked.
 */
#ifndef GPUSHARE_HOOK_H
#define GPUSHARE_HOOK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The package version of the hook. */
extern const char gpushare_hook_version[];

/* Calls the hook's wrapper of the ABI entry point `name` has seen (all
 * threads); -1 when the hook does not interpose `name`. */
long long gpushare_hook_calls(const char *name);

/* Kernel launches (every cuLaunch* ABI variant) the hook has seen. */
long long gpushare_hook_launch_count(void);

/* The real driver's address of an interposed ABI name; NULL when the
 * driver lacks it or the hook does not interpose it. */
void *gpushare_hook_real(const char *name);

/* The gate: 0 closed (waiting for a grant), 1 open (granted), 2 ungated
 * (no broker, or GPUSHARE_DISABLE), 3 bypassed (gpushare_hook_passthrough). */
int gpushare_hook_gate(void);

/* Device dev's memory footprint as the hook counts it (bytes): used,
 * of which managed, and the peak.  0, or -1 for a bad device. */
int gpushare_hook_memory(int dev, unsigned long long *used, unsigned long long *managed,
                         unsigned long long *peak);

/* Device dev's recent kernel bursts (what acquire reports): the 90th
 * percentile and the last, in us.  0; -1 when none was measured; 1 while a
 * burst is under way or still being measured (statistics so far, if any). */
int gpushare_hook_bursts(int dev, long long *p90_us, long long *last_us);

/* The swap tier's backing of new allocations on (1) or off (0), for an
 * in-process A/B of its cost (bench/swap_ab.py); returns the previous
 * setting, or -1 when the tier is unavailable.  Memory already allocated
 * keeps what it had. */
int gpushare_hook_swap_backing(int on);

/* What the process waits for now, as one JSON object written into buf
 * like snprintf (returns the whole text's length; buf holds all of it when
 * that is below len; -1 on failure).  For the notebook's wait line:
 *   {"waiting": bool, "broker": bool, "quiet": bool, "devices": [
 *     {"gpu": 0, "uuid": "GPU-...", "state": "none|gpu|swap_in|parked|room",
 *      "for_s": 2.5,            (seconds this wait has lasted; not with none)
 *      "holder": "alice's notebook train.ipynb", "info": "held by ...",
 *      "left_s": 9.5,           (gpu: the holder's slice ends within; absent:
 *                                until its cell ends or unknown)
 *      "done_bytes": 1, "total_bytes": 2,  (swap_in: memory coming back)
 *      "room_bytes": 3,         (room: the allocation the broker makes room for)
 *      "waited_s": 7.5, "waits": 3}]}      (the waits that ended, together)
 * gpu: waiting for a grant (another notebook holds the GPU); swap_in: its
 * memory comes back from host memory; parked: its memory is in host memory
 * and waits to come back; room: the GPU is full and the broker makes room.
 * Only GPUs the process has used are listed. */
int gpushare_hook_wait_state(char *buf, size_t len);

/* 1 (the default): a wait longer than a second prints one line on stderr;
 * 0: someone else shows the waits (the notebook's wait line).  Returns the
 * previous setting. */
int gpushare_hook_wait_notices(int on);

/* Gives every grant the process holds back now, as an idle release does
 * (its next work asks again).  Returns how many GPUs it gives back. */
int gpushare_hook_release(void);

/* 1: every submission goes past the gate and the burst measurement, and is
 * not counted (gpushare_hook_calls); 0 (the default): through them.  For
 * benchmarks only (bench/eval's in-process A/B of the hook's cost): while
 * on, this process' work is not gated, so it may run while another
 * notebook holds the GPU, and a revoke does not wait for it; while its
 * memory is parked the gate holds as usual.  Memory is accounted either
 * way.  It is a state of the gate word, so the launch path still loads one
 * word.  Returns the previous setting. */
int gpushare_hook_passthrough(int on);

#ifdef __cplusplus
}
#endif

#endif
