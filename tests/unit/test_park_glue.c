/*
 * test_park_glue.c - parking's glue (broker/park/libgsparkglue.la) driven
 * as the broker drives it (broker.c, settle.c, session_dispatch.c), on a
 * virtual clock, with the checkpoint API and its worker threads played by
 * the test through the backend table (park_backend.h): it takes each job
 * parking submits and reports it back.  Asserted through what the broker
 * sees: the jobs, the messages queued for hooks (gs_park_next_answer), the
 * status fields (gs_park_status_add) and the scheduler's residency.
 *
 * Covered: a checkpoint-tier park and unpark; a swap-tier park and unpark
 * as the conversation of queued messages (swap_out, the hook's `swapped`,
 * swap_in), with the host pool of the simulated driver (tests/simcuda,
 * linked in: the pool pins its chunks there); a failed park leaves the
 * session running and says why; the host ledger refuses a park that would
 * not fit in host memory, before any job.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <poll.h>

#include "park/park.h"
#include "protocol.h"

#define SEC     1000000LL
#define MIB     (1ull << 20)
#define GIB     (1ull << 30)
#define FOOT    (256 * MIB) /* the notebook's memory on the GPU */
#define SESSION "nb"

/* ---- the backend played by the test ------------------------------------- */

#define FAKE_MAX 8

typedef struct {
    gs_park_job_t *running[FAKE_MAX]; /* submitted, not reported yet */
    int nrunning;
    gs_park_job_t *done[FAKE_MAX]; /* reported, not taken yet */
    int ndone;
    int submitted, stopped, destroyed;
} fake_t;

static int fake_state(void *arg, int pid, int *state, char *err, size_t errlen)
{
    (void)arg, (void)pid, (void)err, (void)errlen;
    *state = GS_PROC_RUNNING;
    return 0;
}

static void fake_submit(void *arg, gs_park_job_t *job)
{
    fake_t *f = arg;
    assert_true(f->nrunning < FAKE_MAX);
    f->running[f->nrunning++] = job;
    f->submitted++;
}

static gs_park_job_t *fake_done(void *arg)
{
    fake_t *f = arg;
    if (!f->ndone)
        return NULL;
    gs_park_job_t *j = f->done[0];
    memmove(f->done, f->done + 1, (size_t)--f->ndone * sizeof *f->done);
    return j;
}

static int fake_fd(void *arg)
{
    (void)arg;
    return -1;
}

static void fake_stop(void *arg)
{
    ((fake_t *)arg)->stopped = 1;
}

static void fake_run(void *arg, gs_park_job_t *job)
{
    (void)arg;
    job->ok = 1;
}

static void fake_destroy(void *arg)
{
    fake_t *f = arg;
    for (int i = 0; i < f->nrunning; i++)
        free(f->running[i]);
    for (int i = 0; i < f->ndone; i++)
        free(f->done[i]);
    f->nrunning = f->ndone = 0;
    f->destroyed = 1;
}

/* The oldest job submitted, reported as ok (or failed with error), having
 * taken `us`; returned for the test to look at before parking takes it. */
static gs_park_job_t *fake_finish(fake_t *f, int ok, const char *error, int64_t us)
{
    assert_true(f->nrunning > 0);
    gs_park_job_t *j = f->running[0];
    memmove(f->running, f->running + 1, (size_t)--f->nrunning * sizeof *f->running);
    j->ok = ok;
    j->elapsed_us = us;
    snprintf(j->error, sizeof j->error, "%s", error ? error : "");
    f->done[f->ndone++] = j;
    return j;
}

/* ---- the broker around parking ---------------------------------------------- */

typedef struct {
    fake_t fake;
    gs_sched_t *sched;
    gs_sessions_t *sessions;
    gs_park_t *park;
    gs_client_t *hook;
    int64_t now;
    gs_gpu_inventory_t inv; /* the park keeps a pointer to it */
} world_t;

