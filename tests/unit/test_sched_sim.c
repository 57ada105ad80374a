/*
 * test_sched_sim.c - the scheduler's targets of issue 17 in virtual time
 * (sched_sim.h: the real gs_sched_* and parking's victim choice, a model
 * of the GPU, the hooks, the launcher and the swap tier with the H200's
 * costs).  Results are deterministic, so the targets are assertions:
 *
 *  - big pairs: two jobs of 4 GiB (and 32 GiB) that do not fit together,
 *    GPU and CPU phases of a 1 s period (50/50, 90/10), against running
 *    them one after the other;
 *  - the trainer: a notebook trains without pause while another runs a
 *    short cell every 1.5 s: the short cells' p50 <= 1.1 x and p99 <= 1.5 x
 *    their solo time, the trainer's loss <= their share of the GPU + 2
 *    points;
 *  - scale: 8 mostly idle notebooks (Poisson cells of 20-400 ms of GPU
 *    work, offered load <= 50 %): p99 <= 3 x solo.
 * Each test prints what it measured as TAP comments; `make -C tests/unit
 * check TESTS=test_sched_sim` reruns them (tests/unit/test_sched_sim.log),
 * SIM_TRACE=1 prints every event of a run.
 */
#include <math.h>

#include "unit_fixture.h"

#include "sched_sim.h"

/* A target the policy meets: asserted. */
static void target(const char *what, double value, double limit)
{
    int met = value <= limit + 1e-9;
    printf("# %-44s %8.3f  (target <= %.3f) %s\n", what, value, limit, met ? "met" : "MISSED");
    if (!met)
        fail_msg("%s: %.3f, target <= %.3f", what, value, limit);
}

/* A target the model says cannot be met this way (doc/scheduling.md says
 * why and what would meet it): printed, and checked against the bound the
 * model reaches so that a change for the worse shows. */
static void known_miss(const char *what, double value, double target, double bound)
{
    printf("# %-44s %8.3f  (target <= %.3f) missed: see doc/scheduling.md\n", what, value, target);
    if (value > bound + 1e-9)
        fail_msg("%s: %.3f, worse than %.3f", what, value, bound);
}

static void report(const char *what, double value)
{
    printf("# %-44s %8.3f\n", what, value);
}

static void params(sim_params_t *p)
{
    sim_params_default(p);
    p->trace = getenv("SIM_TRACE") != NULL;
}

/* ---- big pairs ---------------------------------------------------------------- */

typedef struct {
    double frac; /* of each period on the GPU */
    int64_t period, iters;
} job_t;

static int job_program(void *arg, int index, int64_t prev_end, uint64_t *rng, sim_cell_t *out)
{
    const job_t *j = arg;
    (void)prev_end, (void)rng;
    if (index > 0)
        return 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < j->iters; i++) {
        out->ph[out->nphases++] = (sim_phase_t){1, (int64_t)(j->frac * (double)j->period)};
        out->ph[out->nphases++] = (sim_phase_t){0, (int64_t)((1 - j->frac) * (double)j->period)};
    }
    return 1;
}

/* Two jobs of `gib` each on a GPU with room for one and a half, parked at
 * `bps` each way (0: the swap tier's): total time over serial (each
 * alone, one after the other). */
static double big_pair(double gib, double frac, double out_bps, double in_bps, int *switches)
{
    sim_params_t p;
    params(&p);
    if (out_bps > 0) {
        p.out_bps = out_bps;
        p.in_bps = in_bps;
    }
    p.gpu_bytes = (uint64_t)(gib * 1.5 * (double)GIB);
    p.end_us = 600 * SEC;
    job_t j = {frac, 1 * SEC, 4};
    sim_nb_spec_t nb[2] = {{"a", (uint64_t)(gib * GIB), 2 * MS, job_program, &j},
                           {"b", (uint64_t)(gib * GIB), 2 * MS, job_program, &j}};
    sim_result_t r;
    assert_int_equal(sim_run(&p, nb, 2, &r), 0);
    assert_int_equal(r.ncells, 2); /* both finished */
    int64_t total = r.finished_at[0] > r.finished_at[1] ? r.finished_at[0] : r.finished_at[1];
    double serial = 2.0 * (double)(j.iters * j.period);
    assert_true(r.gpu_done_us[0] >= (int64_t)(frac * (double)(j.iters * j.period)) - 10);
    *switches = r.parks;
    sim_result_free(&r);
    return (double)total / serial;
}

