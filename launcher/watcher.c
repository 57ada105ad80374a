/*
 * watcher.c - the cell watcher process (see watcher.h): from the kernel's
 * IOPub status messages to `cell busy` / `cell idle` for the broker.
 *
 * Its life: die with the kernel; wait until the kernel program really was
 * exec'd; shed every inherited descriptor; subscribe to IOPub; register with
 * the broker (broker_link.c); forward cell boundaries; on SIGTERM (which
 * PR_SET_PDEATHSIG sends when the kernel exits, and which the server's
 * terminate sends to the whole group) unregister and exit.
 */
#define _GNU_SOURCE
#include "watcher.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "broker_link.h"
#include "iopub.h"
#include "log.h"
#include "notebook_name.h"

#define MAX_FRAMES    64
#define UNREGISTER_MS 300
#define MAX_WAIT_MS   500 /* wake up at least this often to check the parent */

/* Signals the kernel's process group may get that are not the watcher's
 * business: an interrupt is the kernel's alone, and a hang-up or quit
 * that the kernel survives must not end the watcher. */
static const int ignored[] = {SIGINT,  SIGQUIT, SIGHUP,  SIGPIPE, SIGTSTP,
                              SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2};

static int setup_signals(void)
{
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
        sigaction(ignored[i], &ign, NULL);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    /* Everything else unblocked: the mask came from whoever started the server. */
    sigprocmask(SIG_SETMASK, &term, NULL);
    int fd = signalfd(-1, &term, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) { /* then SIGTERM (and PDEATHSIG) simply end us, without unregister */
        sigemptyset(&term);
        sigprocmask(SIG_SETMASK, &term, NULL);
    }
    return fd;
}

/* stdin and stdout become /dev/null; every descriptor from 3 up but keep
 * is closed (the server's pipes, the notebook's files, anything leaked). */
static void shed_descriptors(int keep1, int keep2)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        if (null > STDERR_FILENO)
            close(null);
    }
    int keep[2] = {keep1 < keep2 ? keep1 : keep2, keep1 < keep2 ? keep2 : keep1};
    unsigned from = 3;
    for (int i = 0; i < 2; i++) {
        if (keep[i] < (int)from)
            continue;
        if ((unsigned)keep[i] > from)
            close_range(from, (unsigned)keep[i] - 1, 0);
        from = (unsigned)keep[i] + 1;
    }
    if (close_range(from, ~0U, 0) != 0) {
        for (int fd = (int)from; fd < 65536; fd++)
            close(fd);
    }
}

/* Block until the launcher's exec closed the pipe (0), or the launcher died
 * or SIGTERM came (-1). */
