/*
 * top_render.c - see top_render.h.
 *
 * Every line is cut to the terminal's width (a wrapped line would push
 * the frame down and leave the screen scrolling), on a UTF-8 character
 * boundary (notebook paths are the user's); past the terminal's height the
 * last line says how many were left out.  Sessions are sorted by user and
 * id so that a line stays where it was from one frame to the next.
 */
#include "top_render.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "status_fetch.h"
#include "protocol.h"
#include "text_safe.h"

typedef struct {
    FILE *out;
    int width, height;
    int written, dropped;
} lines_t;

static void emit(lines_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void emit(lines_t *l, const char *fmt, ...)
{
    if (l->height > 0 && l->written >= l->height - 1) {
        l->dropped++;
        return;
    }
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    if (l->width > 0 && n > (size_t)l->width) {
        n = (size_t)l->width;
        while (n > 0 && ((unsigned char)buf[n] & 0xC0) == 0x80) /* inside a character */
            n--;
    }
    /* Other users' names and paths are in the line: no control character
     * of theirs reaches the terminal (text_safe.h), whatever sent them. */
    char safe[sizeof buf];
    buf[n] = '\0';
    gs_text_safe(safe, sizeof safe, buf);
    fprintf(l->out, "%s\n", safe);
    l->written++;
}

/* "512M", "1.5G": what fits a column of 7. */
static const char *size_text(json_int_t bytes, char *buf, size_t len)
{
    double mib = (double)bytes / (1024.0 * 1024.0);
    if (bytes <= 0)
        snprintf(buf, len, "0");
    else if (mib < 1024.0)
        snprintf(buf, len, "%.0fM", mib < 1.0 ? 1.0 : mib);
    else
        snprintf(buf, len, "%.1fG", mib / 1024.0);
    return buf;
}

double gs_top_gpu_percent(const json_t *session, const json_t *prev_session, double interval_s)
{
    if (prev_session && interval_s > 0) {
        double used =
            gs_msg_num(session, "gpu_time_s", 0) - gs_msg_num(prev_session, "gpu_time_s", 0);
        double pct = 100.0 * used / interval_s;
        return pct < 0 ? 0 : pct > 100 ? 100 : pct;
    }
    json_t *share = json_object_get(session, "share");
    return 100.0 * gs_msg_num(share, "used", 0);
}

/* The entry of session id on GPU gpu of a status object, or NULL. */
static const json_t *find_session(const json_t *st, json_int_t gpu, const char *id)
{
    size_t i, j;
    json_t *g, *s;
    json_array_foreach(json_object_get(st, "gpus"), i, g)
    {
        if (gs_msg_int(g, "index", -1) != gpu)
            continue;
        json_array_foreach(json_object_get(g, "sessions"), j, s)
        {
            if (strcmp(gs_msg_str(s, "id", ""), id) == 0)
                return s;
        }
    }
    return NULL;
}

static int by_user_then_id(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    int c = strcmp(gs_msg_str(x, "user", ""), gs_msg_str(y, "user", ""));
    return c ? c : strcmp(gs_msg_str(x, "id", ""), gs_msg_str(y, "id", ""));
}

/* What the session is doing: the scheduler's state, or the parking move
 * under way. */
static const char *state_text(const json_t *s)
{
    const char *park = gs_msg_str(s, "parking", "resident");
    if (!strcmp(park, "parking") || !strcmp(park, "unparking"))
        return park;
    return gs_msg_str(s, "state", "?");
}

static void render_gpu(lines_t *l, const gs_top_frame_t *f, const json_t *g)
{
    json_t *sessions = json_object_get(g, "sessions");
    size_t n = json_array_size(sessions);
    int running = 0, waiting = 0;
    const json_t **sorted = calloc(n ? n : 1, sizeof *sorted);
    if (!sorted)
        return;
    for (size_t i = 0; i < n; i++) {
        sorted[i] = json_array_get(sessions, i);
        const char *st = gs_msg_str(sorted[i], "state", "");
        running += !strcmp(st, "running");
        waiting += !strcmp(st, "waiting");
    }
    qsort(sorted, n, sizeof *sorted, by_user_then_id);
    json_int_t index = gs_msg_int(g, "index", 0);
    json_int_t used = gs_msg_int(g, "memory_used", 0), total = gs_msg_int(g, "memory_total", 0);
    char bar[11], a[16], b[16], c[16];
    int fill = total > 0 ? (int)((used * 10 + total - 1) / total) : 0;
    for (int i = 0; i < 10; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[10] = '\0';
    emit(l, "GPU %lld  %s  memory %s of %s [%s]  parked %s  %d running, %d waiting",
         (long long)index, gs_msg_str(g, "name", "?"), size_text(used, a, sizeof a),
         size_text(total, b, sizeof b), bar,
         size_text(gs_msg_int(g, "memory_parked", 0), c, sizeof c), running, waiting);
    if (n == 0)
        emit(l, "  no sessions");
    else
        emit(l, "  %-10s %-16s %-9s %-4s %5s %8s %8s %7s  %s", "USER", "SESSION", "STATE", "CELL",
             "GPU%", "RESIDENT", "PARKED", "WAIT s", "NOTEBOOK");
    for (size_t i = 0; i < n; i++) {
        const json_t *s = sorted[i];
        const char *id = gs_msg_str(s, "id", "?");
        const json_t *before = f->prev ? find_session(f->prev, index, id) : NULL;
        int program = strcmp(gs_msg_str(s, "kind", ""), "program") == 0;
        emit(l, "  %-10.10s %-16.16s %-9.9s %-4.4s %4.0f%% %8s %8s %7.1f  %s",
             gs_msg_str(s, "user", "?"), gs_cli_status_name(s), state_text(s),
             program ? "-" : gs_msg_str(s, "cell", "?"),
             gs_top_gpu_percent(s, before, f->interval_s),
             size_text(gs_msg_int(s, "resident_bytes", 0), a, sizeof a),
             size_text(gs_msg_int(s, "parked_bytes", 0), b, sizeof b),
             gs_msg_num(s, "wait_time_s", 0), gs_cli_status_what(s));
    }
    free(sorted);
}

void gs_top_render(FILE *out, const gs_top_frame_t *f)
{
    lines_t l = {.out = out, .width = f->width, .height = f->height};
    const char *quit = f->interactive ? "   (q quits)" : "";
    const json_t *st = f->status;
    if (!st) {
        emit(&l, "gpushare top  %s  %s%s", f->endpoint ? f->endpoint : "", f->clock, quit);
        emit(&l, "%s", "");
        emit(&l, "broker not running: %s", f->problem ? f->problem : "no reply");
        emit(&l, "trying again every %.3g s", f->interval_s);
        return;
    }
    emit(&l, "gpushare top  broker %s at %s  policy %s, scheduler %s  %s%s",
         gs_msg_str(st, "broker_version", "?"), gs_msg_str(st, "endpoint", "?"),
         gs_msg_str(st, "policy", "?"), gs_msg_str(st, "scheduler", "?"), f->clock, quit);
    if (gs_msg_bool(st, "simulated", 0))
        emit(&l, "SIMULATED GPU: no NVIDIA driver is in use; this is the test suite's simulated "
                 "driver.");
    if (json_is_string(json_object_get(st, "note")))
        emit(&l, "note: %s", gs_msg_str(st, "note", ""));
    json_t *gpus = json_object_get(st, "gpus");
    if (json_array_size(gpus) == 0)
        emit(&l, "no GPUs: %s", gs_msg_str(st, "problem", "unknown reason"));
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g)
    {
        emit(&l, "%s", "");
        render_gpu(&l, f, g);
    }
    if (l.dropped)
        fprintf(out, "... %d more line%s (a larger terminal shows them)\n", l.dropped,
                l.dropped == 1 ? "" : "s");
}
