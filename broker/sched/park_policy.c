/*
 * park_policy.c - parking's settings, victim choice and costs (see
 * park_policy.h).  Pure functions, tested on a virtual clock.
 */
#include "park_policy.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000000LL

void gs_park_policy_config_default(gs_park_config_t *c, int ngpus, const char (*uuids)[48],
                                   uint64_t host_ram)
{
    memset(c, 0, sizeof *c);
    c->enabled = 1;
    c->swap = 1;
    c->idle_us = 30 * SEC;
    c->deep_idle_us = 3600 * SEC;
    c->disk_idle_us = 600 * SEC;
    c->budget_auto = 1;
    c->host_budget = host_ram / 2;
    c->reserve_auto = 1; /* the ledger derives it from the memory counted on */
    c->lock_timeout_us = 5 * SEC;
    c->ngpus = ngpus < 0 ? 0 : ngpus > GS_SCHED_MAX_GPUS ? GS_SCHED_MAX_GPUS : ngpus;
    for (int i = 0; uuids && i < c->ngpus; i++)
        snprintf(c->uuids[i], sizeof c->uuids[i], "%s", uuids[i]);
}

int gs_park_policy_is_key(const char *key)
{
    return !strcmp(key, "park") || !strncmp(key, "park.", 5) || !strncmp(key, "park_", 5);
}

/* Sizes are shown as JSON integers (status, metrics): at most INT64_MAX,
 * 8 EiB, far more than any host has. */
#define BYTES_LIMIT 9223372036854775808.0 /* 2^63 */

int gs_park_policy_parse_bytes(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return -1;
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= 0 && d < BYTES_LIMIT))
            return -1;
        *out = (uint64_t)d;
        return 0;
    }
    const char *t = json_string_value(v);
    if (!t)
        return -1;
    char *end;
    double d = strtod(t, &end);
    if (end == t || !(d >= 0))
        return -1;
    while (*end == ' ')
        end++;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mult = 1024.0;
        end++;
        break;
    case 'M':
        mult = 1048576.0;
        end++;
        break;
    case 'G':
        mult = 1073741824.0;
        end++;
        break;
    case 'T':
        mult = 1099511627776.0;
        end++;
        break;
    default:
        break;
    }
    if (mult > 1 && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || d * mult >= BYTES_LIMIT)
        return -1;
    *out = (uint64_t)(d * mult);
    return 0;
}

static int on_off(const json_t *v, int *out)
{
    const char *t = json_string_value(v);
    if (json_is_boolean(v))
        *out = json_is_true(v);
    else if (t && (!strcmp(t, "on") || !strcmp(t, "off")))
        *out = !strcmp(t, "on");
    else
        return -1;
    return 0;
}

static int seconds(const json_t *v, int64_t *out, int allow_zero)
{
    double x;
    if (json_is_number(v))
        x = json_number_value(v);
    else if (json_is_string(v)) {
        char *end;
        x = strtod(json_string_value(v), &end);
        if (end == json_string_value(v) || *end)
            return -1;
    } else
        return -1;
    if (!isfinite(x) || x < 0 || (!allow_zero && x == 0) || x > 86400.0 * 365)
        return -1;
    *out = (int64_t)llround(x * SEC);
    return 0;
}

static int bad(char *err, size_t errlen, const char *key, const char *what, const json_t *v)
{
    char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    snprintf(err, errlen, "%.80s: must be %s, not %.60s", key, what, text ? text : "nothing");
    free(text);
    return -1;
}

/* park.<index|uuid>: the GPU's index, or -1. */
static int gpu_of(const gs_park_config_t *c, const char *name)
{
    char *end;
    long i = strtol(name, &end, 10);
    if (end != name && !*end)
        return i >= 0 && i < c->ngpus ? (int)i : -1;
    for (int g = 0; g < c->ngpus; g++)
        if (!strcmp(c->uuids[g], name))
            return g;
    return -1;
}

