/*
 * hook_clock.h - the one clock of the hook: CLOCK_MONOTONIC in
 * nanoseconds, which is also the clock of the broker's and the simulated
 * driver's logs.
 */
#ifndef GS_HOOK_CLOCK_H
#define GS_HOOK_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t hook_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#endif
