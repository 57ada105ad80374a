/*
 * test_pool_socket.c - the broker's pool socket (broker/park/pool_socket.h)
 * with the hook's side of it (libhook/swap/swap_fetch.h): real descriptors
 * cross a real Unix socket; the broker learns the asker's pid and uid from
 * the kernel; a refusal reaches the asker as an error and leaves no
 * descriptor open; a request that is not JSON is refused; a client that
 * says nothing is dropped after the timeout.  Memfds stand in for the
 * pinned chunks.  The client runs on a thread, the broker's loop on the
 * test's own (zmq_poll over the socket's items, as the broker does).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "endpoint.h"
#include "pool_socket.h"
#include "swap_fetch.h"

#define CHUNK 4096

static char path[108];
static int chunks[3];          /* the "pinned" memory */
static gs_pool_request_t seen; /* what the broker was asked */
static int refuse;

static int grown; /* lease 8 grows: it has this many of its 3 chunks */

static int serve(void *arg, const gs_pool_request_t *req, int *fds, int max, uint64_t *cb,
                 int *want, char *err, size_t errlen)
{
    (void)arg;
    seen = *req;
    if (refuse || (req->lease != 7 && req->lease != 8)) {
        snprintf(err, errlen, "lease %llu is not yours", (unsigned long long)req->lease);
        return -1;
    }
    *cb = CHUNK;
    *want = 3;
    if (req->nreturn > 0)
        return 0;
    int have = req->lease == 7 ? 3 : grown;
    if (req->from >= have)
        return req->from < 3 ? GS_POOL_LATER : 0;
    for (int i = req->from; i < have && i - req->from < max; i++)
        fds[i - req->from] = dup(chunks[i]); /* an export makes a new descriptor each time */
    return have - req->from;
}

struct fetch {
    uint64_t lease;
    int from, wait_ms; /* a growing lease's request */
    int fds[8];
    int n, want;
    uint64_t chunk_bytes;
    int ret[2], nret; /* an early return instead */
    char err[200];
    int timeout_ms; /* 0: 5000 */
    int done;
};

static void *fetch_thread(void *arg)
{
    struct fetch *f = arg;
    int ms = f->timeout_ms ? f->timeout_ms : 5000;
    if (f->nret)
        f->n = gs_swap_return(path, f->lease, f->ret, f->nret, ms, f->err, sizeof f->err);
    else if (f->from || f->wait_ms)
        f->n = gs_swap_fetch_from(path, f->lease, f->from, f->wait_ms, f->fds, 8, &f->chunk_bytes,
                                  &f->want, ms, f->err, sizeof f->err);
    else
        f->n = gs_swap_fetch(path, f->lease, f->fds, 8, &f->chunk_bytes, ms, f->err, sizeof f->err);
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The broker's loop until the fetch is done. */
static void serve_until(gs_pool_socket_t *ps, struct fetch *f)
{
    while (!__atomic_load_n(&f->done, __ATOMIC_ACQUIRE)) {
        zmq_pollitem_t items[GS_POOL_SOCKET_MAX_CONN + 1];
        int n = gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1);
        assert_true(zmq_poll(items, n, 50) >= 0);
        gs_pool_socket_handle(ps, items, n, now_ms(), serve, NULL);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/gs-pool-test-%d.sock", (int)getpid());
    for (int i = 0; i < 3; i++) {
        chunks[i] = memfd_create("chunk", MFD_CLOEXEC);
        assert_int_equal(ftruncate(chunks[i], CHUNK), 0);
        char *p = mmap(NULL, CHUNK, PROT_WRITE, MAP_SHARED, chunks[i], 0);
        p[0] = (char)('a' + i);
        munmap(p, CHUNK);
    }
    refuse = 0;
    grown = 0;
    memset(&seen, 0, sizeof seen);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        close(chunks[i]);
    unlink(path);
    return 0;
}

static gs_pool_socket_t *listen_here(void)
{
    char err[200];
    gs_pool_socket_t *ps = gs_pool_socket_new(path, 0600, (gid_t)-1, err, sizeof err);
    assert_non_null(ps);
    return ps;
}

static void descriptors_reach_the_process_the_lease_is_for(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    struct fetch f = {.lease = 7};
    pthread_t t;
    pthread_create(&t, NULL, fetch_thread, &f);
    serve_until(ps, &f);
    pthread_join(t, NULL);
    assert_int_equal(f.n, 3);
    assert_int_equal(f.chunk_bytes, CHUNK);
    assert_int_equal(seen.pid, getpid()); /* from the kernel, not the request */
    assert_int_equal(seen.uid, getuid());
    assert_int_equal(seen.lease, 7);
    for (int i = 0; i < 3; i++) { /* the same memory, in order */
        char *p = mmap(NULL, CHUNK, PROT_READ, MAP_SHARED, f.fds[i], 0);
        assert_true(p != MAP_FAILED);
        assert_int_equal(p[0], 'a' + i);
        munmap(p, CHUNK);
        close(f.fds[i]);
    }
    gs_pool_socket_destroy(&ps);
    assert_int_equal(access(path, F_OK), -1); /* the socket file is gone */
}

static void a_refusal_is_an_error_and_leaks_nothing(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    refuse = 1;
    struct fetch f = {.lease = 7};
    pthread_t t;
    pthread_create(&t, NULL, fetch_thread, &f);
    serve_until(ps, &f);
    pthread_join(t, NULL);
    assert_int_equal(f.n, -1);
    assert_string_equal(f.err, "lease 7 is not yours");
    gs_pool_socket_destroy(&ps);
}

static void a_bad_request_is_refused(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(send(s, "lease please", 12, 0), 12);
    char buf[256] = "";
    ssize_t n = 0;
    while (n <= 0) {
        zmq_pollitem_t items[GS_POOL_SOCKET_MAX_CONN + 1];
        int k = gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1);
        zmq_poll(items, k, 50);
        gs_pool_socket_handle(ps, items, k, now_ms(), serve, NULL);
        n = recv(s, buf, sizeof buf - 1, MSG_DONTWAIT);
    }
    buf[n] = '\0';
    assert_non_null(strstr(buf, "bad request"));
    close(s);
    gs_pool_socket_destroy(&ps);
}

