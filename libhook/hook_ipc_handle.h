/*
 * hook_ipc_handle.h - the emulated legacy IPC handle (hook_ipc.h): what
 * its 64 bytes carry, the name of the exporter's server, and the checks
 * that make a handle open its exporter's memory or nothing.
 *
 * Abstract socket names are anyone's to bind (and /proc/net/unix lists
 * them to everybody), so the name proves nothing about who serves it: once
 * the exporter is gone, anyone may take its name.  The importer therefore
 * believes only the kernel's account of the server (SO_PEERCRED: the pid
 * and uid of the process that listens, and that pid's start time, so that
 * a reused pid is not the exporter) and the server's answer, which must
 * carry the handle's proof: a random secret only the exporter knows.  The
 * importer presents the handle's ask key only to a server that passed the
 * credential checks, and the server hands out memory only for its own ask
 * key: whoever holds the handle may open it, as with the driver's own
 * handles, and nobody else.  The server's name includes a random part, so
 * names cannot be taken ahead of an exporter (a name that is taken all
 * the same is drawn again).
 */
#ifndef GS_HOOK_IPC_HANDLE_H
#define GS_HOOK_IPC_HANDLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "swap_ranges.h" /* gs_swap_ipc_keys_t */

#define GS_IPC_HANDLE_BYTES 64 /* CU_IPC_HANDLE_SIZE */

typedef struct {
    int32_t pid;    /* the exporter (its getpid()) */
    uint32_t uid;   /* its effective uid */
    uint64_t start; /* its start time (/proc/PID/stat, clock ticks since boot) */
    uint64_t name;  /* the random part of its server's name */
    uint64_t base;  /* the range, at its address in the exporter */
    gs_swap_ipc_keys_t keys;
} gs_ipc_handle_t;

/* The handle's 64 bytes (magic "gsIPCv2" first). */
void gs_ipc_handle_pack(const gs_ipc_handle_t *h, unsigned char out[GS_IPC_HANDLE_BYTES]);
/* 1 and *h for one of ours; 0 for anything else (the driver's own);
 * -1 for a handle of an older gpushare (no keys: refused). */
int gs_ipc_handle_unpack(const unsigned char in[GS_IPC_HANDLE_BYTES], gs_ipc_handle_t *h);

/* The server's abstract address "\0gpushare-ipc-<pid>-<name, 16 hex>";
 * its length for bind/connect.  The printable name (with '@' for the NUL,
 * as ss and /proc/net/unix show it) in text when text is not NULL. */
socklen_t gs_ipc_address(pid_t pid, uint64_t name, struct sockaddr_un *sa, char *text,
                         size_t textlen);

/* count random bytes (getrandom); 0, or -1 with errno. */
int gs_ipc_random(void *buf, size_t count);

/* A listening SOCK_SEQPACKET socket (close-on-exec) bound to the name of
 * pid with a random part from draw (gs_ipc_random by default: draw NULL),
 * drawn again while the name is taken (up to 16 times); the part in *name.
 * The descriptor, or -1 with errno. */
typedef int (*gs_ipc_draw_fn)(void *buf, size_t count);
int gs_ipc_listen(pid_t pid, gs_ipc_draw_fn draw, uint64_t *name);

/* Whether the server on the connected socket s is the exporter h names:
 * its credentials' pid and uid are h's and that pid started when h says.
 * 0, or -1 with why (the reason, for the log). */
int gs_ipc_check_server(int s, const gs_ipc_handle_t *h, char *why, size_t whylen);

#endif