static int setup_with(void **state, const char *endpoint, int swap, uint64_t foot)
{
    world_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->now = 1000 * SEC;
    w->inv.count = 1;
    w->inv.gpus[0] = (gs_gpu_t){.index = 0,
                                .uuid = "GPU-00000000-0000-0000-0000-000000000001",
                                .uuid_bytes = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
                                .name = "Test GPU",
                                .memory_total = 16 * GIB};
    uint64_t total = w->inv.gpus[0].memory_total;
    w->sched = gs_sched_new(1, &total);
    w->sessions = gs_sessions_new(getuid());
    assert_non_null(w->sched);
    assert_non_null(w->sessions);
    gs_park_backend_t b = {.arg = &w->fake,
                           .proc_state = fake_state,
                           .submit = fake_submit,
                           .done = fake_done,
                           .fd = fake_fd,
                           .stop = fake_stop,
                           .run = fake_run,
                           .destroy = fake_destroy};
    /* No endpoint: no swap tier, the checkpoint tier parks everything. */
    w->park = gs_park_new_with(w->sched, w->sessions, &w->inv, endpoint, 0600, (gid_t)-1, &b);
    assert_non_null(w->park);

    /* A notebook (registered by its launcher) with one hook process. */
    gs_session_t *s = gs_sessions_session(w->sessions, SESSION, 1);
    assert_non_null(s);
    s->registered = 1;
    gs_sched_register(w->sched, SESSION, w->now);
    zframe_t *id = zframe_new("hook-1", 6);
    w->hook = gs_sessions_client(w->sessions, id);
    zframe_destroy(&id);
    assert_non_null(w->hook);
    snprintf(w->hook->role, sizeof w->hook->role, "hook");
    snprintf(w->hook->session, sizeof w->hook->session, SESSION);
    w->hook->peer_pid = getpid();
    gs_sched_join(w->sched, w->hook->key, SESSION, w->now);
    gs_park_on_join(w->park, w->hook->key, SESSION, getpid(), (long)getuid(), 0, swap, 0, w->now);
    gs_sched_memory(w->sched, w->hook->key, 0, foot, w->now);
    gs_park_on_memory(w->park, w->hook->key, 0, foot, swap ? foot : 0, 0, foot, w->now);
    *state = w;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, NULL, 0, FOOT);
}

static int teardown(void **state)
{
    world_t *w = *state;
    gs_park_destroy(&w->park);
    assert_null(w->park);
    assert_true(w->fake.stopped);
    assert_true(w->fake.destroyed);
    gs_sessions_destroy(&w->sessions);
    gs_sched_destroy(&w->sched);
    free(w);
    return 0;
}

/* The session's `parking` field in the status, as `gpushare status` shows it. */
static char *parking_of(world_t *w)
{
    json_t *st = json_pack("{s:[{s:[{s:s, s:I}]}]}", "gpus", "sessions", "id", SESSION,
                           "resident_bytes", (json_int_t)FOOT);
    gs_park_status_add(w->park, st, w->now);
    json_t *e = json_array_get(
        json_object_get(json_array_get(json_object_get(st, "gpus"), 0), "sessions"), 0);
    char *text = strdup(json_string_value(json_object_get(e, "parking")));
    json_decref(st);
    return text;
}

static void assert_parking(world_t *w, const char *expected)
{
    char *text = parking_of(w);
    if (strcmp(text, expected) != 0)
        fail_msg("parking: \"%s\", expected \"%s\"", text, expected);
    free(text);
}

static int residency(world_t *w)
{
    gs_sched_info_t si;
    assert_int_equal(gs_sched_info(w->sched, SESSION, 0, w->now, &si), 0);
    return si.residency;
}

/* The next message queued for a hook must be `frozen` with this value. */
static void assert_frozen_told(world_t *w, int frozen)
{
    zframe_t *peer = NULL;
    json_t *m = gs_park_next_answer(w->park, &peer);
    assert_non_null(m);
    assert_non_null(json_object_get(m, "frozen"));
    assert_int_equal(json_is_true(json_object_get(m, "frozen")), frozen);
    assert_true(zframe_eq(peer, w->hook->identity));
    json_decref(m);
    zframe_destroy(&peer);
}

/* The notebook asks to be parked (`%gpushare release`); the poll starts it. */
static void ask_park(world_t *w)
{
    char info[300];
    assert_int_equal(gs_park_request(w->park, SESSION, w->now, info, sizeof info), 0);
    assert_non_null(strstr(info, "parking 256.0 MiB"));
    gs_park_poll(w->park, w->now);
}

