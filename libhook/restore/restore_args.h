/*
 * restore_args.h - gpushare-restore's command line: which process to bring
 * back, named by pid and start time so that a reused pid is never touched.
 */
#ifndef GS_RESTORE_ARGS_H
#define GS_RESTORE_ARGS_H

#include <stddef.h>

#define GS_RESTORE_MAX_GPUS 16

typedef struct {
    int pid;                  /* --pid PID */
    unsigned long long start; /* --start TICKS: /proc/PID/stat field 22 */
    int help;                 /* --help: print the usage, nothing else */
    /* --gpu UUID=BYTES, once per GPU: the memory the process held there,
     * which must be free before a restore is tried */
    int ngpus;
    struct {
        char uuid[48];
        unsigned long long bytes;
    } gpu[GS_RESTORE_MAX_GPUS];
} gs_restore_args_t;

#define GS_RESTORE_USAGE                                                                           \
    "usage: gpushare-restore --pid PID --start STARTTIME [--gpu UUID=BYTES]...\n"                  \
    "Brings process PID back from the checkpoint tier of gpushare's parking when no\n"             \
    "broker is there to do it (restore, then unlock, with the CUDA driver's checkpoint\n"          \
    "API); waits for GPU memory when there is no room yet.  STARTTIME is field 22 of\n"            \
    "/proc/PID/stat: a process that does not match is left alone.  libgpushare-hook\n"             \
    "starts it when it loses the broker.  --gpu names a GPU the process held BYTES\n"              \
    "on: a restore is tried only once that much is free there (a restore that runs\n"              \
    "out of GPU memory can never be tried again).\n"

/* Fills *a from argv; 0 when it can run (or a->help is set), -1 with the
 * problem named in err (which option, what was wrong). */
int gs_restore_args_parse(int argc, char **argv, gs_restore_args_t *a, char *err, size_t errlen);

#endif
