/*
 * clock.h - the broker's clock: CLOCK_MONOTONIC in microseconds.
 *
 * The scheduler and parking have no clock of their own (tests drive them on
 * a virtual one); the broker reads this one and hands them the time with
 * every event.
 */
#ifndef GS_CLOCK_H
#define GS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t gs_clock_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
