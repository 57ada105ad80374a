/*
 * cli_kernelspec_list.c - `gpushare kernelspec list`: the gpushare
 * kernelspecs Jupyter would find, and for each whether it goes through the
 * gpushare provisioner (kernels named by the id Jupyter gives them, the
 * notebook's path where the server knows it) or the plain launcher, and
 * whether Jupyter hides it because that provisioner cannot be loaded.
 *
 * The directories come from the python's jupyter_core (JUPYTER_PATH,
 * JUPYTER_DATA_DIR, the user's, sys.prefix's, the system's, in Jupyter's
 * order); the specs are read here, so that one Jupyter hides is listed too.
 */
#include "cli_kernelspec.h"

#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernelspec_probe.h"

#ifndef GS_KERNEL_PYTHON
#define GS_KERNEL_PYTHON "/usr/bin/python3"
#endif

static const char dirs_code[] = "from jupyter_core.paths import jupyter_path\n"
                                "print('\\n'.join(jupyter_path('kernels')))\n";

/* A spec gpushare wrote: its metadata says so, or its argv starts with
 * the launcher. */
static int is_gpushare(const json_t *ks)
{
    if (json_object_get(json_object_get(ks, "metadata"), "gpushare"))
        return 1;
    const char *argv0 = json_string_value(json_array_get(json_object_get(ks, "argv"), 0));
    size_t n = argv0 ? strlen(argv0) : 0;
    return n >= 15 && strcmp(argv0 + n - 15, "gpushare-launch") == 0;
}

static const char *provisioner_of(const json_t *ks)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(ks, "metadata"), "kernel_provisioner"),
                        "provisioner_name"));
}

int gs_cli_kernelspec_list(int argc, char **argv)
{
    const char *python = GS_KERNEL_PYTHON;
    static const struct option longopts[] = {
        {"python", required_argument, 0, 'y'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'y':
            python = optarg;
            break;
        case 'h':
            printf("Usage: gpushare kernelspec list [--python PATH]\n"
                   "The gpushare kernelspecs the Jupyter of PATH (default %s) finds, each\n"
                   "with how it starts kernels: \"provisioner\" or \"plain launcher\".\n",
                   GS_KERNEL_PYTHON);
            return 0;
        default:
            fprintf(stderr, "Usage: gpushare kernelspec list [--python PATH]\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpushare kernelspec list: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    char dirs[16384];
    if (gs_ks_python(python, dirs_code, 0, dirs, sizeof dirs) != 0) {
        fprintf(stderr,
                "gpushare kernelspec list: %s cannot tell Jupyter's kernel directories "
                "(is jupyter_core installed for it?)\n",
                python);
        return 1;
    }
    char why[1024] = "";
    int loadable = -1; /* asked once, when a spec needs it */
    json_t *seen = json_object();
    int found = 0;
    for (char *dir = strtok(dirs, "\n"); dir; dir = strtok(NULL, "\n")) {
        DIR *d = opendir(dir);
        if (!d)
            continue;
        struct dirent **names;
        closedir(d);
        int n = scandir(dir, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            char path[8192];
            snprintf(path, sizeof path, "%s/%s/kernel.json", dir, names[i]->d_name);
            json_t *ks = names[i]->d_name[0] != '.' ? json_load_file(path, 0, NULL) : NULL;
            if (ks && is_gpushare(ks)) {
                const char *name = names[i]->d_name, *prov = provisioner_of(ks);
                if (!found++)
                    printf("%-20s %-16s %s\n", "NAME", "STARTS KERNELS", "DIRECTORY");
                printf("%-20s %-16s %s/%s\n", name, prov ? "provisioner" : "plain launcher", dir,
                       name);
                if (json_object_get(seen, name))
                    printf("%-20s   not used: the one above, of the same name, comes first\n", "");
                else if (prov && strcmp(prov, "gpushare-provisioner") == 0) {
                    if (loadable < 0)
                        loadable = gs_ks_provisioner_loadable(python, why, sizeof why);
                    if (!loadable)
                        printf("%-20s   HIDDEN by Jupyter: %s\n", "", why);
                }
                json_object_set_new(seen, name, json_true());
            }
            json_decref(ks);
            free(names[i]);
        }
        if (n >= 0)
            free(names);
    }
    json_decref(seen);
    if (!found)
        printf("no gpushare kernelspec in Jupyter's kernel directories "
               "(`gpushare kernelspec install` writes one)\n");
    else
        printf("provisioner: kernels are named by the id Jupyter gives them, notebooks by their\n"
               "path where the server knows it; plain launcher: by the connection file's name\n"
               "(a notebook server's kernel id; nbclient's and papermill's are temporary).\n");
    return 0;
}
