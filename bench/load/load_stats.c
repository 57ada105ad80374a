/*
 * load_stats.c - the latency histogram and the counters of the load test
 * (load.h).  Each worker thread has its own, merged at the end: nothing is
 * shared while the storm runs.
 */
#include <stdio.h>
#include <string.h>

#include "load.h"

#define EXACT (2 * LOAD_HIST_SUB) /* values below this have a bucket each */

static int bucket_of(int64_t v)
{
    if (v < 0)
        v = 0;
    if (v < EXACT)
        return (int)v;
    int msb = 63 - __builtin_clzll((unsigned long long)v);
    int shift = msb - 6; /* v >> shift is in [64, 127] */
    int i = EXACT + (shift - 1) * LOAD_HIST_SUB + (int)((v >> shift) - LOAD_HIST_SUB);
    return i < LOAD_HIST_BUCKETS ? i : LOAD_HIST_BUCKETS - 1;
}

/* The largest value that falls into bucket i. */
static int64_t bucket_top(int i)
{
    if (i < EXACT)
        return i;
    int shift = (i - EXACT) / LOAD_HIST_SUB + 1;
    int64_t m = LOAD_HIST_SUB + (i - EXACT) % LOAD_HIST_SUB;
    return ((m + 1) << shift) - 1;
}

void load_hist_add(load_hist_t *h, int64_t us)
{
    h->counts[bucket_of(us)]++;
    h->n++;
    h->sum += (double)us;
    if (us > h->max)
        h->max = us;
}

void load_hist_merge(load_hist_t *dst, const load_hist_t *src)
{
    for (int i = 0; i < LOAD_HIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
    dst->n += src->n;
    dst->sum += src->sum;
    if (src->max > dst->max)
        dst->max = src->max;
}

int64_t load_hist_quantile(const load_hist_t *h, double q)
{
    if (!h->n)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->n);
    if (rank >= h->n)
        rank = h->n - 1;
    uint64_t seen = 0;
    for (int i = 0; i < LOAD_HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen > rank) {
            int64_t top = bucket_top(i);
            return top < h->max ? top : h->max;
        }
    }
    return h->max;
}

/* n errors of code; codes past the table are counted in errors only. */
static void add_code(load_counters_t *c, const char *code, uint64_t n)
{
    for (int i = 0; i < LOAD_MAX_CODES; i++) {
        if (!c->codes[i].code[0])
            snprintf(c->codes[i].code, sizeof c->codes[i].code, "%s", code);
        if (!strcmp(c->codes[i].code, code)) {
            c->codes[i].n += n;
            return;
        }
    }
}

void load_counters_error(load_counters_t *c, const char *code, const char *text)
{
    c->errors++;
    if (!c->first_error[0])
        snprintf(c->first_error, sizeof c->first_error, "%s: %s", code, text);
    add_code(c, code, 1);
}

void load_counters_merge(load_counters_t *dst, const load_counters_t *src)
{
    for (int t = 0; t < GS_MSG_COUNT; t++) {
        dst->sent[t] += src->sent[t];
        dst->received[t] += src->received[t];
    }
    dst->measured_msgs += src->measured_msgs;
    dst->grants += src->grants;
    dst->grants_measured += src->grants_measured;
    dst->revokes += src->revokes;
    dst->releases += src->releases;
    dst->stale += src->stale;
    dst->bad_frame += src->bad_frame;
    dst->errors += src->errors;
    for (int i = 0; i < LOAD_MAX_CODES && src->codes[i].code[0]; i++)
        add_code(dst, src->codes[i].code, src->codes[i].n);
    if (!dst->first_error[0])
        snprintf(dst->first_error, sizeof dst->first_error, "%s", src->first_error);
    load_hist_merge(&dst->latency, &src->latency);
}

uint64_t load_counters_total(const uint64_t *by_type)
{
    uint64_t n = 0;
    for (int t = 0; t < GS_MSG_COUNT; t++)
        n += by_type[t];
    return n;
}
