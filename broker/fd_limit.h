/*
 * fd_limit.h - the broker's open-file limit.
 *
 * Every client connection costs the broker a descriptor, and libzmq aborts
 * the process when accept(2) runs out of them (conn_guard.h).  The soft
 * limit a shell or systemd gives by default (1024) is far below what a busy
 * machine needs, and any process may raise its soft limit to its hard one.
 */
#ifndef GS_FD_LIMIT_H
#define GS_FD_LIMIT_H

/* With CAP_SYS_RESOURCE (root), the hard limit is raised to at least this;
 * the unit asks for more (LimitNOFILE=). */
#define GS_FD_LIMIT_WANTED 65536

/* Raise RLIMIT_NOFILE's soft limit to the hard one (first raising a hard
 * limit below GS_FD_LIMIT_WANTED when allowed).  Returns the soft limit in
 * force afterwards. */
long gs_fd_limit_raise(void);

#endif
