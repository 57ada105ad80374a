/*
 * metrics_text.c - the Prometheus text exposition (format 0.0.4) of the
 * broker's status object: see gs_metrics_render in metrics.h.  Pure: no
 * I/O, so that it can be read and tested apart from the HTTP server.
 */
#define _GNU_SOURCE /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* Label values are escaped per the exposition format. */
static void label(FILE *out, const char *name, const char *value)
{
    fprintf(out, "%s=\"", name);
    for (const char *p = value ? value : ""; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', out);
        if (*p == '\n')
            fputs("\\n", out);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static double num(const json_t *obj, const char *key)
{
    return json_number_value(json_object_get(obj, key));
}

static const char *str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

/* One metric family: its name, Prometheus type and help, and the status
 * key its value is read from. */
typedef struct {
    const char *name, *type, *help, *key;
} metric_t;

static void header(FILE *out, const metric_t *m)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
}

char *gs_metrics_render(const json_t *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    fprintf(out,
            "# HELP gpushare_scheduler_on 1 when the scheduler gates GPU work.\n"
            "# TYPE gpushare_scheduler_on gauge\n"
            "gpushare_scheduler_on %d\n",
            strcmp(str(st, "scheduler"), "on") == 0);
    static const metric_t gpu_metrics[] = {
        {"gpushare_gpu_memory_total_bytes", "gauge", "GPU memory.", "memory_total"},
        {"gpushare_gpu_memory_used_bytes", "gauge", "GPU memory held by sessions.", "memory_used"},
        {"gpushare_gpu_memory_parked_bytes", "gauge",
         "GPU memory of its sessions parked in host RAM.", "memory_parked"},
    };
    /* The swap tier's host pool of each GPU (status: parking.pool[], by index). */
    static const metric_t pool_metrics[] = {
        {"gpushare_pool_pinned_bytes", "gauge", "Host memory the GPU's pool has pinned.",
         "pinned_bytes"},
        {"gpushare_pool_lent_bytes", "gauge", "Pinned host memory lent to parked sessions.",
         "lent_bytes"},
        {"gpushare_pool_target_bytes", "gauge", "What the pool pins towards.", "target_bytes"},
    };
    static const metric_t session_metrics[] = {
        {"gpushare_session_resident_bytes", "gauge", "Session memory on the GPU.",
         "resident_bytes"},
        {"gpushare_session_parked_bytes", "gauge", "Session memory parked in host RAM.",
         "parked_bytes"},
        {"gpushare_session_gpu_seconds_total", "counter", "Time holding the GPU.", "gpu_time_s"},
        {"gpushare_session_wait_seconds_total", "counter", "Time waiting for the GPU.",
         "wait_time_s"},
        {"gpushare_session_grants_total", "counter", "Grants received.", "grants"},
        {"gpushare_session_revokes_total", "counter", "Grants revoked.", "revokes"},
    };
    json_t *gpus = json_object_get(st, "gpus");
    for (size_t m = 0; m < sizeof gpu_metrics / sizeof *gpu_metrics; m++) {
        header(out, &gpu_metrics[m]);
        size_t i;
        json_t *g;
        json_array_foreach(gpus, i, g)
        {
            fprintf(out, "%s{", gpu_metrics[m].name);
            label(out, "gpu", str(g, "uuid"));
            fprintf(out, "} %.0f\n", num(g, gpu_metrics[m].key));
        }
    }
    /* Where the sessions' memory is, per tier (status' parking.tiers). */
    json_t *tiers = json_object_get(json_object_get(st, "parking"), "tiers");
    static const metric_t tier_metrics[] = {
        {"gpushare_tier_bytes", "gauge",
         "Session memory per tier: gpu (resident), pool, checkpoint, disk.", "bytes"},
        {"gpushare_tier_sessions", "gauge", "Sessions with memory on each tier.", "sessions"},
    };
    for (size_t m = 0; json_object_size(tiers) && m < sizeof tier_metrics / sizeof *tier_metrics;
         m++) {
        header(out, &tier_metrics[m]);
        const char *name;
        json_t *t;
        json_object_foreach(tiers, name, t)
        {
            fprintf(out, "%s{", tier_metrics[m].name);
            label(out, "tier", name);
            fprintf(out, "} %.0f\n", num(t, tier_metrics[m].key));
        }
    }
    json_t *pools = json_object_get(json_object_get(st, "parking"), "pool");
    for (size_t m = 0; json_array_size(pools) && m < sizeof pool_metrics / sizeof *pool_metrics;
         m++) {
        header(out, &pool_metrics[m]);
        size_t i;
        json_t *pl;
        json_array_foreach(pools, i, pl)
        {
            json_t *g =
                json_array_get(gpus, (size_t)json_integer_value(json_object_get(pl, "gpu")));
            if (!g)
                continue;
            fprintf(out, "%s{", pool_metrics[m].name);
            label(out, "gpu", str(g, "uuid"));
            fprintf(out, "} %.0f\n", num(pl, pool_metrics[m].key));
        }
    }
    for (size_t m = 0; m < sizeof session_metrics / sizeof *session_metrics; m++) {
        header(out, &session_metrics[m]);
        size_t i, j;
        json_t *g, *s;
        json_array_foreach(gpus, i, g)
        {
            json_array_foreach(json_object_get(g, "sessions"), j, s)
            {
                fprintf(out, "%s{", session_metrics[m].name);
                label(out, "gpu", str(g, "uuid"));
                fputc(',', out);
                label(out, "session", str(s, "id"));
                fputc(',', out);
                label(out, "user", str(s, "user"));
                fprintf(out, "} %.17g\n", num(s, session_metrics[m].key));
            }
        }
    }
    fclose(out);
    return buf;
}
