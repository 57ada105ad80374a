/*
 * kernelspec_probe.c - see kernelspec_probe.h.
 */
#define _GNU_SOURCE
#include "kernelspec_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The provisioner as jupyter_client finds it: its entry point, then the
 * class (an entry point whose module is gone would make Jupyter hide the
 * spec all the same).  One line on stderr says why not. */
static const char probe_code[] =
    "import sys\n"
    "try:\n"
    "    import jupyter_client\n"
    "except ImportError as e:\n"
    "    sys.exit('no jupyter_client (%s)' % e)\n"
    "v = jupyter_client.__version__\n"
    "if int(v.split('.')[0]) < 7:\n"
    "    sys.exit('jupyter_client %s has no kernel provisioners (7 or newer has)' % v)\n"
    "from importlib.metadata import entry_points\n"
    "try:\n"
    "    eps = entry_points(group='jupyter_client.kernel_provisioners')\n"
    "except TypeError:  # python < 3.10\n"
    "    eps = entry_points().get('jupyter_client.kernel_provisioners', [])\n"
    "ep = [e for e in eps if e.name == 'gpushare-provisioner']\n"
    "if not ep:\n"
    "    sys.exit('the gpushare provisioner is not installed for %s' % sys.executable)\n"
    "try:\n"
    "    ep[0].load()\n"
    "except Exception as e:\n"
    "    sys.exit('the gpushare provisioner does not import: %s' % e)\n";

/* argv[1] is the prefix: the site directory under it as `make install`
 * chose it (kernelspecs/provisioner/sitedir.py), printed when it holds
 * gpushare_ipython and is not on the python's own path. */
static const char extdir_code[] =
    "import os, site, sys, sysconfig\n"
    "prefix = os.path.normpath(sys.argv[1])\n"
    "dirs = [os.path.normpath(d) for d in site.getsitepackages()\n"
    "        if os.path.normpath(d).startswith(prefix + '/lib/')]\n"
    "dirs.append(sysconfig.get_path('purelib', 'posix_prefix',\n"
    "                               vars={'base': prefix, 'platbase': prefix}))\n"
    "onpath = set(map(os.path.normpath, sys.path))\n"
    "for d in dirs:\n"
    "    if os.path.isfile(os.path.join(d, 'gpushare_ipython', '__init__.py')):\n"
    "        if d not in onpath:\n"
    "            print(d)\n"
    "        break\n";

static int run_python(const char *python, const char *const *args, const char *code,
                      int with_stderr, char *out, size_t outlen);

int gs_ks_extension_dir(const char *python, const char *launcher, char *out, size_t outlen)
{
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s", launcher);
    for (int i = 0; i < 2; i++) { /* PREFIX/bin/gpushare-launch -> PREFIX */
        char *slash = strrchr(prefix, '/');
        if (!slash || slash == prefix)
            return -1;
        *slash = '\0';
    }
    const char *args[] = {"-E", "-s", "-c", extdir_code, prefix, NULL};
    if (run_python(python, args, NULL, 0, out, outlen) != 0)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return out[0] == '/' ? 0 : -1;
}

int gs_ks_python(const char *python, const char *code, int with_stderr, char *out, size_t outlen)
{
    return run_python(python, NULL, code, with_stderr, out, outlen);
}

/* python -c code, or python ARGS... when args is given. */
static int run_python(const char *python, const char *const *args, const char *code,
                      int with_stderr, char *out, size_t outlen)
{
    int fds[2];
    if (outlen)
        out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        if (with_stderr)
            dup2(fds[1], STDERR_FILENO);
        if (args) {
            const char *argv[16] = {python};
            for (int i = 0; args[i] && i < 14; i++)
                argv[i + 1] = args[i];
            execv(python, (char *const *)argv);
        } else {
            execl(python, python, "-c", code, (char *)NULL);
        }
        fprintf(stderr, "cannot run %s: %s\n", python, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    char buf[1024];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        if (n <= 0)
            continue;
        size_t take = outlen > used + 1 ? outlen - used - 1 : 0;
        if ((size_t)n < take)
            take = (size_t)n;
        memcpy(out + used, buf, take);
        used += take;
        if (outlen)
            out[used] = '\0';
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int gs_ks_provisioner_loadable(const char *python, char *why, size_t whylen)
{
    int rc = gs_ks_python(python, probe_code, 1, why, whylen);
    if (rc == 0)
        return 1;
    /* The last line: sys.exit's message (or a traceback's last line). */
    size_t len = strlen(why);
    while (len && why[len - 1] == '\n')
        why[--len] = '\0';
    char *last = strrchr(why, '\n');
    if (last)
        memmove(why, last + 1, strlen(last + 1) + 1);
    if (!why[0])
        snprintf(why, whylen, "%s could not be asked (exit status %d)", python, rc);
    return 0;
}