static void checkpoint_park_and_unpark(void **state)
{
    world_t *w = *state;
    assert_parking(w, "resident");
    ask_park(w);
    assert_int_equal(w->fake.nrunning, 1);
    gs_park_job_t *j = w->fake.running[0];
    assert_false(j->unpark);
    assert_string_equal(j->session, SESSION);
    assert_int_equal(j->npids, 1);
    assert_int_equal(j->pids[0], getpid());
    assert_parking(w, "parking");
    assert_int_equal(residency(w), GS_SCHED_MOVING);
    assert_frozen_told(w, 1); /* before the lock: it asks for the GPU first */

    w->now += 2 * SEC;
    fake_finish(&w->fake, 1, NULL, SEC / 2);
    gs_park_on_jobs(w->park, w->now);
    assert_parking(w, "parked");
    assert_int_equal(residency(w), GS_SCHED_PARKED);

    /* Its cell starts: it comes back, with room for its memory and the
     * restore's margin (a sixty-fourth of the GPU, 1 GiB at most). */
    gs_sched_cell(w->sched, SESSION, 1, w->now);
    for (int i = 0; i < 10 && !w->fake.nrunning; i++) {
        gs_park_poll(w->park, w->now);
        w->now += SEC / 10;
    }
    assert_int_equal(w->fake.nrunning, 1);
    j = w->fake.running[0];
    assert_true(j->unpark);
    assert_int_equal(j->nroom, 1);
    assert_string_equal(j->room[0].uuid, "GPU-00000000-0000-0000-0000-000000000001");
    assert_int_equal(j->room[0].need, FOOT + 16 * GIB / 64);
    assert_parking(w, "unparking");

    fake_finish(&w->fake, 1, NULL, SEC / 4);
    gs_park_on_jobs(w->park, w->now);
    assert_parking(w, "resident");
    assert_int_equal(residency(w), GS_SCHED_RESIDENT);
    assert_frozen_told(w, 0); /* restored: its hooks may call the driver again */
    zframe_t *peer = NULL;
    assert_null(gs_park_next_answer(w->park, &peer));
}

static void failed_park_leaves_it_running(void **state)
{
    world_t *w = *state;
    ask_park(w);
    assert_int_equal(w->fake.nrunning, 1);
    assert_frozen_told(w, 1);
    fake_finish(&w->fake, 0, "lock: CUDA_ERROR_TIMEOUT", SEC);
    gs_park_on_jobs(w->park, w->now);
    assert_parking(w, "failed: park: lock: CUDA_ERROR_TIMEOUT; the session was left running");
    assert_int_equal(residency(w), GS_SCHED_RESIDENT);
    assert_frozen_told(w, 0); /* unlocked again */
    assert_int_equal(w->fake.submitted, 1);
}

static void host_ledger_refuses(void **state)
{
    world_t *w = *state;
    char info[300], err[200];
    /* Asked while it fits... */
    assert_int_equal(gs_park_request(w->park, SESSION, w->now, info, sizeof info), 0);
    /* ...then host memory is counted as 64 MiB: its image would not fit. */
    json_t *small = json_string("64M");
    assert_int_equal(gs_park_set(w->park, "park_host_memory", small, err, sizeof err), 0);
    json_decref(small);
    gs_park_poll(w->park, w->now);
    assert_int_equal(w->fake.submitted, 0); /* no checkpoint beyond host memory */
    char *text = parking_of(w);
    assert_non_null(strstr(text, "failed: park: "));
    assert_non_null(strstr(text, "the session was left running"));
    free(text);
    assert_int_equal(residency(w), GS_SCHED_RESIDENT);
    /* And asked now, it is refused at once, saying why. */
    assert_int_equal(gs_park_request(w->park, SESSION, w->now, info, sizeof info), -1);
    assert_non_null(strstr(info, "host memory is full"));
}

/* ---- the swap tier ------------------------------------------------------- */

#define SWAP_FOOT (16 * MIB)

static char sock_dir[64];

static int setup_swap(void **state)
{
    /* The simulated driver's machine of this test alone; chunks of 4 MiB. */
    char name[64], endpoint[128];
    snprintf(name, sizeof name, "park_glue_%d", (int)getpid());
    setenv("GPUSHARE_SIM_NAME", name, 1);
    setenv("GPUSHARE_SIM_DEVICES", "1", 1);
    setenv("GPUSHARE_POOL_CHUNK", "4M", 1);
    /* Loaded as the broker has it loaded for its inventory: the pool's
     * driver calls look for it (RTLD_NOLOAD). */
    setenv("GPUSHARE_LIBCUDA", SIMCUDA_SO, 1);
    if (!dlopen(SIMCUDA_SO, RTLD_NOW | RTLD_GLOBAL))
        fail_msg("cannot load the simulated driver: %s", dlerror());
    snprintf(sock_dir, sizeof sock_dir, "/tmp/park_glue.XXXXXX");
    assert_non_null(mkdtemp(sock_dir));
    snprintf(endpoint, sizeof endpoint, "ipc://%s/broker.sock", sock_dir);
    return setup_with(state, endpoint, 1, SWAP_FOOT);
}

static int teardown_swap(void **state)
{
    teardown(state);
    char path[128];
    snprintf(path, sizeof path, "%s/pool.sock", sock_dir);
    unlink(path);
    rmdir(sock_dir);
    snprintf(path, sizeof path, "/park_glue_%d", (int)getpid());
    shm_unlink(path); /* the simulated machine of this test */
    return 0;
}

/* Polls parking as the broker's loop does until the host pool has pinned
 * what the session could move (its `pool` in the status), waiting on the
 * pool's descriptors between polls (the pinning thread's eventfd). */
