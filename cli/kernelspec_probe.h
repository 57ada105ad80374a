/*
 * kernelspec_probe.h - what the kernelspec commands ask of a python: can
 * its jupyter_client load the gpushare provisioner, where are its Jupyter
 * kernel directories.  Asked by running that python (without a shell), in
 * this process's environment, as the notebook server would see it.
 */
#ifndef GS_KERNELSPEC_PROBE_H
#define GS_KERNELSPEC_PROBE_H

#include <stddef.h>

/* 1 when python's jupyter_client (7 or newer) finds the entry point
 * "gpushare-provisioner" and can import it; else 0 with the reason in why. */
int gs_ks_provisioner_loadable(const char *python, char *why, size_t whylen);

/* The directory holding gpushare_ipython that an install beside launcher
 * (PREFIX/bin/gpushare-launch) put under PREFIX, when python does not
 * search it by itself (-E -s: nobody's PYTHONPATH or user site): 0 with it
 * in out; -1 when there is none or python finds it anyway. */
int gs_ks_extension_dir(const char *python, const char *launcher, char *out, size_t outlen);

/* Runs python -c code; its stdout (and, with with_stderr, its stderr) into
 * out.  Returns its exit status, or -1 when it could not be run. */
int gs_ks_python(const char *python, const char *code, int with_stderr, char *out, size_t outlen);

#endif
