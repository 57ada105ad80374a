/*
 * conn_caps.c - see conn_caps.h.
 */
#include "conn_caps.h"

gs_conn_caps_t gs_conn_caps_make(int total, int per_uid)
{
    gs_conn_caps_t c = {total < 1 ? 1 : total, 0, 1, per_uid < 1 ? 1 : per_uid};
    if (c.total >= 2) {
        c.reserved = c.total / GS_CONN_CAPS_RESERVE_DIV;
        if (c.reserved < 1)
            c.reserved = 1;
    }
    int share = (c.total - c.reserved) / GS_CONN_CAPS_SHARE_DIV;
    if (share < 1)
        share = 1;
    c.per_uid = c.per_trusted < share ? c.per_trusted : share;
    return c;
}

gs_conn_verdict_t gs_conn_caps_admit(const gs_conn_caps_t *caps, int trusted, int uid_open,
                                     int users_open, int all_open)
{
    if (all_open >= caps->total)
        return GS_CONN_FULL;
    if (uid_open >= (trusted ? caps->per_trusted : caps->per_uid))
        return GS_CONN_OVER_UID;
    if (!trusted && users_open >= caps->total - caps->reserved)
        return GS_CONN_OVER_USERS;
    return GS_CONN_ADMIT;
}

int gs_conn_caps_trusted(uid_t uid, uid_t self)
{
    return uid == 0 || uid == self;
}
