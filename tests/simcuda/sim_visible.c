/*
 * sim_visible.c - CUDA_VISIBLE_DEVICES as the driver reads it: which of
 * the machine's devices a process sees, and in which order.
 *
 * The value is a comma-separated list of device indices or UUIDs
 * ("GPU-<uuid>", or any prefix of one that names a single device).  The
 * list ends at the first entry that names no device (or one already
 * listed): the devices before it are visible, none if it is the first
 * (cuInit then fails with CUDA_ERROR_NO_DEVICE).  Unset: all, in order.
 *
 * A process' devices are its ordinals, as with the driver (a CUdevice is
 * the ordinal, and code relies on it: a memory location's id is an
 * ordinal); what the machine keeps per device (capacity used, engine
 * slots, shares, UUIDs, what a checkpoint holds) is by machine index, and
 * the few places that touch it translate (sim_dev_phys); what crosses to
 * another process (IPC and exported handles) carries machine indices.
 */
#include "sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sim_uuid_string(const CUuuid *u, char out[SIM_UUID_STRLEN])
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, SIM_UUID_STRLEN,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}

/* The device one entry names, or -1. */
static int entry_device(const char *e, size_t len, int ndev, const char uuids[][SIM_UUID_STRLEN])
{
    if (len == 0)
        return -1;
    if (len > 4 && !strncmp(e, "GPU-", 4)) {
        int found = -1;
        for (int d = 0; d < ndev; d++)
            if (strlen(uuids[d]) >= len && !strncasecmp(uuids[d], e, len)) {
                if (found >= 0)
                    return -1; /* ambiguous prefix */
                found = d;
            }
        return found;
    }
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (e[i] < '0' || e[i] > '9' || v > 1000)
            return -1;
        v = v * 10 + (e[i] - '0');
    }
    return v < ndev ? v : -1;
}

int sim_visible_parse(const char *spec, int ndev, const char uuids[][SIM_UUID_STRLEN], int *vis)
{
    if (!spec) {
        for (int d = 0; d < ndev; d++)
            vis[d] = d;
        return ndev;
    }
    int n = 0;
    const char *p = spec;
    while (n < ndev) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int d = entry_device(p, len, ndev, uuids);
        for (int i = 0; d >= 0 && i < n; i++)
            if (vis[i] == d)
                d = -1; /* listed twice */
        if (d < 0)
            break;
        vis[n++] = d;
        if (!end)
            break;
        p = end + 1;
    }
    return n;
}

int sim_dev_valid(CUdevice d)
{
    return d >= 0 && d < sim_g.nvisible;
}

int sim_dev_phys(CUdevice d)
{
    return sim_dev_valid(d) ? sim_g.visible[d] : -1;
}

CUdevice sim_dev_of_phys(int phys)
{
    for (int i = 0; i < sim_g.nvisible; i++)
        if (sim_g.visible[i] == phys)
            return i;
    return -1;
}