int gs_park_policy_config_set(gs_park_config_t *c, const char *key, const json_t *v,
                              uint64_t host_ram, char *err, size_t errlen)
{
    if (!key || !v) {
        snprintf(err, errlen, "a setting needs a name and a value");
        return -1;
    }
    if (!strcmp(key, "park") || !strcmp(key, "park_plain") || !strcmp(key, "park_swap")) {
        int on;
        if (on_off(v, &on) != 0)
            return bad(err, errlen, key, "\"on\" or \"off\"", v);
        *(!strcmp(key, "park")        ? &c->enabled
          : !strcmp(key, "park_swap") ? &c->swap
                                      : &c->plain) = on;
        return 0;
    }
    if (!strncmp(key, "park.", 5)) {
        int g = gpu_of(c, key + 5), on;
        if (g < 0) {
            snprintf(err, errlen, "%.80s: no GPU \"%.60s\" (park.<index or UUID>)", key, key + 5);
            return -1;
        }
        if (on_off(v, &on) != 0)
            return bad(err, errlen, key, "\"on\" or \"off\"", v);
        c->gpu_off[g] = !on;
        return 0;
    }
    if (!strcmp(key, "park_disk_dir")) {
        const char *d = json_string_value(v);
        if (!d || (*d && *d != '/') || strlen(d) >= sizeof c->disk_dir)
            return bad(err, errlen, key,
                       "an absolute path (at most 255 bytes), or \"\" for no disk tier", v);
        snprintf(c->disk_dir, sizeof c->disk_dir, "%s", d);
        return 0;
    }
    if (!strcmp(key, "park_disk_budget")) {
        uint64_t b;
        if (gs_park_policy_parse_bytes(v, &b) != 0)
            return bad(err, errlen, key,
                       "bytes (a number, or with a K/M/G/T suffix; 0: what the disk has free)", v);
        c->disk_budget = b;
        return 0;
    }
    if (!strcmp(key, "park_idle_s") || !strcmp(key, "park_lock_timeout_s") ||
        !strcmp(key, "park_deep_idle_s") || !strcmp(key, "park_disk_idle_s")) {
        int zero_ok = strcmp(key, "park_lock_timeout_s") != 0;
        int64_t us;
        if (seconds(v, &us, zero_ok) != 0)
            return bad(err, errlen, key,
                       zero_ok ? "a number of seconds >= 0" : "a number of seconds > 0", v);
        *(!strcmp(key, "park_idle_s")           ? &c->idle_us
          : !strcmp(key, "park_lock_timeout_s") ? &c->lock_timeout_us
          : !strcmp(key, "park_disk_idle_s")    ? &c->disk_idle_us
                                                : &c->deep_idle_us) = us;
        return 0;
    }
    if (!strcmp(key, "park_host_budget")) {
        uint64_t b;
        if (json_is_string(v) && !strcmp(json_string_value(v), "auto")) {
            c->budget_auto = 1;
            c->host_budget = host_ram / 2;
            return 0;
        }
        if (gs_park_policy_parse_bytes(v, &b) != 0)
            return bad(err, errlen, key,
                       "bytes (a number, or with a K/M/G/T suffix) or \"auto\" (what the host "
                       "ledger allows)",
                       v);
        c->budget_auto = 0;
        c->host_budget = b;
        return 0;
    }
    if (!strcmp(key, "park_host_reserve") || !strcmp(key, "park_host_memory")) {
        int reserve = !strcmp(key, "park_host_reserve");
        uint64_t b;
        if (json_is_string(v) && !strcmp(json_string_value(v), "auto")) {
            if (reserve)
                c->reserve_auto = 1;
            else
                c->host_memory = 0;
            return 0;
        }
        if (gs_park_policy_parse_bytes(v, &b) != 0 || (!reserve && !b))
            return bad(err, errlen, key,
                       reserve ? "bytes (a number, or with a K/M/G/T suffix) or \"auto\" (a "
                                 "sixteenth of the RAM, at least 2 GiB)"
                               : "bytes above 0 (a number, or with a K/M/G/T suffix) or \"auto\" "
                                 "(the RAM, or the cgroup's limit)",
                       v);
        if (reserve) {
            c->reserve_auto = 0;
            c->host_reserve = b;
        } else
            c->host_memory = b;
        return 0;
    }
    snprintf(err, errlen,
             "%.80s: no such setting (park, park.<gpu>, park_idle_s, park_host_budget, "
             "park_host_reserve, park_host_memory, park_plain, park_swap, park_lock_timeout_s, "
             "park_deep_idle_s, park_disk_dir, park_disk_budget, park_disk_idle_s)",
             key);
    return -1;
}

