/*
 * conn_caps.h - how many connections one user may hold on a socket that
 * every user shares (the broker's ZeroMQ socket, the pool socket), with
 * room kept for the other users and for root.
 *
 * A socket can hold `total` connections (the descriptors it may use, or its
 * slots).  A cap per uid alone does not keep anyone's room: when it is as
 * large as the total (the broker's socket under a low open-file limit: 128
 * of them, and 256 per uid), one user fills the socket and every later
 * connection, root's included, is cut (issue 34).  So:
 *
 *  - an eighth of the total (at least 1) is kept for the trusted uids, root
 *    and the broker's own account (`gpushare status` by an administrator,
 *    the service's own tools): the users together hold at most the rest;
 *  - one user's uid holds at most a quarter of the users' room (and no
 *    more than the cap asked for): it takes four users at their caps to
 *    fill it, and each of them is refused long before the others are;
 *  - a trusted uid holds at most the cap asked for (it may use the whole
 *    room: root can take the machine anyway, and a per-user broker's own
 *    user is the only one it serves).
 *
 * Pure arithmetic, unit-tested (tests/unit/test_conn_caps.c).
 */
#ifndef GS_CONN_CAPS_H
#define GS_CONN_CAPS_H

#include <sys/types.h>

#define GS_CONN_CAPS_RESERVE_DIV 8 /* the trusted uids' part of the total */
#define GS_CONN_CAPS_SHARE_DIV   4 /* one uid's most of the users' room */

typedef struct {
    int total;       /* everyone together */
    int reserved;    /* of which only the trusted may take */
    int per_uid;     /* one user's uid */
    int per_trusted; /* one trusted uid: the cap asked for */
} gs_conn_caps_t;

/* The caps of a socket with room for `total` connections, where one uid
 * was asked to hold at most `per_uid` (for users, the smaller of that and
 * their share applies; at least 1 each). */
gs_conn_caps_t gs_conn_caps_make(int total, int per_uid);

typedef enum {
    GS_CONN_ADMIT,
    GS_CONN_OVER_UID,   /* the uid holds its cap already */
    GS_CONN_OVER_USERS, /* the users' room is full: only the trusted now */
    GS_CONN_FULL,       /* no room at all */
} gs_conn_verdict_t;

/* Whether a new connection of a uid (trusted: root or the broker's own
 * account) may stay, given what is open before it: uid_open of its uid,
 * users_open of all untrusted uids, all_open in all. */
gs_conn_verdict_t gs_conn_caps_admit(const gs_conn_caps_t *caps, int trusted, int uid_open,
                                     int users_open, int all_open);

/* 1 for root and for the account the broker runs as (self). */
int gs_conn_caps_trusted(uid_t uid, uid_t self);

#endif