static void big_pairs_against_serial(void **state)
{
    (void)state;
    int sw;
    double r;
    /* Switches move only what the job coming back lacks (2.3 of 4 GiB
     * here: 0.08 s both ways at once; the H100 moved 2.8 GiB in 0.07 s out
     * and 0.10 s in and measured 0.68 x and 0.99 x, 2026-12-05). */
    r = big_pair(4, 0.5, 0, 0, &sw);
    report("bigpairs 4 GiB 50/50: parks", sw);
    target("bigpairs 4 GiB 50/50 vs serial", r, 0.75);
    r = big_pair(4, 0.9, 0, 0, &sw);
    report("bigpairs 4 GiB 90/10: parks", sw);
    known_miss("bigpairs 4 GiB 90/10 vs serial", r, 0.95, 1.05);
    /* At 32 GiB a switch costs more than any CPU phase: each job runs to
     * the end of its cell, and the pair makes the one switch no scheduler
     * can avoid (two parks: the one that made room for the second
     * allocation, then the switch; the H100 measured 1.04 x and 1.12 x
     * against floors of 1.06 x and 1.08 x, 2026-12-06). */
    r = big_pair(32, 0.5, 0, 0, &sw);
    report("bigpairs 32 GiB 50/50: parks", sw);
    assert_int_equal(sw, 2);
    known_miss("bigpairs 32 GiB 50/50 vs serial", r, 0.75, 1.25);
    r = big_pair(32, 0.9, 0, 0, &sw);
    report("bigpairs 32 GiB 90/10: parks", sw);
    assert_int_equal(sw, 2);
    known_miss("bigpairs 32 GiB 90/10 vs serial", r, 0.95, 1.25);
    /* The checkpoint tier (2.5 and 7.5 GB/s): the H200 run of 2026-11-21
     * measured 2.96 x and 1.93 x serial. */
    r = big_pair(4, 0.5, 2.5e9, 7.5e9, &sw);
    report("bigpairs 4 GiB 50/50, checkpoint tier: parks", sw);
    report("bigpairs 4 GiB 50/50, checkpoint tier vs serial", r);
    assert_true(r <= 1.5);
    r = big_pair(4, 0.9, 2.5e9, 7.5e9, &sw);
    report("bigpairs 4 GiB 90/10, checkpoint tier: parks", sw);
    report("bigpairs 4 GiB 90/10, checkpoint tier vs serial", r);
    assert_true(r <= 1.5);
}

/* ---- small pairs: two jobs that fit together ------------------------------------------ */

/* Two jobs that fit together, started at once: total over serial, under
 * adaptive (scheduler on) or the driver's own time slicing (off). */
static double small_pair(double frac, int enabled)
{
    sim_params_t p;
    params(&p);
    p.cfg.enabled = enabled;
    p.end_us = 600 * SEC;
    job_t j = {frac, 1 * SEC, 4};
    sim_nb_spec_t nb[2] = {{"a", 2 * GIB, 2 * MS, job_program, &j},
                           {"b", 2 * GIB, 2 * MS, job_program, &j}};
    sim_result_t r;
    assert_int_equal(sim_run(&p, nb, 2, &r), 0);
    assert_int_equal(r.ncells, 2);
    int64_t total = r.finished_at[0] > r.finished_at[1] ? r.finished_at[0] : r.finished_at[1];
    sim_result_free(&r);
    return (double)total / (2.0 * (double)(j.iters * j.period));
}

/* Started together, two jobs that alternate GPU and CPU phases share the
 * GPU in phase under the driver's time slicing (both GPU phases at half
 * speed, then both CPU phases); adaptive puts them out of phase
 * (scheduler_phases.c), one's GPU phase in the other's CPU phase. */