json_t *gs_park_policy_config_json(const gs_park_config_t *c)
{
    json_t *o =
        json_pack("{s:s, s:f, s:s, s:s, s:f}", "park", c->enabled ? "on" : "off", "park_idle_s",
                  (double)c->idle_us / SEC, "park_plain", c->plain ? "on" : "off", "park_swap",
                  c->swap ? "on" : "off", "park_lock_timeout_s", (double)c->lock_timeout_us / SEC);
    json_object_set_new(o, "park_deep_idle_s", json_real((double)c->deep_idle_us / SEC));
    json_object_set_new(o, "park_disk_dir", json_string(c->disk_dir));
    json_object_set_new(o, "park_disk_budget", json_integer((json_int_t)c->disk_budget));
    json_object_set_new(o, "park_disk_idle_s", json_real((double)c->disk_idle_us / SEC));
    json_object_set_new(o, "park_host_budget",
                        c->budget_auto ? json_string("auto")
                                       : json_integer((json_int_t)c->host_budget));
    json_object_set_new(o, "park_host_budget_bytes", json_integer((json_int_t)c->host_budget));
    json_object_set_new(o, "park_host_reserve",
                        c->reserve_auto ? json_string("auto")
                                        : json_integer((json_int_t)c->host_reserve));
    json_object_set_new(o, "park_host_memory",
                        c->host_memory ? json_integer((json_int_t)c->host_memory)
                                       : json_string("auto"));
    for (int g = 0; g < c->ngpus; g++) {
        char k[32];
        snprintf(k, sizeof k, "park.%d", g);
        json_object_set_new(o, k, json_string(c->gpu_off[g] ? "off" : "on"));
    }
    return o;
}

/* ---- victims ------------------------------------------------------------ */

typedef struct {
    int idx;
    int tier; /* 0 idle, 2 switched out; +4 when its last park failed; +1 whole (not in part) */
    int64_t key;
} order_t;

/* What candidate v would move (and take from the host) towards `left`. */
static uint64_t take_of(const gs_park_cand_t *v, uint64_t left)
{
    if (!v->partial)
        return v->bytes;
    uint64_t t = left + v->part_slack;
    return t < v->bytes ? t : v->bytes;
}

