/*
 * hook_fixture.h - what the tests of the preloaded hook on the simulated
 * driver share (test_hook_swap.c, test_hook_ipc.c): the environment the
 * hook reads at its first CUDA call, memory filled with a pattern and
 * checked, and an exporter handing an IPC handle to an importer.
 */
#ifndef GS_HOOK_FIXTURE_H
#define GS_HOOK_FIXTURE_H

#include <stddef.h>

#include "simtest.h"

/* The hook on, the swap tier on, no broker (it fails open): called in
 * main, before the first CUDA call, when the hook reads its settings. */
void hook_fixture_env(void);

/* size bytes at p filled with the pattern of seed (byte i: i * 11 + seed). */
void hook_fixture_fill(CUdeviceptr p, size_t size, unsigned seed);
/* Whether size bytes at p hold seed's pattern. */
int hook_fixture_holds(CUdeviceptr p, size_t size, unsigned seed);

/* On a fresh 256M simulated GPU: exporter sends handle_bytes of handles,
 * which go to importer; what importer then sends (a u64) goes back to
 * exporter, which may end then; both are joined. */
void hook_fixture_relay(simchild_fn exporter, simchild_fn importer, size_t handle_bytes);

#endif
