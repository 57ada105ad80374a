/*
 * cli_kernelspec.c - write a kernelspec directory the way `jupyter
 * kernelspec install` lays it out, with absolute paths so the kernel runs
 * whatever PATH the notebook server has.
 */
#include "cli_kernelspec.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "endpoint.h"
#include "kernelspec_probe.h"

#ifndef GS_BINDIR
#define GS_BINDIR "/usr/local/bin"
#endif
#ifndef GS_KERNEL_PYTHON
#define GS_KERNEL_PYTHON "/usr/bin/python3"
#endif
#ifndef GS_PKGDATADIR
#define GS_PKGDATADIR "/usr/local/share/gpushare"
#endif

json_t *gs_cli_kernelspec_json(const gs_cli_kernelspec_t *spec)
{
    /* --ext: IPython loads gpushare_ipython (the wait line, %gpushare); a
     * kernel where it is not installed starts all the same (IPython logs
     * that it could not load it). */
    json_t *argv = json_array();
    json_array_append_new(argv, json_string(spec->launcher));
    if (spec->pythondir) { /* appended to the kernel's PYTHONPATH by the launcher */
        json_array_append_new(argv, json_string("--pythonpath"));
        json_array_append_new(argv, json_string(spec->pythondir));
    }
    static const char *const kernel[] = {"--",
                                         NULL,
                                         "-m",
                                         "ipykernel_launcher",
                                         "-f",
                                         "{connection_file}",
                                         "--ext=gpushare_ipython"};
    for (size_t i = 0; i < sizeof kernel / sizeof *kernel; i++)
        json_array_append_new(argv, json_string(kernel[i] ? kernel[i] : spec->python));
    json_t *ks = json_pack("{s:o, s:s, s:s, s:s}", "argv", argv, "display_name", spec->display_name,
                           "language", "python", "interrupt_mode", "signal");
    json_t *env = json_object();
    if (spec->broker)
        json_object_set_new(env, "GPUSHARE_BROKER", json_string(spec->broker));
    if (spec->gpus > 0) { /* the broker places its kernels on this many GPUs */
        char n[16];
        snprintf(n, sizeof n, "%d", spec->gpus);
        json_object_set_new(env, "GPUSHARE_GPUS", json_string(n));
    }
    json_object_set_new(ks, "env", env);
    json_t *meta = json_pack("{s:{s:s}}", "gpushare", "version", PACKAGE_VERSION);
    if (spec->provisioner)
        json_object_set_new(
            meta, "kernel_provisioner",
            json_pack("{s:s, s:{}}", "provisioner_name", spec->provisioner, "config"));
    json_object_set_new(ks, "metadata", meta);
    return ks;
}

static int mkdirs(const char *path)
{
    char buf[8192];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return -1;
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return -1;
    }
    char buf[8192];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    fclose(in);
    if (fclose(out) != 0)
        rc = -1;
    return rc;
}

static int valid_name(const char *name)
{
    if (!*name)
        return 0;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return 0;
    return 1;
}

/* sys.prefix of the kernel's python, for --sys-prefix. */
static int python_prefix(const char *python, char *out, size_t outlen)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import sys; print(sys.prefix)'", python);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int ok = fgets(out, (int)outlen, p) != NULL;
    if (pclose(p) != 0 || !ok)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: gpushare kernelspec install [--user | --sys-prefix | --prefix DIR]\n"
            "           [--name NAME] [--display-name TEXT] [--python PATH] [--broker ENDPOINT]\n"
            "           [--provisioner | --no-provisioner] [--server-python PATH]\n"
            "           [--launcher PATH] [--gpus N]\n"
            "       gpushare kernelspec list [--python PATH]\n"
            "install: the \"Shared GPU\" Jupyter kernel. Without a location option it goes\n"
            "system-wide into /usr/local/share/jupyter/kernels (needs root). It starts\n"
            "kernels through the gpushare provisioner when the notebook server's python\n"
            "(--server-python, default --python) can load it, else through the plain\n"
            "launcher, and says which; --provisioner insists on the provisioner,\n"
            "--no-provisioner on the plain launcher. --gpus N: its kernels get N GPUs\n"
            "on a server with several (named shared-gpu-xN, \"Shared GPU xN\").\n"
            "list: the gpushare kernelspecs Jupyter finds, and which of the two each uses.\n");
}

