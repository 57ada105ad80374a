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
    fprintf(out, "Usage: gpushare set KEY=VALUE...\n"
                 "Keys: policy=exclusive|burst|adaptive, scheduler=on|off, tq=SECONDS,\n"
                 "      boost_ms=MS, and the others listed in gpushare-broker(8).\n");
}

int gs_cli_set_main(int argc, char **argv, const char *endpoint)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    json_t *settings = json_object();
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            fprintf(stderr, "gpushare set: \"%s\" is not KEY=VALUE\n", argv[i]);
            json_decref(settings);
            return 2;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
        json_object_set_new(settings, key, gs_config_value_json(eq + 1));
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