static void a_silent_client_is_dropped_after_the_timeout(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    zmq_pollitem_t items[GS_POOL_SOCKET_MAX_CONN + 1];
    int k = gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1);
    assert_int_equal(zmq_poll(items, k, 5000), 1); /* the connection arrives */
    gs_pool_socket_handle(ps, items, k, 0, serve, NULL);
    assert_int_equal(gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1), 2);
    /* A virtual clock past the timeout: the next round drops it. */
    assert_int_equal(gs_pool_socket_next_deadline(ps), GS_POOL_SOCKET_TIMEOUT_MS + 1);
    gs_pool_socket_handle(ps, items, 0, GS_POOL_SOCKET_TIMEOUT_MS + 1, serve, NULL);
    assert_int_equal(gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1), 1);
    assert_true(gs_pool_socket_next_deadline(ps) == INT64_MAX);
    /* Told why, and that asking again may work (a hook that was that late
     * does), then closed by the broker. */
    char buf[256];
    ssize_t n = recv(s, buf, sizeof buf - 1, 0);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "no request within"));
    assert_non_null(strstr(buf, "\"retry\":true"));
    assert_int_equal(recv(s, buf, 1, 0), 0);
    close(s);
    gs_pool_socket_destroy(&ps);
}

/* One round of the broker's loop. */
static void serve_once(gs_pool_socket_t *ps, int64_t at_ms)
{
    zmq_pollitem_t items[GS_POOL_SOCKET_MAX_CONN + 1];
    int n = gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1);
    assert_true(zmq_poll(items, n, 50) >= 0);
    gs_pool_socket_handle(ps, items, n, at_ms, serve, NULL);
}

static void a_growing_lease_is_answered_when_it_grows(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    struct fetch f = {.lease = 8, .from = 1, .wait_ms = 1000};
    grown = 1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &f), 0);
    /* The request arrives at time 0 and finds nothing from position 1 on:
     * it waits, unanswered, while the clock stays within its wait. */
    while (seen.lease != 8)
        serve_once(ps, 0);
    serve_once(ps, 999);
    assert_false(__atomic_load_n(&f.done, __ATOMIC_ACQUIRE));
    /* The lease grows (the other side returned a chunk): the next round
     * answers with it. */
    grown = 2;
    while (!__atomic_load_n(&f.done, __ATOMIC_ACQUIRE))
        serve_once(ps, 999);
    pthread_join(t, NULL);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.want, 3);
    char c = 0;
    assert_int_equal(pread(f.fds[0], &c, 1, 0), 1);
    assert_int_equal(c, 'b'); /* position 1 */
    close(f.fds[0]);
    gs_pool_socket_destroy(&ps);
}

