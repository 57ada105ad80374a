/*
 * hook_client_swap.h - the swap tier's commands inside the broker client
 * (hook_client_swap.c); on the I/O thread, hook_gate_mu not held.
 */
#ifndef GS_HOOK_CLIENT_SWAP_H
#define GS_HOOK_CLIENT_SWAP_H

#include <jansson.h>

/* A swap_out (out 1) or swap_in from the broker: handed to the swap
 * thread, or refused with a `swapped` report that says why. */
void hook_client_swap_on_command(const json_t *m, int out);
/* Without a broker: memory in host memory comes back by itself. */
void hook_client_swap_recover(void);

#endif
