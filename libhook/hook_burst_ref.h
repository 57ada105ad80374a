/*
 * hook_burst_ref.h - the burst monitor's clock (hook_burst_ref.c): GPU
 * event timestamps brought to CLOCK_MONOTONIC through a reference event.
 */
#ifndef GS_HOOK_BURST_REF_H
#define GS_HOOK_BURST_REF_H

#include <stdint.h>

#include "hook_cuda.h"
#include "hook_streams.h"

/* A reference settled narrower than this is not settled again. */
#define HOOK_BURST_REF_GOOD_NS 100000ULL

/* A monitor's reference (its own: no lock). */
struct hook_burst_ref {
    CUevent ev;      /* the reference: stamped at ns +/- unc (host time) */
    CUevent scratch; /* recorded again to find a narrower interval */
    CUcontext ctx;
    CUstream s;
    uint64_t ns;
    uint64_t unc;
    unsigned gen;
};

/* hook_gate_mu not held; the caller holds captures and teardown off.
 * Records a timing event on the hook's own stream in ctx (created on first
 * use; ctx is current after) and returns it (the caller owns it; NULL on
 * failure) with the host time of the record, the contexts' generation and
 * the stream. */
CUevent hook_burst_ref_record(CUcontext ctx, uint64_t *ns, unsigned *gen, CUstream *stream);
/* No context went since generation gen: the reference's events still exist. */
int hook_burst_ref_valid(unsigned gen);
/* Narrows r's interval (r's context current), giving way to captures. */
void hook_burst_ref_settle(struct hook_burst_ref *r);
/* r's events destroyed (when its context is still there); r empty. */
void hook_burst_ref_drop(struct hook_burst_ref *r);
/* The host time event e completed, through r when it can: after
 * `recorded` and by `observed`. */
uint64_t hook_burst_ref_event_end(const struct hook_burst_ref *r, const struct hook_streams_ev *e,
                                  uint64_t recorded, uint64_t observed);
/* A context was destroyed (NULL: maybe several): its stream is forgotten
 * and every reference of before is invalid. */
void hook_burst_ref_forget_ctx(CUcontext ctx);
void hook_burst_ref_atfork_prepare(void);
void hook_burst_ref_atfork_parent(void);
void hook_burst_ref_atfork_child(void);

#endif
