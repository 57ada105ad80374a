/*
 * hook.c - libgpushare-hook.so, the LD_PRELOAD library of every Shared GPU
 * kernel.
 *
 * Foundation stage: the library builds, loads into any program and does
 * nothing, so the launcher and kernelspec can be exercised end to end.  It
 * deliberately does no work at load time (no constructor touching CUDA):
 * a preloaded library runs inside programs that may never use a GPU.
 * Interposition, the gate and memory accounting arrive with the hook issue.
 */
#include "config.h"

__attribute__((visibility("default"))) const char gpushare_hook_version[] = PACKAGE_VERSION;
