/*
 * gs_assert.h - invariants the code states, checked in debug and sanitizer
 * builds (configure --enable-assertions; check.sh and CI build that way)
 * and compiled out of release builds, where the hot paths stay as measured.
 *
 *   GS_ASSERT(expr)        the expression holds
 *   GS_ASSERT_HELD(mutex)  the calling code holds this pthread mutex (the
 *                          `_locked` functions); checked as "someone holds
 *                          it", which catches the usual mistake, a call
 *                          without the lock, at the price of a trylock
 *
 * A failed assertion prints where and what, then aborts: a broken
 * invariant must not run on and corrupt a notebook's state.  No side
 * effects in the expression: release builds do not evaluate it.
 */
#ifndef GS_ASSERT_H
#define GS_ASSERT_H

#ifdef GS_ASSERTIONS
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define GS_ASSERT(expr) ((expr) ? (void)0 : gs_assert_fail_(__FILE__, __LINE__, __func__, #expr))

#define GS_ASSERT_HELD(mutex)                                                                      \
    do {                                                                                           \
        pthread_mutex_t *gs_m_ = (mutex);                                                          \
        int gs_r_ = pthread_mutex_trylock(gs_m_);                                                  \
        if (gs_r_ == 0) {                                                                          \
            pthread_mutex_unlock(gs_m_);                                                           \
            gs_assert_fail_(__FILE__, __LINE__, __func__, "mutex " #mutex " is held");             \
        }                                                                                          \
    } while (0)

static inline void gs_assert_fail_(const char *file, int line, const char *func, const char *what)
{
    fprintf(stderr, "gpushare: assertion failed at %s:%d (%s): %s\n", file, line, func, what);
    fflush(stderr);
    abort();
}
#else
#define GS_ASSERT(expr)       ((void)0)
#define GS_ASSERT_HELD(mutex) ((void)0)
#endif

#endif
