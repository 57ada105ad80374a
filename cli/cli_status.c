/*
 * cli_status.c - see cli_status.h.
 */
#include "cli_status.h"

#include <getopt.h>
#include <string.h>

#include "cli_client.h"
#include "cli_top.h"
#include "status_fetch.h"
#include "protocol.h"

static double gib(json_int_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

void gs_cli_status_print(FILE *out, const json_t *st)
{
    fprintf(out, "gpushare broker %s at %s\n", gs_msg_str(st, "broker_version", "?"),
            gs_msg_str(st, "endpoint", "?"));
    fprintf(out, "policy %s, scheduler %s, driver %s\n", gs_msg_str(st, "policy", "?"),
            gs_msg_str(st, "scheduler", "?"), gs_msg_str(st, "driver", "?"));
    if (gs_msg_bool(st, "simulated", 0))
        fprintf(out, "SIMULATED GPU: no NVIDIA driver is in use; this is the test suite's "
                     "simulated driver.\n");
    if (json_is_string(json_object_get(st, "note")))
        fprintf(out, "note: %s\n", gs_msg_str(st, "note", ""));
    /* Capacity: what the host can still hold of parked memory, and why
     * (the broker's host ledger, doc/parking.md). */
    json_t *host = json_object_get(json_object_get(st, "parking"), "host");
    if (json_is_object(host))
        fprintf(out,
                "host memory for parking: %.1f GiB free of %.1f GiB (%.1f GiB pinned, %.1f GiB in "
                "checkpoint images, %.1f GiB kept in reserve; bound by %s)\n",
                gib(gs_msg_int(host, "room_bytes", 0)), gib(gs_msg_int(host, "capacity_bytes", 0)),
                gib(gs_msg_int(host, "pinned_bytes", 0)), gib(gs_msg_int(host, "images_bytes", 0)),
                gib(gs_msg_int(host, "reserve_bytes", 0)), gs_msg_str(host, "bound", "?"));
    json_t *gpus = json_object_get(st, "gpus");
    if (json_array_size(gpus) == 0)
        fprintf(out, "no GPUs: %s\n", gs_msg_str(st, "problem", "unknown reason"));
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g)
    {
        fprintf(out, "GPU %lld  %s  %s  %.1f of %.1f GiB used, %.1f GiB parked%s\n",
                gs_msg_int(g, "index", 0), gs_msg_str(g, "name", "?"), gs_msg_str(g, "uuid", "?"),
                gib(gs_msg_int(g, "memory_used", 0)), gib(gs_msg_int(g, "memory_total", 0)),
                gib(gs_msg_int(g, "memory_parked", 0)),
                gs_msg_bool(g, "simulated", 0) ? "  (simulated)" : "");
        json_t *sessions = json_object_get(g, "sessions");
        if (json_array_size(sessions) == 0)
            fprintf(out, "  no sessions\n");
        size_t j;
        json_t *s;
        if (json_array_size(sessions) > 0)
            fprintf(out, "  %-36s %-10s %-8s %-5s %9s %9s %8s %8s  %s\n", "SESSION", "USER",
                    "STATE", "CELL", "RESIDENT", "PARKED", "GPU s", "WAIT s", "NOTEBOOK");
        json_array_foreach(sessions, j, s)
        {
            fprintf(out, "  %-36.36s %-10.10s %-8s %-5s %8.2fG %8.2fG %8.1f %8.1f  %s\n",
                    gs_cli_status_name(s), gs_msg_str(s, "user", "?"), gs_msg_str(s, "state", "?"),
                    strcmp(gs_msg_str(s, "kind", ""), "program") ? gs_msg_str(s, "cell", "?") : "-",
                    gib(gs_msg_int(s, "resident_bytes", 0)), gib(gs_msg_int(s, "parked_bytes", 0)),
                    gs_msg_num(s, "gpu_time_s", 0), gs_msg_num(s, "wait_time_s", 0),
                    gs_cli_status_what(s));
            /* The user column is the owner's account; a different name its
             * launcher registered is only a claim, said as such. */
            const char *claimed = gs_msg_str(s, "claimed_user", NULL);
            if (claimed)
                fprintf(out, "  %-36s registered as user \"%s\" (a claim; the owner is %s)\n", "",
                        claimed, gs_msg_str(s, "user", "?"));
            const char *park = gs_msg_str(s, "parking", "resident");
            if (strcmp(park, "resident") != 0)
                fprintf(out, "  %-36s parking: %s\n", "", park);
            if (gs_msg_int(s, "back_needs_bytes", 0) > 0)
                fprintf(out, "  %-36s needs %.2f GiB free on this GPU to come back\n", "",
                        gib(gs_msg_int(s, "back_needs_bytes", 0)));
            /* Several GPUs (doc/multi-gpu.md): held together, moved, or not. */
            if (gs_msg_bool(s, "gang", 0))
                fprintf(out, "  %-36s holds its GPUs together (a session of several GPUs)\n", "");
            if (gs_msg_int(s, "moves", 0) > 0)
                fprintf(out, "  %-36s moved to this GPU from another (%lld move%s)\n", "",
                        gs_msg_int(s, "moves", 0), gs_msg_int(s, "moves", 0) == 1 ? "" : "s");
            if (json_is_string(json_object_get(s, "move_refused")))
                fprintf(out, "  %-36s %s\n", "", gs_msg_str(s, "move_refused", ""));
        }
    }
}

int gs_cli_status_main(int argc, char **argv, const char *endpoint)
{
    int as_json = 0;
    static const struct option longopts[] = {{"json", no_argument, 0, 'j'},
                                             {"watch", no_argument, 0, 'w'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 0; /* afresh: gpushare's own options were parsed with other rules */
    while ((c = getopt_long(argc, argv, "jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            as_json = 1;
            break;
        case 'w': { /* the same as `gpushare top` */
            char *top[] = {"top", NULL};
            return gs_cli_top_main(1, top, endpoint);
        }
        case 'h':
            printf("Usage: gpushare status [--json | --watch]\n"
                   "The broker's policy and, per GPU, its memory and sessions.\n"
                   "--json: the status object (doc/protocol.md); --watch: the same as\n"
                   "`gpushare top`, a live view.\n");
            return 0;
        default:
            fprintf(stderr, "Usage: gpushare status [--json | --watch]\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpushare status: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    char err[512];
    json_t *st = gs_cli_status_fetch(endpoint, 2000, err, sizeof err);
    if (!st) {
        fprintf(stderr, "gpushare status: %s\n", err);
        return 1;
    }
    if (as_json) {
        json_dumpf(st, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
        fputc('\n', stdout);
    } else {
        gs_cli_status_print(stdout, st);
    }
    json_decref(st);
    return 0;
}
