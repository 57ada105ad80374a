/*
 * hook_place.c - which GPUs the process sees, on a server with several
 * (issue 18): at the program's cuInit, before the driver reads
 * CUDA_VISIBLE_DEVICES, a process of a session asks the broker with a
 * hello of its own (role hook, its session, GPUSHARE_GPUS, and the
 * CUDA_VISIBLE_DEVICES its spawner set, if any); a welcome that names
 * devices sets CUDA_VISIBLE_DEVICES to their UUIDs.  The broker gives every
 * process of the session the same answer, and the program's children
 * inherit the variable.
 *
 * It asks at load (hook_place_at_load, before main, for programs that read
 * the environment when they start) and GPUSHARE_PLACED passes the answer
 * to the session's later processes; cuInit asks when the load did not.
 *
 * Fails open: no broker, a broker that does not answer within PLACE_WAIT_MS,
 * one this user may not trust, or a welcome without devices (one GPU, or
 * placement off) leave the environment as it was.  The connection is its
 * own and short, so the hook's client starts later as before.
 */
#include "config.h"
#include "hook_place.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "endpoint.h"
#include "hook_config.h"
#include "hook_gate.h"
#include "hook_wrap.h"
#include "log.h"
#include "peer.h"
#include "protocol.h"
#include "socket_trust.h"

#define PLACE_WAIT_MS 1000

void hook_place_hello_fill(json_t *m, const char *session, int place)
{
    json_object_set_new(m, "role", json_string("hook"));
    json_object_set_new(m, "pid", json_integer(getpid()));
    if (session && session[0])
        json_object_set_new(m, "session", json_string(session));
    json_object_set_new(m, "client_version", json_string(PACKAGE_VERSION));
    /* What this process sees (its spawner's choice, or its placement): the
     * broker places nothing over it. */
    const char *visible = hook_config_visible();
    if (visible)
        json_object_set_new(m, "visible", json_string(visible));
    if (!place)
        return;
    json_object_set_new(m, "place", json_true());
    int gpus = hook_config_gpus_wanted();
    if (gpus >= 1)
        json_object_set_new(m, "gpus", json_integer(gpus));
}

/* The devices of a trusted welcome, joined with commas into out; 0, or -1. */
static int ask(const char *endpoint, const char *session, char *out, size_t outlen)
{
    int rc = -1;
    /* No broker, or one not to trust: no wait at all (as the client). */
    const char *path = gs_endpoint_ipc_path(endpoint);
    char why[600];
    if (path &&
        gs_trust_probe(path, gs_endpoint_is_user_socket(path), why, sizeof why) != GS_PROBE_OK)
        return -1;
    void *ctx = zmq_ctx_new(), *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    if (!sock)
        goto done;
    int zero = 0, wait = PLACE_WAIT_MS;
    int64_t maxmsg = GS_PROTO_MAX_SIZE;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVTIMEO, &wait, sizeof wait);
    zmq_setsockopt(sock, ZMQ_SNDTIMEO, &wait, sizeof wait);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (zmq_connect(sock, endpoint) != 0)
        goto done;
    json_t *hello = gs_msg_new(GS_MSG_HELLO);
    hook_place_hello_fill(hello, session, 1);
    gs_perr_t err;
    size_t len;
    char *buf = gs_msg_encode(hello, &len, &err);
    json_decref(hello);
    if (!buf || zmq_send(sock, buf, len, 0) < 0) {
        free(buf);
        goto done;
    }
    free(buf);
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, 0) < 0) {
        zmq_msg_close(&msg);
        gs_debug("placement: no answer from the broker within %d ms", PLACE_WAIT_MS);
        goto done;
    }
    gs_peer_t peer;
    gs_peer_parse(zmq_msg_gets(&msg, "Peer-Address"), &peer);
    gs_msg_type_t type;
    json_t *w = gs_msg_parse(zmq_msg_data(&msg), zmq_msg_size(&msg), &type, &err);
    zmq_msg_close(&msg);
    if (!w || type != GS_MSG_WELCOME || gs_trust_peer(&peer, endpoint, why, sizeof why) != 0) {
        json_decref(w);
        goto done;
    }
    const json_t *devs = json_object_get(w, "devices");
    out[0] = '\0';
    size_t i;
    const json_t *d;
    json_array_foreach(devs, i, d)
    {
        size_t used = strlen(out);
        snprintf(out + used, outlen - used, "%s%s", used ? "," : "", json_string_value(d));
    }
    json_decref(w);
    rc = 0;