static void a_growing_lease_past_its_wait_answers_none(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    struct fetch f = {.lease = 8, .from = 0, .wait_ms = 100};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &f), 0);
    while (seen.lease != 8)
        serve_once(ps, 0);
    while (!__atomic_load_n(&f.done, __ATOMIC_ACQUIRE))
        serve_once(ps, 101); /* past the wait: "none yet, ask again" */
    pthread_join(t, NULL);
    assert_int_equal(f.n, 0);
    assert_int_equal(f.want, 3);
    gs_pool_socket_destroy(&ps);
}

static void an_early_return_reaches_the_broker(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    struct fetch f = {.lease = 7, .ret = {0, 2}, .nret = 2};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &f), 0);
    serve_until(ps, &f);
    pthread_join(t, NULL);
    assert_int_equal(f.n, 0);
    assert_int_equal(seen.nreturn, 2);
    assert_int_equal(seen.positions[0], 0);
    assert_int_equal(seen.positions[1], 2);
    assert_int_equal((int)seen.pid, (int)getpid());
    /* Refused (not the peer's lease): an error the client can tell. */
    struct fetch g = {.lease = 9, .ret = {1}, .nret = 1};
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &g), 0);
    serve_until(ps, &g);
    pthread_join(t, NULL);
    assert_int_equal(g.n, -1);
    assert_non_null(strstr(g.err, "not yours"));
    gs_pool_socket_destroy(&ps);
}

/* A connection to the socket that says nothing (as a user's idle ones). */
static int idle_connection(void)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    return s;
}

static void one_user_holds_a_few_slots_and_the_next_asker_hears_why(void **state)
{
    (void)state;
    gs_pool_socket_t *ps = listen_here();
    int held[GS_POOL_SOCKET_PER_UID];
    for (int i = 0; i < GS_POOL_SOCKET_PER_UID; i++)
        held[i] = idle_connection();
    /* All accepted (a clock standing still: none is dropped as silent). */
    zmq_pollitem_t items[GS_POOL_SOCKET_MAX_CONN + 1];
    while (gs_pool_socket_poll_items(ps, items, GS_POOL_SOCKET_MAX_CONN + 1) <
           1 + GS_POOL_SOCKET_PER_UID)
        serve_once(ps, 0);
    /* This uid's next connection is refused with the reason, not merely
     * closed: the fetch asks again until its timeout, then says why (it
     * used to read "Broken pipe"). */
    struct fetch f = {.lease = 7, .timeout_ms = 300};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &f), 0);
    while (!__atomic_load_n(&f.done, __ATOMIC_ACQUIRE))
        serve_once(ps, 0);
    pthread_join(t, NULL);
    assert_int_equal(f.n, -1);
    assert_non_null(strstr(f.err, "the pool socket is busy"));
    assert_non_null(strstr(f.err, "requests open already"));
    assert_true(seen.lease == 0); /* never served */
    /* Once the idle ones are dropped (their time is over), the same fetch
     * goes through: asked again while the slots were taken, it is served as
     * soon as one is free. */
    struct fetch g = {.lease = 7};
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &g), 0);
    for (int i = 0; i < 5; i++)
        serve_once(ps, 0);
    while (!__atomic_load_n(&g.done, __ATOMIC_ACQUIRE))
        serve_once(ps, GS_POOL_SOCKET_TIMEOUT_MS + 1);
    pthread_join(t, NULL);
    assert_int_equal(g.n, 3);
    for (int i = 0; i < 3; i++)
        close(g.fds[i]);
    for (int i = 0; i < GS_POOL_SOCKET_PER_UID; i++)
        close(held[i]);
    gs_pool_socket_destroy(&ps);
}

static void the_path_sits_beside_the_endpoint(void **state)
{
    (void)state;
    char out[108];
    assert_int_equal(gs_endpoint_pool_path("ipc:///run/gpushare/broker.sock", out, sizeof out), 0);
    assert_string_equal(out, "/run/gpushare/pool.sock");
    assert_int_equal(gs_endpoint_pool_path("tcp://127.0.0.1:5555", out, sizeof out), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(descriptors_reach_the_process_the_lease_is_for, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_refusal_is_an_error_and_leaks_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(a_bad_request_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(a_silent_client_is_dropped_after_the_timeout, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_growing_lease_is_answered_when_it_grows, setup, teardown),
        cmocka_unit_test_setup_teardown(a_growing_lease_past_its_wait_answers_none, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(an_early_return_reaches_the_broker, setup, teardown),
        cmocka_unit_test_setup_teardown(one_user_holds_a_few_slots_and_the_next_asker_hears_why,
                                        setup, teardown),
        cmocka_unit_test(the_path_sits_beside_the_endpoint),
    };
    return cmocka_run_group_tests_name("pool_socket", tests, NULL, NULL);
}