/* What `install`'s command line asks for, and what the steps below work
 * out from it. */
struct install {
    enum { SYSTEM, USER, SYS_PREFIX, PREFIX } where;
    int locations; /* how many of --user, --sys-prefix, --prefix */
    const char *prefix, *name, *server_python;
    enum { AUTO, PROVISIONER, PLAIN } launch;
    gs_cli_kernelspec_t spec;
    char broker[256];
    char multi_name[32], multi_display[48];
    char why[1024]; /* why the server's python cannot load the provisioner */
    char pydir[4096];
};

/* The options into in: -1 to go on, else the exit status. */
static int install_parse(struct install *in, int argc, char **argv)
{
    static const struct option longopts[] = {{"user", no_argument, 0, 'u'},
                                             {"sys-prefix", no_argument, 0, 's'},
                                             {"prefix", required_argument, 0, 'p'},
                                             {"name", required_argument, 0, 'n'},
                                             {"display-name", required_argument, 0, 'd'},
                                             {"python", required_argument, 0, 'y'},
                                             {"broker", required_argument, 0, 'b'},
                                             {"provisioner", no_argument, 0, 'P'},
                                             {"no-provisioner", no_argument, 0, 'N'},
                                             {"server-python", required_argument, 0, 'S'},
                                             {"launcher", required_argument, 0, 'l'},
                                             {"gpus", required_argument, 0, 'g'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 0; /* afresh: gpushare's own options were parsed with other rules */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char err[256];
        switch (c) {
        case 'u':
            in->where = USER;
            in->locations++;
            break;
        case 's':
            in->where = SYS_PREFIX;
            in->locations++;
            break;
        case 'p':
            in->where = PREFIX;
            in->prefix = optarg;
            in->locations++;
            break;
        case 'n':
            in->name = optarg;
            break;
        case 'd':
            in->spec.display_name = optarg;
            break;
        case 'y':
            in->spec.python = optarg;
            break;
        case 'P':
            in->launch = PROVISIONER;
            break;
        case 'N':
            in->launch = PLAIN;
            break;
        case 'S':
            in->server_python = optarg;
            break;
        case 'l':
            in->spec.launcher = optarg;
            break;
        case 'g': {
            char *end = NULL;
            long n = strtol(optarg, &end, 10);
            if (!*optarg || *end || n < 1 || n > 64) {
                fprintf(stderr, "gpushare kernelspec install: --gpus \"%s\": a count of 1 to 64\n",
                        optarg);
                return 2;
            }
            in->spec.gpus = (int)n;
            break;
        }
        case 'b':
            if (gs_endpoint_normalise(optarg, in->broker, sizeof in->broker, err, sizeof err) !=
                0) {
                fprintf(stderr, "gpushare kernelspec install: --broker: %s\n", err);
                return 2;
            }
            in->spec.broker = in->broker;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpushare kernelspec install: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    return -1;
}

/* "Shared GPU x2" beside "Shared GPU", unless named otherwise. */
static void install_multi_names(struct install *in)
{
    gs_cli_kernelspec_t *spec = &in->spec;
    if (spec->gpus > 1 && !strcmp(in->name, "shared-gpu")) {
        snprintf(in->multi_name, sizeof in->multi_name, "shared-gpu-x%d", spec->gpus);
        in->name = in->multi_name;
    }
    if (spec->gpus > 1 && !strcmp(spec->display_name, "Shared GPU")) {
        snprintf(in->multi_display, sizeof in->multi_display, "Shared GPU \u00d7%d", spec->gpus);
        spec->display_name = in->multi_display;
    }
}

/* The options make sense together and name what is there: 0, or the exit
 * status. */
static int install_check(const struct install *in)
{
    const gs_cli_kernelspec_t *spec = &in->spec;
    if (in->locations > 1) {
        fprintf(stderr,
                "gpushare kernelspec install: choose one of --user, --sys-prefix, --prefix\n");
        return 2;
    }
    if (!valid_name(in->name)) {
        fprintf(
            stderr,
            "gpushare kernelspec install: --name \"%s\": use letters, digits, '-', '_' and '.'\n",
            in->name);
        return 2;
    }
    if (spec->python[0] != '/' || access(spec->python, X_OK) != 0) {
        fprintf(stderr,
                "gpushare kernelspec install: --python \"%s\" is not an executable absolute path\n",
                spec->python);
        return 2;
    }
    if (spec->launcher[0] != '/') {
        fprintf(stderr, "gpushare kernelspec install: --launcher \"%s\" must be an absolute path\n",
                spec->launcher);
        return 2;
    }
    /* A spec naming a launcher that is not there installs fine and fails
     * only when someone picks the kernel, in the notebook server's log. */
    if (access(spec->launcher, X_OK) != 0) {
        fprintf(stderr,
                "gpushare kernelspec install: the launcher %s: %s (install gpushare, or name "
                "gpushare-launch with --launcher PATH)\n",
                spec->launcher, strerror(errno));
        return 2;
    }
    return 0;
}

/* The provisioner is loaded by the notebook server's jupyter_client: a
 * spec naming one it cannot load is hidden from every kernel list.  0, or
 * the exit status (--provisioner, and it cannot). */
static int install_provisioner(struct install *in)
{
    if (!in->server_python)
        in->server_python = in->spec.python;
    if (in->launch == PLAIN)
        return 0;
    if (gs_ks_provisioner_loadable(in->server_python, in->why, sizeof in->why))
        in->spec.provisioner = "gpushare-provisioner";
    else if (in->launch == PROVISIONER) {
        fprintf(stderr,
                "gpushare kernelspec install: --provisioner: %s; Jupyter would hide this "
                "kernel (install gpushare's provisioner for %s, or leave --provisioner out "
                "for the plain launcher)\n",
                in->why, in->server_python);
        return 1;
    }
    return 0;
}

/* The Jupyter data directory the location option names, into base: 0, or
 * the exit status. */
static int install_base(const struct install *in, char *base, size_t baselen)
{
    const char *home = getenv("HOME");
    const char *data = getenv("JUPYTER_DATA_DIR"), *xdg = getenv("XDG_DATA_HOME");
    switch (in->where) {
    case SYSTEM:
        snprintf(base, baselen, "/usr/local/share/jupyter");
        break;
    case PREFIX:
        snprintf(base, baselen, "%s/share/jupyter", in->prefix);
        break;
    case USER:
        if (data && *data)
            snprintf(base, baselen, "%s", data);
        else if (xdg && *xdg)
            snprintf(base, baselen, "%s/jupyter", xdg);
        else if (home && *home)
            snprintf(base, baselen, "%s/.local/share/jupyter", home);
        else {
            fprintf(stderr, "gpushare kernelspec install: --user needs HOME or JUPYTER_DATA_DIR\n");
            return 1;
        }
        break;
    case SYS_PREFIX: {
        char p[4000];
        if (python_prefix(in->spec.python, p, sizeof p) != 0) {
            fprintf(stderr, "gpushare kernelspec install: cannot ask %s for its sys.prefix\n",
                    in->spec.python);
            return 1;
        }
        snprintf(base, baselen, "%s/share/jupyter", p);
        break;
    }
    }
    return 0;
}

/* The kernelspec directory dir: kernel.json and the logos.  0, or the exit
 * status. */
static int install_write(const struct install *in, const char *dir)
{
    char file[4300];
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "gpushare kernelspec install: cannot create %s: %s%s\n", dir,
                strerror(errno),
                in->where == SYSTEM ? " (use --user to install for yourself)" : "");
        return 1;
    }
    snprintf(file, sizeof file, "%s/kernel.json", dir);
    json_t *ks = gs_cli_kernelspec_json(&in->spec);
    int rc = json_dump_file(ks, file, JSON_INDENT(1));
    json_decref(ks);
    if (rc != 0) {
        fprintf(stderr, "gpushare kernelspec install: cannot write %s: %s\n", file,
                strerror(errno));
        return 1;
    }
    static const char *logos[] = {"logo-32x32.png", "logo-64x64.png", "logo-svg.svg"};
    for (size_t i = 0; i < sizeof logos / sizeof *logos; i++) {
        char from[4300], to[4300];
        const char *share = getenv("GPUSHARE_LOGO_DIR");
        snprintf(from, sizeof from, "%s/%s", share && *share ? share : GS_PKGDATADIR "/kernelspec",
                 logos[i]);
        snprintf(to, sizeof to, "%s/%s", dir, logos[i]);
        if (copy_file(from, to) != 0)
            fprintf(stderr, "gpushare kernelspec install: note: logo %s not copied\n", from);
    }
    return 0;
}

/* What was installed, and how its kernels start. */
static void install_say(const struct install *in, const char *dir)
{
    const gs_cli_kernelspec_t *spec = &in->spec;
    printf("Installed kernelspec %s (\"%s\") in %s\n", in->name, spec->display_name, dir);
    if (spec->pythondir)
        printf("Its kernels get %s after their own PYTHONPATH (gpushare_ipython).\n",
               spec->pythondir);
    if (spec->provisioner)
        printf("It starts kernels through the gpushare provisioner: the broker knows each by "
               "the id Jupyter gives it.\n");
    else if (in->launch == PLAIN)
        printf("It starts kernels through the plain launcher (--no-provisioner): the broker "
               "knows each by its connection file's name.\n");
    else
        printf("It starts kernels through the plain launcher, as %s cannot load the gpushare "
               "provisioner (%s): the broker knows each by its connection file's name, which "
               "is a temporary one for nbclient and papermill.\n",
               in->server_python, in->why);
}

static int install(int argc, char **argv)
{
    struct install in = {.where = SYSTEM,
                         .name = "shared-gpu",
                         .launch = AUTO,
                         .spec = {.launcher = GS_BINDIR "/gpushare-launch",
                                  .python = GS_KERNEL_PYTHON,
                                  .display_name = "Shared GPU"}};
    int rc = install_parse(&in, argc, argv);
    if (rc >= 0)
        return rc;
    install_multi_names(&in);
    if ((rc = install_check(&in)) != 0 || (rc = install_provisioner(&in)) != 0)
        return rc;
    /* An install under a prefix the kernel's python does not search (make
     * install prefix=/opt/gs) put gpushare_ipython beside the launcher's
     * prefix: the kernels get that directory on their PYTHONPATH. */
    if (gs_ks_extension_dir(in.spec.python, in.spec.launcher, in.pydir, sizeof in.pydir) == 0)
        in.spec.pythondir = in.pydir;
    char base[4096], dir[4200];
    if ((rc = install_base(&in, base, sizeof base)) != 0)
        return rc;
    snprintf(dir, sizeof dir, "%s/kernels/%s", base, in.name);
    if ((rc = install_write(&in, dir)) != 0)
        return rc;
    install_say(&in, dir);
    return 0;
}

int gs_cli_kernelspec_main(int argc, char **argv)
{
    int list = argc >= 2 && strcmp(argv[1], "list") == 0;
    if (argc < 2 || (strcmp(argv[1], "install") != 0 && !list)) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "gpushare kernelspec: expected \"install\" or \"list\"\n");
        usage(stderr);
        return 2;
    }
    argc--;
    argv++;
    /* what getopt's messages start with */
    argv[0] = list ? "gpushare kernelspec list" : "gpushare kernelspec install";
    return list ? gs_cli_kernelspec_list(argc, argv) : install(argc, argv);
}
