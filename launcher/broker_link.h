/*
 * broker_link.h - the cell watcher's connection to gpushare-broker.
 *
 * It registers the kernel (hello, register), then forwards cell busy/idle
 * and heartbeats, and says unregister when the kernel goes.  The broker may
 * be missing, slow to start, restarted or gone: registration is retried in
 * the background with a growing pause, the first failure is logged as ONE
 * warning line (the kernel's log is a person's), and after every
 * (re)registration the broker is told the cell state it missed.  Nothing
 * here ever blocks: the watcher's single thread polls the link's sockets
 * together with IOPub (items/timeout_ms/tick).
 */
#ifndef GS_BROKER_LINK_H
#define GS_BROKER_LINK_H

#include <czmq.h>
#include <stdint.h>

typedef struct {
    const char *kernel_id; /* Jupyter's kernel id; also the expected session id */
    const char *user;
    const char *notebook; /* NULL when unknown */
    long kernel_pid;
} gs_link_identity_t;

typedef struct gs_broker_link gs_broker_link_t;

/* A link that starts its first registration attempt at the first tick.
 * The strings are copied. */
gs_broker_link_t *gs_link_new(const gs_link_identity_t *id);
void gs_link_destroy(gs_broker_link_t **self_p);

/* Up to max poll items (ZMQ_POLLIN) for the link's sockets; returns how
 * many were written (0 while no connection is being tried). */
int gs_link_items(gs_broker_link_t *self, zmq_pollitem_t *items, int max);
/* Milliseconds until the link next needs a tick (>= 0). */
long gs_link_timeout_ms(gs_broker_link_t *self, int64_t now_ms);
/* Read what arrived, run timers (retry, deadline, heartbeat). */
void gs_link_tick(gs_broker_link_t *self, int64_t now_ms);

/* A cell started (busy=1) or finished; forwarded at once when registered,
 * remembered otherwise. */
void gs_link_cell(gs_broker_link_t *self, int busy, const char *msg_id);

/* The notebook's path, learnt after the start (notebook_name.h): the
 * broker gets it in a register now if registered, else in the next one. */
void gs_link_set_notebook(gs_broker_link_t *self, const char *notebook);

/* The session as the broker named it ("" before the first registration). */
const char *gs_link_session(const gs_broker_link_t *self);

/* When registered: send unregister and wait at most wait_ms for the reply.
 * Returns 1 when the broker acknowledged it. */
int gs_link_unregister(gs_broker_link_t *self, int wait_ms);

#endif
