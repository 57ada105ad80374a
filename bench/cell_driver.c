/*
 * cell_driver.c - plays the launcher's part for GPU runs where Jupyter is
 * not installed (the H200 machine): registers notebook sessions and
 * reports their cells to the broker, exactly the messages gpushare-launch's
 * watcher sends, driven line by line from stdin:
 *   register SESSION | busy SESSION | idle SESSION | status | quit
 * Each command answers one line on stdout ("ok ..." or the status JSON).
 */
#include <czmq.h>
#include <unistd.h>

#include "protocol.h"
#include "wire.h"

static zsock_t *sock;
static long long seq;

static json_t *call(json_t *m, gs_msg_type_t want)
{
    json_object_set_new(m, "seq", json_integer(++seq));
    gs_perr_t err;
    gs_wire_send(sock, NULL, m, &err);
    json_decref(m);
    if (want == GS_MSG_COUNT)
        return NULL;
    for (;;) {
        gs_msg_type_t type;
        json_t *r = gs_wire_recv(sock, NULL, &type, &err, NULL, NULL);
        if (!r)
            return NULL;
        if (type == want || type == GS_MSG_ERROR)
            return r;
        json_decref(r);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cell_driver ENDPOINT\n");
        return 2;
    }
    zsys_handler_set(NULL);
    sock = zsock_new(ZMQ_DEALER);
    zsock_set_rcvtimeo(sock, 10000);
    if (zsock_connect(sock, "%s", argv[1]) != 0)
        return 1;
    json_t *h = gs_msg_new(GS_MSG_HELLO);
    json_object_set_new(h, "role", json_string("launcher"));
    json_object_set_new(h, "pid", json_integer(getpid()));
    json_decref(call(h, GS_MSG_WELCOME));
    char line[256], cmd[32], arg[160];
    long long msg = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        arg[0] = '\0';
        if (sscanf(line, "%31s %159s", cmd, arg) < 1)
            continue;
        if (!strcmp(cmd, "quit"))
            break;
        if (!strcmp(cmd, "register")) {
            json_t *m = gs_msg_new(GS_MSG_REGISTER);
            json_object_set_new(m, "kernel_id", json_string(arg));
            json_object_set_new(m, "user", json_string(getenv("USER") ? getenv("USER") : "gpu"));
            json_object_set_new(m, "notebook", json_string(arg));
            json_object_set_new(m, "pid", json_integer(getpid()));
            json_t *r = call(m, GS_MSG_REGISTERED);
            printf("ok %s\n", r ? gs_msg_str(r, "session", "?") : "no reply");
            json_decref(r);
        } else if (!strcmp(cmd, "busy") || !strcmp(cmd, "idle")) {
            json_t *m = gs_msg_new(GS_MSG_CELL);
            char id[32];
            snprintf(id, sizeof id, "m%lld", !strcmp(cmd, "busy") ? ++msg : msg);
            json_object_set_new(m, "session", json_string(arg));
            json_object_set_new(m, "state", json_string(cmd));
            json_object_set_new(m, "msg_id", json_string(id));
            call(m, GS_MSG_COUNT);
            printf("ok %s %s\n", cmd, arg);
        } else if (!strcmp(cmd, "park")) { /* as %gpushare release asks */
            json_t *m = gs_msg_new(GS_MSG_PARK);
            json_object_set_new(m, "session", json_string(arg));
            json_t *r = call(m, GS_MSG_OK);
            printf("%s %s\n", r && !strcmp(gs_msg_str(r, "type", ""), "ok") ? "ok" : "error",
                   r ? gs_msg_str(r, "info", gs_msg_str(r, "message", "")) : "no reply");
            json_decref(r);
        } else if (!strcmp(cmd, "status")) {
            json_t *r = call(gs_msg_new(GS_MSG_STATUS), GS_MSG_STATUS_REPLY);
            char *text = r ? json_dumps(json_object_get(r, "status"), JSON_COMPACT) : NULL;
            printf("%s\n", text ? text : "null");
            free(text);
            json_decref(r);
        } else {
            printf("error unknown command %s\n", cmd);
        }
    }
    zsock_destroy(&sock);
    return 0;
}
