/*
 * fd_pass.h - one datagram with file descriptors attached (SCM_RIGHTS) on
 * a Unix socket: how the broker's host pool hands pinned memory to a
 * notebook process (broker/park/pool_socket.h, libhook/swap/swap_fetch.h).
 */
#ifndef GS_FD_PASS_H
#define GS_FD_PASS_H

#include <stddef.h>
#include <sys/types.h>

/* Most descriptors in one datagram (the kernel's limit is 253). */
#define GS_FD_PASS_MAX 128

/* Sends len bytes and nfds (0..GS_FD_PASS_MAX) descriptors; 0 or -1 (errno). */
int gs_fd_send(int sock, const void *data, size_t len, const int *fds, int nfds);

/* Receives one datagram: its length (0..len; longer ones are cut) and up to
 * maxfds descriptors in fds (close-on-exec; any beyond maxfds are closed),
 * their count in *nfds.  -1 with errno on failure, 0 at end of stream. */
ssize_t gs_fd_recv(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds);

#endif
