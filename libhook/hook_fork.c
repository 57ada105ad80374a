/*
 * hook_fork.c - fork safety.
 *
 * A forked child has one thread and a copy of the parent's memory: the
 * hook's locks might be held by threads that do not exist there, its I/O
 * and helper threads are gone, and it shares the parent's connection to the
 * broker.  pthread_atfork handlers take every hook lock around fork() (in
 * one fixed order, the order they nest in), and the child then re-creates
 * the locks, forgets devices, grants, streams and captures, and closes its
 * copy of the broker connection, so the broker still sees the parent's
 * connection close when the parent exits.  The child starts with the gate
 * closed and no client: if it creates a context it connects afresh as a
 * process of its own.
 */
#define _GNU_SOURCE
#include "hook_fork.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "hook_burst.h"
#include "hook_capture.h"
#include "hook_client.h"
#include "hook_cuctx.h"
#include "hook_drain.h"
#include "hook_gate.h"
#include "hook_mem.h"
#include "hook_streams.h"
#include "hook_thread.h"

static void prepare(void)
{
    hook_gate_atfork_prepare();    /* hook_gate_mu */
    hook_streams_atfork_prepare(); /* hook_streams_mu */
    hook_cuctx_atfork_prepare();   /* contexts */
    hook_thread_atfork_prepare();  /* thread registry */
    hook_burst_atfork_prepare();   /* bursts (leaf) */
    hook_mem_atfork_prepare();     /* memory (leaf) */
}

static void parent(void)
{
    hook_mem_atfork_parent();
    hook_burst_atfork_parent();
    hook_thread_atfork_parent();
    hook_cuctx_atfork_parent();
    hook_streams_atfork_parent();
    hook_gate_atfork_parent();
}

/* Closes the child's copies of unix sockets connected to the broker's
 * path.  Only system calls (async-signal-safe): getdents64 on
 * /proc/self/fd, getpeername. */
static void close_broker_fds(const char *path)
{
    if (!path || !*path)
        return;
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return;
    char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            int fd = 0;
            const char *p = e->d_name;
            if (*p < '0' || *p > '9')
                continue;
            for (; *p >= '0' && *p <= '9'; p++)
                fd = fd * 10 + (*p - '0');
            if (fd == dir)
                continue;
            struct sockaddr_un peer;
            socklen_t len = sizeof peer;
            memset(&peer, 0, sizeof peer);
            if (getpeername(fd, (struct sockaddr *)&peer, &len) == 0 &&
                peer.sun_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) &&
                strncmp(peer.sun_path, path, sizeof peer.sun_path) == 0)
                close(fd);
        }
    }
    close(dir);
}

static void child(void)
{
    hook_thread_atfork_child();
    hook_cuctx_atfork_child();
    hook_streams_atfork_child();
    hook_gate_atfork_child();
    hook_drain_atfork_child();
    hook_capture_atfork_child();
    hook_burst_atfork_child();
    hook_mem_atfork_child();
    close_broker_fds(hook_client_ipc_path());
    hook_client_atfork_child();
}

void hook_fork_register(void)
{
    pthread_atfork(prepare, parent, child);
}
