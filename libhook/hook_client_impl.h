/*
 * hook_client_impl.h - the broker client's insides, shared by its files:
 * hook_client.c (the I/O thread, idleness), hook_client_recv.c (the
 * broker's messages), hook_client_conn.c (the connection's states),
 * hook_client_pending.c (what waits to be sent), hook_client_room.c
 * (make_room requests), hook_client_swap.c (the swap tier's commands) and
 * hook_client_send.c (this state, sending, the clock).  Not for use
 * outside them.
 */
#ifndef GS_HOOK_CLIENT_IMPL_H
#define GS_HOOK_CLIENT_IMPL_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "hook_gate.h"
#include "protocol.h"

#define RETRY_MS         250
#define REFUSED_RETRY_MS 5000
#define MAX_RELEASES     (2 * HOOK_MAX_DEVICES)

struct room_req; /* hook_client_room.c */

/* Shared with other threads, under hook_gate_mu. */
struct hook_client_shared {
    int started;
    pid_t pid; /* process that started the thread */
    int efd;
    int stopping;
    int io_done;
    int decided;   /* the first attempt ended (READY or UNGATED) */
    int connected; /* welcomed by the broker on the current socket */
    char endpoint[512];
    json_t *releases[MAX_RELEASES];
    int nreleases;
    json_t *reports[HOOK_MAX_DEVICES]; /* `swapped`, from the swap thread */
    int nreports;
    struct room_req *rooms; /* hook_client_room.c */
};
extern struct hook_client_shared hook_client_sh;

/* Owned by the I/O thread. */
struct hook_client_io_state {
    void *zctx, *sock, *mon;
    int ready;
    unsigned mon_n;
    long long seq;
    long long join_seq;
    int join_without_session;
    int was_refused; /* the broker refused this process before this welcome */
    int heartbeat_ms;
    /* The membership of the last join, from its answer: 0 until then (a
     * grant is refused meanwhile), -1 when the broker gives none (older
     * brokers: no fencing). */
    long long epoch;
    uint64_t last_sent; /* when the broker was last sent anything (ms) */
    uint64_t hello_deadline, next_attempt, next_heartbeat, next_idle_tick, last_activity;
    uint64_t next_mem[HOOK_MAX_DEVICES]; /* earliest time of the next memory message */
    int lost_reported;
};
extern struct hook_client_io_state hook_client_io;

/* ---- hook_client_send.c --------------------------------------------- */
uint64_t hook_client_now_ms(void);
/* Sends m if connected and takes it (NULL: nothing). */
void hook_client_send(json_t *m);
/* A new message of type with the next seq; the caller owns it (NULL when
 * out of memory). */
json_t *hook_client_msg_seq(gs_msg_type_t type);
void hook_client_send_join(void);
/* hook_client_pending.c: releases and reports queued, then acquires for
 * devices someone waits for and make_room requests not sent yet. */
void hook_client_send_pending(void);

#endif
