/*
 * hook_gate.h - the gate: may this process submit work to a GPU now?  The
 * primitive that the submission path, the broker client and the drains all
 * use, and which calls none of them: the gate word, the table of devices
 * (what the broker granted, who waits), and the lock and condition
 * variable that guard that table.
 */
#ifndef GS_HOOK_GATE_H
#define GS_HOOK_GATE_H

#include "hook_cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { HOOK_GATE_CLOSED = 0, HOOK_GATE_OPEN = 1, HOOK_GATE_UNGATED = 2, HOOK_GATE_PASS = 3 };
/* CLOSED: some device this process touched is not granted; OPEN: all are
 * granted; UNGATED: no broker (or GPUSHARE_DISABLE), nothing waits; PASS:
 * gpushare_hook_passthrough(1), submissions go past the gate and the burst
 * flags uncounted (an in-process A/B of the hook's cost).  Every
 * submission loads it (hook_submit.h), and it changes only at grants,
 * revokes and broker transitions: alone on its cache line, it stays in
 * every submitting core's cache. */
extern struct hook_line_int hook_gate_word;
/* Bumped at each grant; every submission in the OPEN state loads it. */
extern struct hook_line_u64 hook_gate_epoch;
/* Set by submissions, cleared by the idle timer: written by many threads,
 * so it has a line of its own too. */
extern struct hook_line_int hook_gate_activity;

#define HOOK_UUID_LEN 48

enum hook_dev_state {
    DS_IDLE = 0,  /* touched, no grant, nobody waiting */
    DS_WANT,      /* someone waits: acquire to be sent */
    DS_REQUESTED, /* acquire sent */
    DS_GRANTED,
    DS_DRAINING /* gate closed, waiting for submitted work before release */
};
enum hook_drain_reason { DRAIN_REVOKED = 1, DRAIN_IDLE };

struct hook_dev {
    int touched;
    enum hook_dev_state state;
    char uuid[HOOK_UUID_LEN];
    long long grant_id;
    /* The grant given back last: the broker may send a grant again (the
     * same id, a new idle release) just before it learns of the release,
     * and that copy must not reopen the gate (hook_client_recv.c). */
    long long given_back_id;
    long long quantum_us;
    unsigned idle_release_ms; /* the grant's idle release (0: the process' own) */
    uint64_t granted_ns;
    unsigned long long epoch_start; /* hook_gate_epoch when granted */
    enum hook_drain_reason drain_reason;
    unsigned drain_gen; /* bumped when a drain starts or is cancelled */
    int drain_pending;  /* for the helper thread */
    int waiters;
    long long acquire_seq;
    uint64_t wait_since_ns;
    int wait_warned;
    char wait_info[256]; /* from the broker's reply to acquire */
    int swapped;         /* its memory is out in host memory (swap tier): the gate
                            stays closed for it, broker or not, until it is back */
    int frozen;          /* the checkpoint tier locks (or locked) this process: its
                            driver calls would block below the hook, so every
                            interposed call first waits for a grant (`frozen`) */
    /* What the program waits for here, for the notebook's wait line
     * (hook_wait.h): threads at the gate, allocations waiting for room. */
    int gate_waiters, room_waiters;
    uint64_t room_bytes;      /* the allocation the latest room request is for */
    char room_info[420];      /* why it waits, as the broker said (room with waiting) */
    char room_error[300];     /* why the last room request failed ("": it did not) */
    uint64_t wait_begin_ns;   /* someone has waited since (0: nobody waits) */
    uint64_t waited_ns;       /* all waits that ended, together */
    unsigned long long waits; /* how many ended */
    char wait_holder[160];    /* who holds the GPU, from the broker's reply to acquire */
    uint64_t wait_left_ns;    /* when the holder's slice ends at the latest (0: unknown) */
};

/* The broker connection, as far as the gate cares; kept by the client
 * (hook_client_conn.c). */
enum hook_client_state {
    CS_NONE = 0,   /* not started (no device touched yet) */
    CS_CONNECTING, /* first attempt: submissions wait (at most ~200 ms) */
    CS_READY,      /* welcome received: gated */
    CS_UNGATED,    /* no broker: running ungated, reconnecting in the background */
    CS_REFUSED,    /* a broker refused this process (hello, join): gated, nothing is
                      granted, asking again in the background (never ungated: it must
                      not run unscheduled beside others, issue 34) */
    CS_STOPPED     /* exiting */
};

/* Everything below is guarded by hook_gate_mu. */
/* Devices frozen now (struct hook_dev's frozen), read without the lock by
 * every interposed call: nonzero sends it to hook_submit_thaw first. */
extern atomic_int hook_gate_frozen;
/* Threads between the gate's slow path and its driver calls (which a lock
 * for a checkpoint would block before the hook asks for the GPU). */
extern atomic_int hook_gate_probing;

extern pthread_mutex_t hook_gate_mu;
/* Any change of device, client or capture state; waits with CLOCK_MONOTONIC
 * deadlines. */
extern pthread_cond_t hook_gate_cv;
struct hook_gate_state {
    struct hook_dev dev[HOOK_MAX_DEVICES];
    int ndev; /* devices enumerated (uuid known) */
    int enumerated;
    enum hook_client_state client;
    int drain_syncing;  /* drains synchronising: captures and teardown wait */
    int monitor_active; /* burst monitors calling the driver: captures wait */
    int monitor_busy;   /* burst monitors holding events: teardown waits */
    int ctx_destroying; /* a context is being destroyed (or waits to be) */
};
extern struct hook_gate_state hook_gate_st;
/* gpushare_hook_passthrough's setting: the gate word is PASS while it is on
 * and no memory of the process is parked (hook_gate_update_locked). */
extern int hook_gate_passthrough;
/* The broker placed this process' session on several GPUs (hook_place.c),
 * all of them visible here: it takes and holds them together (the broker
 * grants them in GPU order, scheduler_gang.c), so that work on one never
 * waits for a GPU another session holds.  Touching one device touches
 * them all.  Written once, before the driver starts. */
extern int hook_gate_gang;

/* Before anyone can wait on hook_gate_cv: from hook_init. */
void hook_gate_init(void);
/* Recomputes hook_gate_word from the devices and the client state. */
void hook_gate_update_locked(void);
/* A context for device `dev` exists: the device is gated from now on. */
struct hook_dev *hook_gate_touch_locked(int dev);
struct hook_dev *hook_gate_dev_by_uuid_locked(const char *uuid);
void hook_gate_atfork_prepare(void);
void hook_gate_atfork_parent(void);
void hook_gate_atfork_child(void);

#endif
