/*
 * load_worker.c - one thread driving a slice of the clients (load.h): a
 * zmq_poll over their sockets, bounded by the nearest timer of any of them
 * (a hold or think time ending, a heartbeat) and by a short tick so that a
 * phase change is seen at once.  Its counters are its own until the
 * controller merges them after the thread ends.
 */
#include <stdlib.h>

#include "load.h"

#define TICK_US 10000 /* phase changes are noticed this fast */

static void *run(void *arg)
{
    load_worker_t *w = arg;
    load_shared_t *sh = w->sh;
    zmq_pollitem_t *items = calloc((size_t)w->n, sizeof *items);
    if (!items) {
        atomic_fetch_add(&sh->failed, 1);
        return NULL;
    }
    for (int i = 0; i < w->n; i++)
        items[i] = (zmq_pollitem_t){zsock_resolve(w->clients[i].sock), 0, ZMQ_POLLIN, 0};
    for (;;) {
        int64_t now = load_now_us(), next = now + TICK_US;
        int left = 0;
        for (int i = 0; i < w->n; i++) {
            int64_t t = load_client_tick(&w->clients[i], sh, &w->counters, now);
            if (t < next)
                next = t;
            left += w->clients[i].st != LC_DONE;
        }
        if (!left)
            break;
        long ms = next <= now ? 0 : (long)((next - now + 999) / 1000);
        if (zmq_poll(items, w->n, ms) < 0 && zmq_errno() != EINTR) {
            atomic_fetch_add(&sh->failed, 1);
            break;
        }
        now = load_now_us();
        for (int i = 0; i < w->n; i++)
            if (items[i].revents & ZMQ_POLLIN)
                load_client_read(&w->clients[i], sh, &w->counters, now);
    }
    free(items);
    return NULL;
}

int load_worker_start(load_worker_t *w)
{
    return pthread_create(&w->thread, NULL, run, w);
}

void load_worker_join(load_worker_t *w)
{
    pthread_join(w->thread, NULL);
}
