/*
 * notebook_name.h - the notebook a kernel runs, for the broker's status and
 * wait lines, where nobody told the kernel (notebook 6 and jupyter_server 1
 * set no JPY_SESSION_NAME).
 *
 * The notebook server that started the kernel is the launcher's parent; it
 * wrote its address and token into its runtime directory
 * (nbserver-PID.json, jpserver-PID.json: the directory of the kernel's
 * connection file, JUPYTER_RUNTIME_DIR, or Jupyter's default), and its
 * sessions API (GET api/sessions) maps the kernel id to the notebook's path
 * once the session is saved, right after the kernel started.  The lookup
 * runs on a thread of its own, retried for a while, so it never holds up
 * the kernel or the watcher's cells.  Without such a server (nbclient,
 * papermill: the parent is the program that runs the notebook) the
 * notebook is the one the parent's command line names, when that is
 * unambiguous (nb_server.h).  The file must be the user's own: its token
 * goes nowhere else than the server it names, over loopback or the server's
 * unix socket (https is not spoken: no name then).
 */
#ifndef GS_NOTEBOOK_NAME_H
#define GS_NOTEBOOK_NAME_H

#include <stddef.h>
#include <sys/types.h>

typedef struct gs_nbname gs_nbname_t;

/* Starts the lookup for kernel_id, whose connection file is conn_path
 * (may be NULL) and whose launcher's parent is parent.  NULL when no
 * thread could be started. */
gs_nbname_t *gs_nbname_start(const char *kernel_id, const char *conn_path, pid_t parent);

/* A descriptor that becomes readable when the lookup ended. */
int gs_nbname_fd(const gs_nbname_t *self);

/* After the descriptor became readable: 1 with the notebook in out, 0
 * when none was found (the lookup is over either way), -1 while it runs. */
int gs_nbname_result(gs_nbname_t *self, char *out, size_t outlen);

/* Frees it (a lookup still running is left to finish by itself). */
void gs_nbname_destroy(gs_nbname_t **self_p);

#endif
