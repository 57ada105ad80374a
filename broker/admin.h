/*
 * admin.h - who may do what.  Identities come from the socket's peer
 * credentials (common/peer.h), never from message fields.
 *
 * Changing the broker's settings or touching another user's session needs
 * root or membership in the configured admin group; everyone may read the
 * status and act on their own sessions.
 */
#ifndef GS_ADMIN_H
#define GS_ADMIN_H

#include <sys/types.h>

/* 1 when uid is root or a member (primary or supplementary) of group
 * admin_gid ((gid_t)-1: no admin group). */
int gs_admin_is_admin(uid_t uid, gid_t admin_gid);

/* 1 when a client with uid may act on a session owned by owner_uid. */
int gs_admin_may_touch(uid_t uid, uid_t owner_uid, gid_t admin_gid);

#endif
