/*
 * scheduler_turns.c - when switching sessions pays (issue 17), for the
 * adaptive policy's time slicing by parking.
 *
 * A switch parks one session's memory and brings another's back; its cost
 * is measured (gs_sched_set_move_rates: the bytes over each direction's
 * rate).  Two rules keep copying from eating the GPU:
 *  - a turn (a session's time on the GPU, from its grant) lasts at least
 *    10 x its switch cost, so copies take at most a tenth of the GPU's time;
 *  - a cell that has just started is not switched out before it asks
 *    for the GPU, for its switch cost;
 *  - a running cell that gives the GPU back by itself between its GPU
 *    phases keeps its turn: it is switched out only when the turn is over,
 *    or when its GPU has been idle for longer than a switch costs, or when
 *    its measured idle gaps are that long (the switch then fits in its own
 *    CPU phase: the cheap one, and how two jobs that do not fit together
 *    overlap one's CPU phase with the other's GPU phase).
 * Holders are asked to give the GPU back sooner while a switch is wanted
 * (sched_turns_idle_hint): a tenth of the switch cost, so that noticing the idle
 * gap costs at most a tenth of what the switch does.
 */
#include "scheduler_turns.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS       1000LL
#define HINT_MIN (10 * MS) /* no idle release sooner: pauses between kernels */
#define HINT_MAX (200 * MS)

int64_t sched_turns_switch_cost(const sess_gpu_t *g)
{
    const gs_sched_move_t *m = &g->move;
    if (!g->footprint || m->out_bps <= 0 || m->in_bps <= 0)
        return 0;
    double bytes = (double)(m->bytes ? m->bytes : g->footprint);
    double s = bytes / m->out_bps + bytes / m->in_bps;
    return (int64_t)llround((m->overlapped ? 0.5 * s : s) * 1e6);
}

int64_t sched_turns_end(const sess_gpu_t *g)
{
    if (!g->turn_start)
        return 0;
    int64_t floor = SCHED_SLICE_FACTOR * sched_turns_switch_cost(g);
    return g->turn_start + (g->turn_slice > floor ? g->turn_slice : floor);
}

/* What is left of a turn that is not worth a grant: shorter than the
 * holder's idle release would be, it would be revoked as it arrived.  (In
 * CI a notebook that gave the GPU back 0.1 ms before its turn ended was
 * granted that 0.1 ms and revoked for "quantum" at once.) */
static int64_t median(const int64_t *values, int n);

static int64_t turn_margin(const sess_gpu_t *g)
{
    int64_t hint = sched_turns_idle_hint(g);
    int64_t m = hint > HINT_MIN ? hint : HINT_MIN;
    /* A session that would be switched out (it has a switch cost) does not
     * begin a GPU phase that the rest of its turn cannot hold: revoked half
     * way, it would come back for the rest, two switches more.  (On the
     * H200 a 90/10 pair of 4 GiB jobs, phases of 1.07 s in turns of 2 s:
     * the second phase of each turn was revoked 0.96 s in and brought back
     * for 0.09 s.)  Its turn ends at the idle release before it instead,
     * where the switch overlaps its CPU phase.  At most 3/4 of the slice,
     * so that a turn holds at least one phase. */
    int64_t phase = median(g->phases, g->nphases);
    if (phase > m && sched_turns_switch_cost(g) > 0) {
        int64_t slice = sched_turns_end(g) - g->turn_start, cap = slice / 4 * 3;
        m = phase < cap ? phase : cap > m ? cap : m;
    }
    return m;
}

/* When the turn is over for grants and switches (0: no turn). */
static int64_t turn_over_at(const sess_gpu_t *g)
{
    return g->turn_start ? sched_turns_end(g) - turn_margin(g) : 0;
}

int sched_turns_live(const sess_gpu_t *g, int64_t now)
{
    return g->turn_start && now < turn_over_at(g);
}

int64_t sched_turns_switch_due(const sess_gpu_t *g, int64_t now)
{
    if (!g->turn_start || g->holding || sched_turns_live(g, now))
        return 0;
    int64_t until = sched_turns_end(g) + sched_turns_switch_cost(g);
    return now < until ? until : 0;
}

void sched_turns_begin(sess_gpu_t *g, int64_t slice, int64_t now)
{
    g->turn_start = now > 0 ? now : 1; /* (0 means no turn) */
    g->turn_slice = slice;
    g->turns++;
}

/* The last SCHED_GAPS values: v goes at *next, the oldest giving way. */
static void ring_push(int64_t *ring, int *n, int *next, int64_t v)
{
    ring[*next] = v;
    *next = (*next + 1) % SCHED_GAPS;
    if (*n < SCHED_GAPS)
        (*n)++;
}

/* (An idle gap under way goes on being measured: switched out or not, the
 * program's CPU phase lasts as long.) */
void sched_turns_over(sess_gpu_t *g)
{
    g->turn_start = 0;
    g->turn_slice = 0;
}

/* Gaps are measured inside a running cell (between cells the user
 * thinks), and for programs without cells between any two bursts: a gap
 * opens only then.  (Checked at its close alone, the hook's idle release
 * that came after the cell had ended opened a gap that the next cell's
 * first acquire closed, seconds later: on the H200 gaps of 22-34 s made
 * every 0.1 s CPU phase of a 90/10 pair look long enough to switch in.) */