static void await_pool(world_t *w)
{
    for (int round = 0; round < 200; round++) {
        w->now += SEC / 10; /* the pools' targets are worked out again */
        gs_park_poll(w->park, w->now);
        zmq_pollitem_t items[GS_PARK_MAX_POLL_ITEMS];
        int n = gs_park_poll_items(w->park, items, GS_PARK_MAX_POLL_ITEMS);
        if (n < 1) {
            json_t *st = json_object();
            gs_park_status_add(w->park, st, w->now);
            fail_msg("no swap tier: %s", json_string_value(json_object_get(
                                             json_object_get(st, "parking"), "swap_problem")));
        }
        assert_true(zmq_poll(items, n, 100) >= 0);
        gs_park_handle_items(w->park, items, n, w->now);
        json_t *st = json_object();
        gs_park_status_add(w->park, st, w->now);
        json_t *pool = json_array_get(json_object_get(json_object_get(st, "parking"), "pool"), 0);
        json_int_t clean = json_integer_value(json_object_get(pool, "clean_bytes"));
        json_decref(st);
        if (clean >= (json_int_t)SWAP_FOOT)
            return;
    }
    fail_msg("the host pool did not pin %llu bytes", (unsigned long long)SWAP_FOOT);
}

/* The next message queued must be of type `type` for the hook. */
static json_t *next_message(world_t *w, const char *type)
{
    zframe_t *peer = NULL;
    json_t *m = gs_park_next_answer(w->park, &peer);
    assert_non_null(m);
    assert_string_equal(gs_msg_str(m, "type", ""), type);
    assert_true(zframe_eq(peer, w->hook->identity));
    zframe_destroy(&peer);
    return m;
}

/* The hook's `swapped` for a swap_out or swap_in. */
static void hook_swapped(world_t *w, const char *direction, json_int_t lease, int ok,
                         uint64_t moved, uint64_t movable, uint64_t out)
{
    json_t *m = json_pack("{s:s, s:s, s:I, s:b, s:I, s:I, s:I, s:I}", "type", "swapped",
                          "direction", direction, "lease", lease, "ok", ok, "bytes",
                          (json_int_t)moved, "elapsed_us", (json_int_t)(SEC / 50), "movable_bytes",
                          (json_int_t)movable, "swapped_bytes", (json_int_t)out);
    gs_park_on_swapped(w->park, w->hook->key, 0, m, w->now);
    json_decref(m);
}

static void swap_park_and_unpark(void **state)
{
    world_t *w = *state;
    await_pool(w);
    char info[300];
    assert_int_equal(gs_park_request(w->park, SESSION, w->now, info, sizeof info), 0);
    gs_park_poll(w->park, w->now);
    /* No job: the hook is asked to move its memory into the lease. */
    assert_int_equal(w->fake.submitted, 0);
    json_t *out = next_message(w, "swap_out");
    json_int_t lease = gs_msg_int(out, "lease", 0);
    assert_true(lease > 0);
    assert_true(gs_msg_int(out, "chunks", 0) * gs_msg_int(out, "chunk_bytes", 0) >=
                (json_int_t)SWAP_FOOT);
    json_decref(out);
    assert_parking(w, "parking");
    assert_int_equal(residency(w), GS_SCHED_MOVING);

    hook_swapped(w, "out", lease, 1, SWAP_FOOT, 0, SWAP_FOOT);
    assert_parking(w, "parked");
    assert_int_equal(residency(w), GS_SCHED_PARKED);

    /* Its cell starts: swap_in, into the same lease. */
    gs_sched_cell(w->sched, SESSION, 1, w->now);
    zframe_t *peer = NULL;
    json_t *in = NULL;
    for (int i = 0; i < 10 && !in; i++) {
        gs_park_poll(w->park, w->now);
        in = gs_park_next_answer(w->park, &peer);
        w->now += SEC / 10;
    }
    assert_non_null(in);
    assert_string_equal(gs_msg_str(in, "type", ""), "swap_in");
    assert_int_equal(gs_msg_int(in, "lease", 0), lease);
    json_decref(in);
    zframe_destroy(&peer);
    assert_parking(w, "unparking");

    hook_swapped(w, "in", lease, 1, SWAP_FOOT, SWAP_FOOT, 0);
    assert_parking(w, "resident");
    assert_int_equal(residency(w), GS_SCHED_RESIDENT);
    assert_int_equal(w->fake.submitted, 0); /* the checkpoint API was never needed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(checkpoint_park_and_unpark, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_park_leaves_it_running, setup, teardown),
        cmocka_unit_test_setup_teardown(host_ledger_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(swap_park_and_unpark, setup_swap, teardown_swap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