static void small_pairs_run_out_of_phase(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        double frac = k ? 0.9 : 0.5;
        double native = small_pair(frac, 0), adaptive = small_pair(frac, 1);
        char what[64];
        snprintf(what, sizeof what, "smallpairs %s: native vs serial", k ? "90/10" : "50/50");
        report(what, native);
        snprintf(what, sizeof what, "smallpairs %s: adaptive vs serial", k ? "90/10" : "50/50");
        report(what, adaptive);
        snprintf(what, sizeof what, "smallpairs %s: adaptive vs native", k ? "90/10" : "50/50");
        target(what, adaptive / native, k ? 1.02 : 0.9);
    }
}

/* ---- the trainer and the short cells ----------------------------------------------- */

typedef struct {
    int steps;
} trainer_t;

/* Steps without pause in one cell: 10 steps of 18 ms of GPU work, then a
 * sync (the loss read, as logging does) and 2 ms of CPU. */
static int trainer_program(void *arg, int index, int64_t prev_end, uint64_t *rng, sim_cell_t *out)
{
    const trainer_t *t = arg;
    (void)prev_end, (void)rng;
    if (index > 0)
        return 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < t->steps && out->nphases + 2 <= SIM_MAX_PHASES; i += 10) {
        out->ph[out->nphases++] = (sim_phase_t){1, 180 * MS};
        out->ph[out->nphases++] = (sim_phase_t){0, 2 * MS};
    }
    return 1;
}

typedef struct {
    int64_t every, delay;
    int count;
} short_t;

/* A cell every 1.5 s (after the previous one: a user waits for it), of 10,
 * 50 and 200 ms of GPU work in turn. */
static int short_program(void *arg, int index, int64_t prev_end, uint64_t *rng, sim_cell_t *out)
{
    const short_t *s = arg;
    static const int64_t work[3] = {10 * MS, 50 * MS, 200 * MS};
    (void)rng;
    if (index >= s->count)
        return 0;
    memset(out, 0, sizeof *out);
    out->start = s->delay + index * s->every;
    if (out->start < prev_end)
        out->start = prev_end;
    out->ph[out->nphases++] = (sim_phase_t){0, 1 * MS};
    out->ph[out->nphases++] = (sim_phase_t){1, work[index % 3]};
    out->ph[out->nphases++] = (sim_phase_t){0, 1 * MS};
    return 1;
}

/* The short cells' slowdowns while the trainer ran (started before it
 * ended), sorted; the caller frees *out. */
static int short_slowdowns(const sim_result_t *r, int64_t until, double **out)
{
    double *v = malloc(((size_t)r->ncells + 1) * sizeof *v);
    int n = 0;
    assert_non_null(v);
    for (int i = 0; i < r->ncells; i++)
        if (r->cells[i].nb == 1 && r->cells[i].start < until)
            v[n++] = (double)(r->cells[i].end - r->cells[i].start) / (double)r->cells[i].solo_us;
    for (int i = 1; i < n; i++) /* insertion sort: tens of cells */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *out = v;
    return n;
}

/* The trainer (3600 steps, 65.5 s alone) beside the short cells: its loss
 * is how much longer it took; the short cells' share is their GPU work
 * while it trained. */
static void the_trainer_loses_no_more_than_the_short_cells_use(void **state)
{
    (void)state;
    trainer_t tr = {3600};
    short_t sh = {1500 * MS, 1 * SEC, 60};
    /* The trainer keeps 2 ms of work queued ahead: on the H200, B's 10 ms
     * cells took 12 ms under adaptive, drain and round trips included
     * (doc/evaluation.md); with 5 ms, the 50 ms cells' p50 is 1.106 x. */
    sim_nb_spec_t nb[2] = {{"train", 8 * GIB, 2 * MS, trainer_program, &tr},
                           {"short", 1 * GIB, 20 * MS, short_program, &sh}};
    sim_params_t p;
    params(&p);
    p.end_us = 200 * SEC;
    sim_result_t alone, both;
    assert_int_equal(sim_run(&p, nb, 1, &alone), 0);
    assert_int_equal(sim_run(&p, nb, 2, &both), 0);
    int64_t t_alone = alone.finished_at[0], t_both = both.finished_at[0];
    assert_true(t_alone > 0 && t_both > 0);
    double loss = 1.0 - (double)t_alone / (double)t_both, used = 0;
    for (int i = 0; i < both.ncells; i++)
        if (both.cells[i].nb == 1 && both.cells[i].end <= t_both)
            used += (double)both.cells[i].gpu_us;
    double share = used / (double)t_both, *v;
    int n = short_slowdowns(&both, t_both, &v);
    assert_true(n >= 20);
    report("trainer alone, s", (double)t_alone / SEC);
    report("trainer beside the short cells, s", (double)t_both / SEC);
    report("trainer's loss, %", 100 * loss);
    report("short cells' GPU share, %", 100 * share);
    target("trainer's loss - short cells' share, points", 100 * (loss - share), 2.0);
    target("short cells p50 vs solo", sim_quantile(v, n, 0.5), 1.1);
    target("short cells p99 vs solo", sim_quantile(v, n, 0.99), 1.5);
    free(v);
    sim_result_free(&alone);
    sim_result_free(&both);
}

