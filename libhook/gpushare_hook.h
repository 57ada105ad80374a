/*
 * gpushare_hook.h - what libgpushare-hook.so exports besides the CUDA driver
 * ABI names and dlsym: introspection for tests and tools.  Programs find
 * these with dlsym(RTLD_DEFAULT, ...) since the hook is preloaded, not
 * linked.
 */
#ifndef GPUSHARE_HOOK_H
#define GPUSHARE_HOOK_H

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
 * (no broker, or GPUSHARE_DISABLE). */
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

#ifdef __cplusplus
}
#endif

#endif
