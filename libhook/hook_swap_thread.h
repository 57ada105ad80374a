/*
 * hook_swap_thread.h - what hook_swap.c asks of the swap thread
 * (hook_swap_thread.c) beyond hook_swap.h's commands.
 */
#ifndef GS_HOOK_SWAP_THREAD_H
#define GS_HOOK_SWAP_THREAD_H

/* In a forked child: the parent's queue, windows and thread do not exist
 * here; dropped without driver calls (the parent owns them). */
void hook_swap_thread_atfork_child(void);

#endif