void sched_turns_gap_open(const sched_session_t *ss, sess_gpu_t *g, int64_t now)
{
    if (ss->registered && !ss->cell_busy)
        return;
    g->released_at = now > 0 ? now : 1;
    /* The GPU phase that ends here (a new cell starts a new record, as
     * its gaps do). */
    if (g->gaps_stale)
        g->nphases = g->phase_next = 0;
    if (g->hold_start && now > g->hold_start) {
        ring_push(g->phases, &g->nphases, &g->phase_next, now - g->hold_start);
    }
}

void sched_turns_gap_close(const sched_session_t *ss, sess_gpu_t *g, int64_t now)
{
    if (!g->released_at)
        return;
    int switched = g->gap_switched;
    g->gap_switched = 0;
    if (!ss->registered || ss->cell_busy) {
        /* A new cell is a new program: its first gap replaces the last
         * cell's.  (Until then they are the best guess: a cell run again.)
         * On the H200 a 50/50 pair kept the 0.06 s CPU phases of the 90/10
         * cells before it for three of its four phases, and waited a switch
         * cost of idle GPU before each switch. */
        if (g->gaps_stale) {
            g->ngaps = g->gap_next = 0;
            g->gaps_stale = 0;
        }
        g->gap_was_switched[g->gap_next] = (unsigned char)switched;
        ring_push(g->gaps, &g->ngaps, &g->gap_next, now - g->released_at);
    }
    g->released_at = 0;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median of n (<= SCHED_GAPS) values, 0 for none. */
static int64_t median(const int64_t *values, int n)
{
    if (n <= 0)
        return 0;
    int64_t v[SCHED_GAPS];
    memcpy(v, values, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp64);
    return v[n / 2];
}

/* The median of the last gaps: one short pause among long CPU phases (or
 * the reverse) does not change the prediction. */
int64_t sched_turns_idle_gap(const sess_gpu_t *g)
{
    /* A gap it was switched out in says less of what staying costs than
     * one it stayed in: the switch lengthens it (its hook copies in its
     * process while the program computes).  On the H200 a 50/50 pair of
     * 32 GiB jobs had CPU phases of 0.35 s staying and 0.55 s switched,
     * against a switch of 0.47 s.  The gaps it stayed in, when it has any. */
    int64_t stayed[SCHED_GAPS];
    int n = 0;
    for (int i = 0; i < g->ngaps; i++)
        if (!g->gap_was_switched[i])
            stayed[n++] = g->gaps[i];
    return n ? median(stayed, n) : median(g->gaps, g->ngaps);
}

void sched_turns_think_mark(sched_session_t *ss, int busy, int64_t now)
{
    if (!busy) {
        ss->cell_end = now > 0 ? now : 1;
        return;
    }
    if (!ss->cell_end)
        return;
    ring_push(ss->thinks, &ss->nthinks, &ss->think_next, now - ss->cell_end);
}

/* (Fewer than three say little: a user who ran one cell twice.) */
int64_t sched_turns_think_gap(const sched_session_t *ss)
{
    return ss->nthinks < 3 ? 0 : median(ss->thinks, ss->nthinks);
}

int sched_turns_switchable(const sched_session_t *ss, const sess_gpu_t *g, int64_t now, int64_t *at)
{
    *at = GS_SCHED_NEVER;
    if (g->holding)
        return 0;
    int64_t cost = sched_turns_switch_cost(g);
    if (!cost)
        return 1;
    /* A cell that has just started and not had the GPU yet is about to ask
     * for it: switched out now, it would be brought back at once.  (Two
     * 32 GiB jobs that started together on the H200: the resident one was
     * parked for the other before its first acquire came, a switch of
     * 0.8 s more than one after the other.)  It keeps its memory for its
     * switch cost. */
    if (ss->cell_busy && g->hold_start < ss->cell_start && now < ss->cell_start + cost) {
        *at = ss->cell_start + cost;
        return 0;
    }
    if (!sched_turns_live(g, now))
        return 1;
    /* An idle GPU for as long as a switch costs says the gap is a long
     * one (the ski rental: wait what a switch costs, then switch), unless
     * the measured gaps say how long it lasts: when they are shorter than
     * a switch, a gap twice the usual is the sign.  (On the H200 a 50/50
     * pair of 32 GiB jobs, gaps of 0.37-0.57 s and a switch of 0.47 s:
     * switched out after 0.47 s of idle GPU, it came back 0.5 s later, the
     * GPU idle for a second where staying idled it for the gap.) */
    int64_t gap = sched_turns_idle_gap(g), wait = cost;
    if (g->ngaps >= 3 && gap < cost && 2 * gap > wait)
        wait = 2 * gap;
    if (g->released_at && (now - g->released_at >= wait || gap >= cost))
        return 1;
    *at = turn_over_at(g);
    if (g->released_at && g->released_at + wait < *at)
        *at = g->released_at + wait;
    return 0;
}

int64_t sched_turns_idle_hint(const sess_gpu_t *g)
{
    int64_t cost = sched_turns_switch_cost(g);
    if (!cost)
        return 0;
    int64_t h = cost / SCHED_SLICE_FACTOR;
    return h < HINT_MIN ? HINT_MIN : h > HINT_MAX ? HINT_MAX : h;
}
