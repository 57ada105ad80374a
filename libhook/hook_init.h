/*
 * hook_init.h - lazy initialisation.  Every entry point calls hook_init()
 * before it needs the real driver or the settings: one acquire load once
 * the hook is initialised.
 */
#ifndef GS_HOOK_INIT_H
#define GS_HOOK_INIT_H

#include <stdatomic.h>

extern _Atomic int hook_init_done;

/* Finds the real driver and reads the environment (pthread_once); touches
 * no CUDA state. */
void hook_init_once(void);

/* Idempotent, thread-safe, cheap after the first call. */
static inline void hook_init(void)
{
    if (__builtin_expect(!atomic_load_explicit(&hook_init_done, memory_order_acquire), 0))
        hook_init_once();
}

#endif