static int cmp_order(const void *a, const void *b)
{
    const order_t *x = a, *y = b;
    if (x->tier != y->tier)
        return x->tier < y->tier ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

gs_park_pick_rc_t gs_park_policy_choose(const gs_park_cand_t *c, int n, uint64_t need,
                                        int allow_switched, uint64_t budget_left, int64_t now,
                                        int64_t idle_us, int64_t deadline, int *picked,
                                        int64_t *wait_until)
{
    order_t *ord = calloc((size_t)n + 1, sizeof *ord);
    order_t *soon = calloc((size_t)n + 1, sizeof *soon);
    int no = 0, ns = 0, budget_hit = 0;
    for (int i = 0; i < n; i++) {
        picked[i] = 0;
        if (!c[i].bytes)
            continue;
        /* A cell waiting for the GPU (time slicing) need not wait
         * park_idle_s for a notebook between cells: once it has been idle
         * for longer than a switch costs, switching it out pays. */
        int64_t idle_for =
            allow_switched && c[i].cost_us > 0 && c[i].cost_us < idle_us ? c[i].cost_us : idle_us;
        /* Its pauses between cells are usually longer than the switch: the
         * wait for a next cell that will not come soon would only idle the
         * GPU (a trainer lost 0.25 s at every short cell of its neighbour). */
        if (idle_for < idle_us && c[i].think_us > c[i].cost_us)
            idle_for = 0;
        int ready = c[i].idle       ? now - c[i].last_active >= idle_for
                    : c[i].settling ? 0
                                    : allow_switched && c[i].switched_out;
        if (ready)
            ord[no++] = (order_t){i, (c[i].idle ? 0 : 2) + (c[i].failed ? 4 : 0) + !c[i].partial,
                                  c[i].last_active};
        else if (c[i].idle)
            soon[ns++] = (order_t){i, 0, c[i].last_active + idle_for};
        else if (c[i].settling)
            soon[ns++] = (order_t){i, 0, now + (idle_us > 100000 ? idle_us : 100000)};
        else if (allow_switched && c[i].switch_at > now)
            soon[ns++] = (order_t){i, 0, c[i].switch_at};
    }
    qsort(ord, (size_t)no, sizeof *ord, cmp_order);
    uint64_t sum = 0, host = 0;
    uint64_t *took = calloc((size_t)n + 1, sizeof *took);
    for (int k = 0; took && k < no && sum < need; k++) {
        const gs_park_cand_t *v = &c[ord[k].idx];
        uint64_t t = take_of(v, need - sum);
        uint64_t h = v->host_bytes; /* its lease: all it can move (park_swap.c) */
        if (host + h > budget_left) {
            budget_hit = 1;
            continue;
        }
        picked[ord[k].idx] = 1;
        took[ord[k].idx] = t;
        sum += t;
        host += h;
    }
    gs_park_pick_rc_t rc;
    if (took && sum >= need) {
        /* Prune: drop victims the others cover, most recently active first,
         * so least recently active ones are the ones kept. */
        for (int k = no - 1; k >= 0; k--) {
            int i = ord[k].idx;
            if (picked[i] && sum - took[i] >= need) {
                picked[i] = 0;
                sum -= took[i];
            }
        }
        rc = GS_PICK_OK;
    } else {
        for (int i = 0; i < n; i++)
            picked[i] = 0;
        /* Would sessions that become idle long enough soon be enough? */
        qsort(soon, (size_t)ns, sizeof *soon, cmp_order);
        uint64_t more = sum;
        rc = budget_hit ? GS_PICK_BUDGET : GS_PICK_NONE;
        for (int k = 0; k < ns; k++) {
            if (soon[k].key > deadline)
                break;
            const gs_park_cand_t *v = &c[soon[k].idx];
            uint64_t t = take_of(v, need > more ? need - more : 0);
            uint64_t h = v->host_bytes;
            if (host + h > budget_left) {
                budget_hit = 1;
                continue;
            }
            host += h;
            more += t;
            if (more >= need) {
                *wait_until = soon[k].key;
                rc = GS_PICK_WAIT;
                break;
            }
        }
        if (rc != GS_PICK_WAIT && budget_hit)
            rc = GS_PICK_BUDGET;
    }
    free(ord);
    free(soon);
    free(took);
    return rc;
}

/* ---- costs --------------------------------------------------------------- */

void gs_park_policy_rate_update(double *bps, uint64_t bytes, double seconds)
{
    if (bytes < (1u << 20) || seconds < 0.001)
        return;
    double r = (double)bytes / seconds;
    *bps = *bps > 0 ? 0.5 * *bps + 0.5 * r : r;
}

/* ---- tiers ------------------------------------------------------------------- */

int gs_park_policy_deep(const gs_park_config_t *c, int64_t idle_for_us, int checkpoint_ok)
{
    return checkpoint_ok && c->deep_idle_us > 0 && idle_for_us >= c->deep_idle_us;
}

int gs_park_policy_demote(const gs_park_config_t *c, int64_t parked_for_us, uint64_t bytes,
                          uint64_t free_bytes, uint64_t margin, int wanted, int checkpoint_ok)
{
    return !wanted && gs_park_policy_deep(c, parked_for_us, checkpoint_ok) &&
           free_bytes >= bytes + margin;
}