/* The same when their memory does not fit together (4 GiB each, 6 GiB of
 * GPU, the broker's default park_idle_s of 30 s): each short cell needs a
 * switch.  It takes what it needs: the trainer's turn is cut to the
 * shortest a switch allows (max(adaptive_min_s, 10 x its switch cost)),
 * and the short notebook, idle again, goes out as soon as it has been idle
 * for a switch cost, not park_idle_s. */
static void a_short_cell_that_does_not_fit_gets_a_switch(void **state)
{
    (void)state;
    trainer_t tr = {3600};
    short_t sh = {1500 * MS, 1 * SEC, 60};
    sim_nb_spec_t nb[2] = {{"train", 4 * GIB, 2 * MS, trainer_program, &tr},
                           {"short", 4 * GIB, 20 * MS, short_program, &sh}};
    sim_params_t p;
    params(&p);
    p.gpu_bytes = 6 * GIB;
    p.park_idle_us = 30 * SEC;
    p.end_us = 200 * SEC;
    sim_result_t alone, both;
    assert_int_equal(sim_run(&p, nb, 1, &alone), 0);
    assert_int_equal(sim_run(&p, nb, 2, &both), 0);
    int64_t t_alone = alone.finished_at[0], t_both = both.finished_at[0];
    assert_true(t_alone > 0 && t_both > 0);
    double loss = 1.0 - (double)t_alone / (double)t_both, used = 0, *v;
    for (int i = 0; i < both.ncells; i++)
        if (both.cells[i].nb == 1 && both.cells[i].end <= t_both)
            used += (double)both.cells[i].gpu_us;
    int n = short_slowdowns(&both, t_both, &v);
    int64_t longest = 0;
    for (int i = 0; i < both.ncells; i++)
        if (both.cells[i].nb == 1 && both.cells[i].end - both.cells[i].start > longest)
            longest = both.cells[i].end - both.cells[i].start;
    double share = used / (double)t_both;
    report("no fit: trainer's loss, %", 100 * loss);
    report("no fit: short cells' GPU share, %", 100 * share);
    report("no fit: switches", both.parks);
    report("no fit: short cells p99 vs solo", sim_quantile(v, n, 0.99));
    report("no fit: copying (both copies of each switch), %",
           100.0 * (double)both.copy_us / (double)t_both);
    /* A short cell waits at most for the trainer's shortest turn
     * (adaptive_min_s, 2 s: more than 10 x its switch) and a switch, and
     * one that starts while its notebook is still resident runs at once.
     * Its notebook, idle, goes out after a switch cost (the trainer waits
     * for its memory), so a cell that starts 1.3 s after the last one
     * needs a switch: the median is such a cell (8.7 x solo), unless cells
     * pile up behind a slow one (1.04 x with whole parks, which took
     * 0.25 s to go out and made every other cell start late and find its
     * notebook resident).  No switch fits in a 12-200 ms cell.  The
     * trainer loses the short cells' share, its switches (half the
     * copying: a switch's two copies overlap), at most as long again
     * waiting for the short notebook's next cell before it goes out (ski
     * rental: for one switch cost), and 2 points. */
    double copying = (double)both.copy_us / (double)t_both;
    target("no fit: short cells' longest latency, s", (double)longest / SEC, 3.5);
    known_miss("no fit: short cells p50 vs solo", sim_quantile(v, n, 0.5), 1.1, 12.0);
    target("no fit: trainer's loss - short share, points", 100 * (loss - share),
           100 * copying + 2.0);
    free(v);
    sim_result_free(&alone);
    sim_result_free(&both);
}

