/*
 * watcher.h - the small process that watches a kernel's cells.
 *
 * gpushare-launch forks it and then execs the kernel in its own place, so
 * the kernel keeps the pid (and the process group, and the signals) the
 * notebook server knows, and the watcher is the kernel's child.  The
 * watcher dies with the kernel (PR_SET_PDEATHSIG, and getppid checked for
 * the race), lives in a process group of its own and ignores SIGINT besides
 * (an interrupt is the kernel's alone, and ipykernel's shutdown waits for
 * the children in its group), keeps no file descriptor of the kernel's but
 * stderr, and only ever reads from the kernel (a ZeroMQ SUB on IOPub, which
 * a publisher never waits for), so it can not slow the kernel down.
 */
#ifndef GS_WATCHER_H
#define GS_WATCHER_H

#include <sys/types.h>

#include "connection_file.h"

typedef struct {
    gs_conn_info_t *conn;  /* wiped before the watcher exits */
    const char *conn_path; /* for log lines */
    const char *kernel_id;
    const char *user;
    const char *notebook; /* NULL when unknown */
    pid_t server_pid;     /* the launcher's parent: the notebook server, or what runs the kernel */
    int find_notebook;    /* look the notebook up (notebook_name.h): nobody told it */
    pid_t kernel_pid;     /* the launcher's pid, which the kernel keeps */
    int exec_fd;          /* read end of a close-on-exec pipe: EOF = the kernel was exec'd */
} gs_watcher_args_t;

/* Run in the child right after fork(); never returns. */
void gs_watcher_main(const gs_watcher_args_t *args) __attribute__((noreturn));

#endif
