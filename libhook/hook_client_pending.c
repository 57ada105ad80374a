/*
 * hook_client_pending.c - what waits to be sent to the broker, sent by
 * the I/O thread in one go: the swap thread's reports, releases, acquires
 * for devices someone waits for, make_room requests not sent yet.
 */
#include "hook_client_impl.h"

#include "hook_burst.h"
#include "hook_client_room.h"

/* Releases queued, then acquires for devices someone waits for. */
void hook_client_send_pending(void)
{
    json_t *out[MAX_RELEASES + HOOK_MAX_DEVICES];
    int n = 0;
    json_t *reports[HOOK_MAX_DEVICES];
    int nrep = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < hook_client_sh.nreports; i++)
        reports[nrep++] = hook_client_sh.reports[i];
    hook_client_sh.nreports = 0;
    for (int i = 0; i < hook_client_sh.nreleases; i++)
        out[n++] = hook_client_sh.releases[i];
    hook_client_sh.nreleases = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched || d->state != DS_WANT)
            continue;
        json_t *m = hook_client_msg_seq(GS_MSG_ACQUIRE);
        if (!m)
            continue;
        json_object_set_new(m, "device", json_string(d->uuid));
        long long p90, last;
        if (hook_burst_stats(i, &p90, &last)) { /* bmu is a leaf lock */
            json_object_set_new(m, "burst_p90_us", json_integer(p90));
            json_object_set_new(m, "burst_last_us", json_integer(last));
        }
        d->state = DS_REQUESTED;
        d->acquire_seq = hook_client_io.seq;
        d->wait_info[0] = 0;
        d->wait_holder[0] = 0;
        d->wait_left_ns = 0;
        out[n++] = m;
    }
    n += hook_client_rooms_ask_locked(out + n, (int)(sizeof out / sizeof out[0]) - n);
    pthread_mutex_unlock(&hook_gate_mu);
    for (int i = 0; i < nrep; i++)
        hook_client_send(reports[i]);
    for (int i = 0; i < n; i++)
        hook_client_send(out[i]);
}