/* ---- scale ---------------------------------------------------------------------- */

typedef struct {
    double mean_gap_us;
} idle_nb_t;

/* Think (exponential), then a cell of 20-400 ms of GPU work (log-uniform)
 * in one to four bursts with 2 ms of CPU between them. */
static int idle_program(void *arg, int index, int64_t prev_end, uint64_t *rng, sim_cell_t *out)
{
    const idle_nb_t *a = arg;
    (void)index;
    memset(out, 0, sizeof *out);
    out->start = prev_end + (int64_t)sim_exp(rng, a->mean_gap_us);
    double work = 20e3 * exp(sim_uniform(rng) * log(400.0 / 20.0));
    int bursts = 1 + (int)(sim_uniform(rng) * 4);
    for (int i = 0; i < bursts; i++) {
        if (i)
            out->ph[out->nphases++] = (sim_phase_t){0, 2 * MS};
        out->ph[out->nphases++] = (sim_phase_t){1, (int64_t)(work / bursts)};
    }
    return 1;
}

/* n notebooks for T: p50 and p99 slowdown, offered load. */
static void scale(int n, int enabled, double gap_s, double *p50, double *p99, double *load)
{
    sim_params_t p;
    params(&p);
    p.cfg.enabled = enabled;
    p.end_us = 900 * SEC;
    p.seed = 17;
    idle_nb_t a = {gap_s * SEC};
    sim_nb_spec_t nb[SIM_MAX_NB];
    char names[SIM_MAX_NB][16];
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "nb%02d", i);
        nb[i] = (sim_nb_spec_t){names[i], 1 * GIB, 20 * MS, idle_program, &a};
    }
    sim_result_t r;
    assert_int_equal(sim_run(&p, nb, n, &r), 0);
    double *v, work = 0;
    int k = sim_slowdowns(&r, -1, &v);
    assert_true(k > 100);
    for (int i = 0; i < n; i++)
        work += (double)r.gpu_done_us[i];
    *p50 = sim_quantile(v, k, 0.5);
    *p99 = sim_quantile(v, k, 0.99);
    *load = work / (double)r.end_us;
    free(v);
    sim_result_free(&r);
}

/* Today's 13 x came from the boost serving new cells one at a time in the
 * order they started (FIFO: 14 x in bench/sched_bounds.py); they now share
 * the GPU, which is as good as the driver's own time slicing.  3 x at 47 %
 * load needs the cells' sizes (shortest first: 2.8 x; without sizes, time
 * slicing and least-attained-first both give 4.3 x). */
static void many_idle_notebooks_keep_their_tails(void **state)
{
    (void)state;
    double p50, p99, load, n50, n99, nload;
    scale(8, 1, 2.0, &p50, &p99, &load);
    scale(8, 0, 2.0, &n50, &n99, &nload);
    report("scale 8: offered load, %", 100 * load);
    assert_true(load > 0.40 && load <= 0.5);
    report("scale 8: p50 vs solo", p50);
    report("scale 8, native time slicing: p50 vs solo", n50);
    report("scale 8, native time slicing: p99 vs solo", n99);
    target("scale 8: p99 vs native time slicing's", p99 / n99, 1.1);
    known_miss("scale 8: p99 vs solo", p99, 3.0, 4.5);
    /* At lower loads the tail follows time slicing's. */
    scale(8, 1, 4.0, &p50, &p99, &load);
    report("scale 8, 24 % load: p99 vs solo", p99);
    assert_true(p99 <= 3.2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(big_pairs_against_serial),
        cmocka_unit_test(small_pairs_run_out_of_phase),
        cmocka_unit_test(the_trainer_loses_no_more_than_the_short_cells_use),
        cmocka_unit_test(a_short_cell_that_does_not_fit_gets_a_switch),
        cmocka_unit_test(many_idle_notebooks_keep_their_tails),
    };
    return cmocka_run_group_tests_name("sched_sim", tests, NULL, NULL);
}
