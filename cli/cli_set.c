/*
 * cli_set.c - see cli_set.h.  Values are typed the way the config file
 * types them (numbers, true/false, strings), so `gpushare set tq=5` and
 * `tq = 5` in broker.conf mean the same.
 */
#include "cli_set.h"

#include <stdio.h>
#include <string.h>

#include "broker_config.h"
#include "cli_client.h"
#include "protocol.h"

static void usage(FILE *out)
{
    fprintf(out, "Usage: gpushare set [--persist] KEY=VALUE...\n"
                 "Keys: policy=exclusive|burst|adaptive, scheduler=on|off, tq=SECONDS,\n"
                 "      boost_ms=MS, and the others listed in gpushare-broker(8).\n"
                 "Changes last until the broker restarts; --persist also saves them in\n"
                 "the broker's state file, read again at its next start.\n");
}

int gs_cli_set_main(int argc, char **argv, const char *endpoint)
{
    int persist = 0, first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "-h") || !strcmp(argv[first], "--help")) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[first], "--persist") != 0) {
            fprintf(stderr, "gpushare set: unknown option \"%s\"\n", argv[first]);
            usage(stderr);
            return 2;
        }
        persist = 1;
    }
    if (first >= argc) {
        usage(stderr);
        return 2;
    }
    json_t *settings = json_object();
    for (int i = first; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            fprintf(stderr, "gpushare set: \"%s\" is not KEY=VALUE\n", argv[i]);
            json_decref(settings);
            return 2;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
        json_t *value = gs_config_value_json(eq + 1);
        if (!value) {
            fprintf(stderr, "gpushare set: the value of %s is not UTF-8 text\n", key);
            json_decref(settings);
            return 2;
        }
        json_object_set_new(settings, key, value);
    }
    char err[256];
    gs_cli_client_t *client = gs_cli_client_connect(endpoint, 2000, err, sizeof err);
    if (!client) {
        fprintf(stderr, "gpushare set: %s\n", err);
        json_decref(settings);
        return 1;
    }
    json_t *req = gs_msg_new(GS_MSG_SET);
    json_object_set_new(req, "settings", settings);
    if (persist)
        json_object_set_new(req, "persist", json_true());
    json_t *reply = gs_cli_client_call(client, req, err, sizeof err);
    gs_cli_client_destroy(&client);
    if (!reply) {
        fprintf(stderr, "gpushare set: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (strcmp(gs_msg_str(reply, "type", ""), "ok") != 0) {
        fprintf(stderr, "gpushare set: refused (%s): %s\n", gs_msg_str(reply, "code", "?"),
                gs_msg_str(reply, "message", "no reason given"));
        rc = 1;
    } else {
        printf("%s\n", gs_msg_str(reply, "info", "ok"));
    }
    json_decref(reply);
    return rc;
}