static int wait_for_exec(int exec_fd, int sfd)
{
    if (exec_fd < 0)
        return 0;
    struct pollfd p[2] = {{.fd = exec_fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    for (;;) {
        int n = poll(p, sfd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (sfd >= 0 && p[1].revents))
            return -1;
        char c;
        ssize_t r = read(exec_fd, &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        return r == 0 ? 0 : -1; /* a byte: exec failed */
    }
}

/* Something went wrong that leaves nothing to watch: stay out of the way
 * (exiting early would leave a zombie child under the kernel) until the
 * kernel goes. */
static void __attribute__((noreturn)) idle_until_the_end(int sfd, pid_t kernel)
{
    struct pollfd p = {.fd = sfd, .events = POLLIN};
    while (getppid() == kernel && !(sfd >= 0 && poll(&p, 1, MAX_WAIT_MS) > 0))
        if (sfd < 0)
            sleep(1);
    _exit(1);
}

typedef struct {
    int busy;
    char msg_id[GS_IOPUB_MSG_ID_MAX];
    unsigned long forged;
} cells_t;

/* Pair busy and idle by the execute_request's msg_id.  ipykernel runs one
 * execute_request at a time, so an idle for another msg_id than the running
 * one is stale (its busy was lost to the slow-joiner window) and ignored. */
static void on_event(cells_t *c, gs_broker_link_t *link, gs_iopub_event_t ev, const char *id)
{
    if (ev == GS_IOPUB_CELL_BUSY) {
        c->busy = 1;
        snprintf(c->msg_id, sizeof c->msg_id, "%s", id);
        gs_debug("cell %s busy", id);
        gs_link_cell(link, 1, id);
    } else if (ev == GS_IOPUB_CELL_IDLE) {
        if (c->busy && strcmp(c->msg_id, id) != 0) {
            gs_debug("idle for %s while %s runs: ignored", id, c->msg_id);
            return;
        }
        c->busy = 0;
        gs_debug("cell %s idle", id);
        gs_link_cell(link, 0, id);
    }
}

static void read_iopub(zsock_t *sub, const gs_iopub_auth_t *auth, cells_t *cells,
                       gs_broker_link_t *link, const char *endpoint)
{
    /* Bounded, so that the broker link and signals get their turn. */
    for (int k = 0; k < 256; k++) {
        zmsg_t *m = zmsg_recv(sub);
        if (!m)
            return;
        const void *frames[MAX_FRAMES];
        size_t sizes[MAX_FRAMES];
        size_t n = 0;
        for (zframe_t *f = zmsg_first(m); f && n < MAX_FRAMES; f = zmsg_next(m)) {
            frames[n] = zframe_data(f);
            sizes[n++] = zframe_size(f);
        }
        char id[GS_IOPUB_MSG_ID_MAX];
        gs_iopub_event_t ev = gs_iopub_classify(auth, frames, sizes, n, id);
        if (ev == GS_IOPUB_BAD_SIGNATURE) {
            if (cells->forged++ == 0)
                gs_warn("ignored a message on the kernel's IOPub (%s) whose signature is "
                        "wrong: someone without the kernel's key publishes there",
                        endpoint);
            else
                gs_debug("ignored another message with a wrong signature");
        } else if (ev == GS_IOPUB_MALFORMED) {
            gs_debug("ignored a malformed IOPub message");
        } else {
            on_event(cells, link, ev, id);
        }
        zmsg_destroy(&m);
    }
}

/* The notebook lookup said something: the broker learns the notebook. */
static void notebook_found(gs_nbname_t **nbname, gs_broker_link_t *link, const char *kernel_id)
{
    char name[1024];
    int rc = gs_nbname_result(*nbname, name, sizeof name);
    if (rc < 0)
        return;
    if (rc == 1) {
        gs_info("kernel %s runs notebook \"%s\"", kernel_id, name);
        gs_link_set_notebook(link, name);
    } else {
        gs_debug("kernel %s: no notebook server told its notebook", kernel_id);
    }
    gs_nbname_destroy(nbname);
}

void gs_watcher_main(const gs_watcher_args_t *a)
{
    /* Die with the kernel; if it is already gone, PDEATHSIG came too late. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != a->kernel_pid)
        _exit(0);
    prctl(PR_SET_NAME, "gpushare-watch");
    /* A process group of its own: ipykernel's shutdown terminates the
     * children in its group and waits until they are gone, and the kernel
     * never reaps us, so in the group we would be a zombie holding every
     * shutdown up until the server's SIGTERM.  Out of the group, the
     * server's killpg (interrupt, terminate, kill) never reaches us either:
     * the kernel's death does, through PDEATHSIG, and we unregister. */
    setpgid(0, 0);
    int sfd = setup_signals();
    if (wait_for_exec(a->exec_fd, sfd) != 0 || getppid() != a->kernel_pid)
        _exit(0);
    shed_descriptors(sfd, -1);
    gs_log_init("gpushare-launch", GS_LOG_WARN);

    if (sodium_init() < 0) {
        gs_error("libsodium does not initialise; not watching kernel %s's cells", a->kernel_id);
        idle_until_the_end(sfd, a->kernel_pid);
    }
    zsys_handler_set(NULL); /* czmq must not take SIGINT/SIGTERM */
    zsys_set_linger(0);

    char endpoint[512];
    gs_iopub_auth_t auth = {.scheme = gs_hmac_scheme_parse(a->conn->scheme),
                            .key = a->conn->key,
                            .key_len = a->conn->key_len};
    zsock_t *sub = NULL;
    if (gs_conn_iopub_endpoint(a->conn, endpoint, sizeof endpoint) == 0 &&
        (sub = zsock_new(ZMQ_SUB)) != NULL) {
        zsock_set_linger(sub, 0);
        zsock_set_rcvtimeo(sub, 0);
        zsock_set_rcvhwm(sub, 10000);     /* with the kernel's SNDHWM, bounds the backlog */
        zsock_set_reconnect_ivl(sub, 20); /* the kernel binds a moment after we start */
        zsock_set_subscribe(sub, "");
        if (strncmp(endpoint, "tcp://[", 7) == 0)
            zsock_set_ipv6(sub, 1);
        if (zsock_connect(sub, "%s", endpoint) < 0) {
            gs_error("cannot subscribe to the kernel's IOPub at %s: %s; cells are not watched",
                     endpoint, zmq_strerror(zmq_errno()));
            zsock_destroy(&sub);
        }
    } else {
        gs_error("cannot subscribe to the kernel's IOPub (connection file \"%s\")", a->conn_path);
    }

    gs_link_identity_t id = {.kernel_id = a->kernel_id,
                             .user = a->user,
                             .notebook = a->notebook,
                             .kernel_pid = a->kernel_pid};
    gs_broker_link_t *link = gs_link_new(&id);
    if (!link)
        idle_until_the_end(sfd, a->kernel_pid);
    gs_info("watching kernel %s (pid %ld) on %s", a->kernel_id, (long)a->kernel_pid,
            sub ? endpoint : "nothing");
    gs_nbname_t *nbname =
        a->find_notebook ? gs_nbname_start(a->kernel_id, a->conn_path, a->server_pid) : NULL;
    cells_t cells = {0};
    for (;;) {
        int64_t now = zclock_mono();
        gs_link_tick(link, now);
        zmq_pollitem_t items[5];
        int n = 0;
        items[n++] = (zmq_pollitem_t){.fd = sfd, .events = ZMQ_POLLIN};
        int sub_i = -1, nb_i = -1;
        if (sub) {
            sub_i = n;
            items[n++] = (zmq_pollitem_t){.socket = zsock_resolve(sub), .events = ZMQ_POLLIN};
        }
        if (nbname) {
            nb_i = n;
            items[n++] = (zmq_pollitem_t){.fd = gs_nbname_fd(nbname), .events = ZMQ_POLLIN};
        }
        n += gs_link_items(link, items + n, 5 - n);
        long timeout = gs_link_timeout_ms(link, now);
        if (timeout > MAX_WAIT_MS)
            timeout = MAX_WAIT_MS;
        int rc = zmq_poll(items, n, timeout);
        if (rc < 0 && zmq_errno() != EINTR)
            break;
        if (items[0].revents & ZMQ_POLLIN)
            break; /* SIGTERM */
        if (getppid() != a->kernel_pid)
            break; /* the kernel is gone and PDEATHSIG did not come */
        if (sub_i >= 0 && (items[sub_i].revents & ZMQ_POLLIN))
            read_iopub(sub, &auth, &cells, link, endpoint);
        if (nb_i >= 0 && (items[nb_i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
            notebook_found(&nbname, link, a->kernel_id);
    }
    gs_link_unregister(link, UNREGISTER_MS);
    gs_nbname_destroy(&nbname);
    gs_link_destroy(&link);
    zsock_destroy(&sub);
    gs_conn_clear(a->conn);
    _exit(0);
}