done:
    if (sock)
        zmq_close(sock);
    if (ctx)
        zmq_ctx_term(ctx);
    return rc;
}

/* A placement comes from the environment when an ancestor of this process
 * was placed (GPUSHARE_PLACED, inherited with CUDA_VISIBLE_DEVICES), else
 * from the broker.  Several GPUs, all of them this process': a gang. */
static void place(void)
{
    /* From the environment, silently: at load the hook's configuration is
     * not read yet (hook_config_place_env). */
    struct hook_place_env env;
    hook_config_place_env(&env);
    const char *session = env.session;
    if (env.off || !session)
        return;
    const char *visible = hook_config_visible();
    /* An ancestor of the same session asked already (another session, e.g.
     * `gpushare run` inside a notebook, asks for itself). */
    const char *placed = env.placed, *by = env.placed_session;
    char endpoint[512], note[600], err[256], devices[1024];
    if (placed && by && strcmp(by, session) == 0) {
        snprintf(devices, sizeof devices, "%s", placed);
    } else {
        if (gs_endpoint_for_client(endpoint, sizeof endpoint, note, sizeof note, err, sizeof err) !=
                0 ||
            ask(endpoint, session, devices, sizeof devices) != 0)
            devices[0] = '\0'; /* no broker: the session runs where its first process does */
        /* Asked: the session's later processes (this one's children) take
         * the answer from here, even when it is "nothing", so that every
         * process of the session sees the same GPUs and none waits again
         * for a broker that does not answer. */
        setenv("GPUSHARE_PLACED", devices, 1);
        setenv("GPUSHARE_PLACED_SESSION", session, 1);
        if (devices[0] && !visible) {
            /* (setenv before the driver starts: a program that reads the
             * environment on another thread at this very moment is the
             * risk every launcher that sets CUDA_VISIBLE_DEVICES late
             * takes.) */
            setenv("CUDA_VISIBLE_DEVICES", devices, 1);
            visible = hook_config_visible();
            gs_debug("placed by the broker: CUDA_VISIBLE_DEVICES=%s", devices);
        }
    }
    int count = devices[0] ? 1 : 0;
    for (const char *p = devices; *p; p++)
        count += *p == ',';
    if (count >= 2 && visible && strcmp(visible, devices) == 0) {
        pthread_mutex_lock(&hook_gate_mu);
        hook_gate_gang = count;
        pthread_mutex_unlock(&hook_gate_mu);
    }
}

void hook_place_before_init(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_SEQ_CST))
        return; /* once: the driver reads the variable at its first cuInit */
    place();
}

/* At load, before the program's main: a Python program copies the
 * environment into os.environ when it starts, and PyTorch counts GPUs from
 * os.environ's CUDA_VISIBLE_DEVICES (through NVML) before the driver
 * starts; a placement made only at cuInit gave it two GPUs by NVML and one
 * by the driver (an internal assert in torch.cuda, on two H200s).  Only a
 * process of a session that no ancestor placed yet asks the broker: one
 * short round trip for a notebook's kernel or `gpushare run`'s program,
 * none for their children or for programs outside a session, and none on
 * a machine with one GPU. */
/* Placement can change something only where there are several GPUs:
 * GPUSHARE_GPU_COUNT where it is set (a machine whose driver has no /proc
 * entries, the tests' simulated driver), else the driver's one entry per
 * GPU in /proc.  On a machine with one GPU the load stays as it was: no
 * round trip before main (cuInit asks, and is told nothing). */
static int several_gpus(void)
{
    int count = hook_config_gpu_count();
    if (count >= 0)
        return count >= 2;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 2;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n >= 2;
}

__attribute__((constructor)) static void hook_place_at_load(void)
{
    struct hook_place_env env;
    hook_config_place_env(&env);
    if (!env.session || !several_gpus())
        return;
    gs_log_init("gpushare-hook", GS_LOG_WARN);
    hook_place_before_init();
}

/* The driver's first entry point: placement first (hook_place_before_init). */
HOOK_EXPORT CUresult cuInit(unsigned int Flags)
{
    HOOK_WRAP_ENTER_UNLESS(cuInit, (Flags), hook_cfg.disabled);
    hook_place_before_init();
    CUresult r = real_(Flags);
    HOOK_WRAP_LEAVE(r);
}
