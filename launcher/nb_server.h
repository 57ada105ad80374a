/*
 * nb_server.h - the pure parts of finding a kernel's notebook (see
 * notebook_name.h): a notebook server's runtime file, its sessions API's
 * answer, and the notebook named on a parent's command line.  No I/O here,
 * so the unit tests feed them text.
 */
#ifndef GS_NB_SERVER_H
#define GS_NB_SERVER_H

#include <stddef.h>

/* What a notebook server's runtime file (nbserver-PID.json of notebook 6,
 * jpserver-PID.json of jupyter_server) says about reaching it. */
typedef struct {
    char host[256];     /* to connect to: the wildcard addresses become loopback */
    int port;           /* 1..65535; 0 with sock */
    char sock[108];     /* a unix socket instead of host:port, or "" */
    char base_url[256]; /* starts and ends with '/' */
    char token[256];    /* may be "" (then the API answers 403 and there is no name) */
    int secure;         /* https: not spoken here */
} gs_nb_server_t;

/* Parse a runtime file's text.  Returns 0, or -1 with a reason in err. */
int gs_nb_server_parse(const char *text, size_t len, gs_nb_server_t *out, char *err, size_t errlen);

/* The HTTP request for GET {base_url}api/sessions; returns its length, or
 * -1 when out is too small. */
int gs_nb_sessions_request(const gs_nb_server_t *s, char *out, size_t outlen);

/* An HTTP response to that request: 1 with the path of the session whose
 * kernel is kernel_id in out; 0 when the answer is good but has no such
 * session (yet); -1 when the answer is no use (not 200, not the JSON list
 * expected: err says), -2 when out is too small or the path holds control
 * characters. */
int gs_nb_sessions_find(const char *resp, size_t len, const char *kernel_id, char *out,
                        size_t outlen, char *err, size_t errlen);

/* The notebook a program that runs kernels without a server was given on
 * its command line (NUL-separated, as /proc/PID/cmdline): `jupyter
 * nbconvert --execute train.ipynb`, `papermill in.ipynb out.ipynb` (the
 * input).  Only when it is unambiguous: the one argument ending in .ipynb
 * (not counting the value of --output), or papermill's first.  Returns 1 with it in out, else 0. */
int gs_nb_from_cmdline(const char *cmdline, size_t len, char *out, size_t outlen);

#endif
