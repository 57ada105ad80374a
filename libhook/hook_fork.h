/*
 * hook_fork.h - fork safety: pthread_atfork handlers over every module
 * that holds a lock or state a child must not inherit.
 */
#ifndef GS_HOOK_FORK_H
#define GS_HOOK_FORK_H

/* Once, from hook_init. */
void hook_fork_register(void);

#endif
