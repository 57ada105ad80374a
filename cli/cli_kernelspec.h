/*
 * cli_kernelspec.h - `gpushare kernelspec install` (the "Shared GPU" kernel) and
 * `gpushare kernelspec list`.
 */
#ifndef GS_CLI_KERNELSPEC_H
#define GS_CLI_KERNELSPEC_H

#include <jansson.h>

typedef struct {
    const char *launcher;     /* absolute path of gpushare-launch */
    const char *python;       /* python that has ipykernel */
    const char *display_name; /* "Shared GPU" */
    const char *broker;       /* endpoint written into env, or NULL */
    const char *provisioner;  /* kernel_provisioner name, or NULL */
    const char *pythondir;    /* the launcher's --pythonpath (gpushare_ipython's dir), or NULL */
    int gpus;                 /* GPUs each kernel asks for (GPUSHARE_GPUS); 0: unset (one) */
} gs_cli_kernelspec_t;

/* The kernel.json object for spec. */
json_t *gs_cli_kernelspec_json(const gs_cli_kernelspec_t *spec);

/* Run `gpushare kernelspec install|list ...`; returns the exit status. */
int gs_cli_kernelspec_main(int argc, char **argv);

/* `gpushare kernelspec list` (cli_kernelspec_list.c); argv[0] is "list". */
int gs_cli_kernelspec_list(int argc, char **argv);

#endif
