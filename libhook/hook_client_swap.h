/*
 * hook_client_swap.h - the swap tier's commands inside the broker client
 * (hook_client_swap.c); on the I/O thread, hook_gate_mu not held.
 */
#ifndef GS_HOOK_CLIENT_SWAP_H
#define GS_HOOK_CLIENT_SWAP_H

#include <jansson.h>

/* A swap_out, swap_in or swap_drop from the broker (out: HOOK_SWAP_OUT,
 * _IN or _DROP, hook_swap.h): handed to the swap thread, or refused with a
 * `swapped` report that says why. */
void hook_client_swap_on_command(const json_t *m, int out);
/* Without a broker: memory in host memory comes back by itself. */
void hook_client_swap_recover(void);

#endif
