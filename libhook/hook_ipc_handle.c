/*
 * hook_ipc_handle.c - the emulated IPC handle's bytes, its server's name
 * and the importer's check of that server (hook_ipc_handle.h).
 */
#define _GNU_SOURCE
#include "hook_ipc_handle.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "proc_alive.h"

/* v1 handles named only a pid: whoever served its name was believed. */
static const char magic_v1[8] = "gsIPCv1";
static const char magic[8] = "gsIPCv2";

/* The layout, in the 64 bytes of a CUipcMemHandle (host byte order: a
 * handle never leaves the machine). */
enum {
    OFF_MAGIC = 0,
    OFF_PID = 8,
    OFF_UID = 12,
    OFF_START = 16,
    OFF_NAME = 24,
    OFF_BASE = 32,
    OFF_ASK = 40,
    OFF_PROOF = OFF_ASK + GS_SWAP_IPC_KEY,
    OFF_END = OFF_PROOF + GS_SWAP_IPC_KEY,
};
_Static_assert(OFF_END == GS_IPC_HANDLE_BYTES, "the handle's fields fill its 64 bytes");

void gs_ipc_handle_pack(const gs_ipc_handle_t *h, unsigned char out[GS_IPC_HANDLE_BYTES])
{
    memcpy(out + OFF_MAGIC, magic, sizeof magic);
    memcpy(out + OFF_PID, &h->pid, sizeof h->pid);
    memcpy(out + OFF_UID, &h->uid, sizeof h->uid);
    memcpy(out + OFF_START, &h->start, sizeof h->start);
    memcpy(out + OFF_NAME, &h->name, sizeof h->name);
    memcpy(out + OFF_BASE, &h->base, sizeof h->base);
    memcpy(out + OFF_ASK, h->keys.ask, GS_SWAP_IPC_KEY);
    memcpy(out + OFF_PROOF, h->keys.proof, GS_SWAP_IPC_KEY);
}

int gs_ipc_handle_unpack(const unsigned char in[GS_IPC_HANDLE_BYTES], gs_ipc_handle_t *h)
{
    if (!memcmp(in + OFF_MAGIC, magic_v1, sizeof magic_v1))
        return -1;
    if (memcmp(in + OFF_MAGIC, magic, sizeof magic) != 0)
        return 0;
    memcpy(&h->pid, in + OFF_PID, sizeof h->pid);
    memcpy(&h->uid, in + OFF_UID, sizeof h->uid);
    memcpy(&h->start, in + OFF_START, sizeof h->start);
    memcpy(&h->name, in + OFF_NAME, sizeof h->name);
    memcpy(&h->base, in + OFF_BASE, sizeof h->base);
    memcpy(h->keys.ask, in + OFF_ASK, GS_SWAP_IPC_KEY);
    memcpy(h->keys.proof, in + OFF_PROOF, GS_SWAP_IPC_KEY);
    return 1;
}

socklen_t gs_ipc_address(pid_t pid, uint64_t name, struct sockaddr_un *sa, char *text,
                         size_t textlen)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "gpushare-ipc-%d-%016llx", (int)pid,
                     (unsigned long long)name);
    if (text)
        snprintf(text, textlen, "@%s", sa->sun_path + 1);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int gs_ipc_random(void *buf, size_t count)
{
    unsigned char *p = buf;
    while (count > 0) {
        ssize_t n = getrandom(p, count, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        count -= (size_t)n;
    }
    return 0;
}

int gs_ipc_listen(pid_t pid, gs_ipc_draw_fn draw, uint64_t *name)
{
    if (!draw)
        draw = gs_ipc_random;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* Someone holding the name drawn (by chance, or having read it from
     * /proc/net/unix after an earlier process of this pid) only makes us
     * draw again. */
    for (int tries = 0; tries < 16; tries++) {
        uint64_t n;
        struct sockaddr_un sa;
        if (draw(&n, sizeof n) != 0)
            break;
        socklen_t len = gs_ipc_address(pid, n, &sa, NULL, 0);
        if (bind(fd, (struct sockaddr *)&sa, len) == 0) {
            if (listen(fd, 64) != 0)
                break;
            *name = n;
            return fd;
        }
        if (errno != EADDRINUSE)
            break;
    }
    int err = errno;
    close(fd);
    errno = err;
    return -1;
}

int gs_ipc_check_server(int s, const gs_ipc_handle_t *h, char *why, size_t whylen)
{
    struct ucred c;
    socklen_t len = sizeof c;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) {
        snprintf(why, whylen, "its server's credentials cannot be read: %s", strerror(errno));
        return -1;
    }
    if (c.pid != (pid_t)h->pid || c.uid != (uid_t)h->uid) {
        snprintf(why, whylen,
                 "its name is served by pid %d of uid %u, not by the exporter (pid %d of uid %u)",
                 (int)c.pid, (unsigned)c.uid, (int)h->pid, (unsigned)h->uid);
        return -1;
    }
    unsigned long long start = gs_proc_start(c.pid);
    if (!start) {
        snprintf(why, whylen, "the start time of pid %d cannot be read (/proc/%d/stat)", (int)c.pid,
                 (int)c.pid);
        return -1;
    }
    if (start != h->start) {
        snprintf(why, whylen,
                 "pid %d is another process than the exporter (started at %llu, the exporter at "
                 "%llu clock ticks after boot)",
                 (int)c.pid, start, (unsigned long long)h->start);
        return -1;
    }
    return 0;
}
