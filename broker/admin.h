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

#include <stddef.h>
#include <sys/types.h>

/* 1 when uid is root or a member (primary or supplementary) of group
 * admin_gid ((gid_t)-1: no admin group). */
int gs_admin_is_admin(uid_t uid, gid_t admin_gid);

/* 1 when a client with uid may act on a session owned by owner_uid. */
int gs_admin_may_touch(uid_t uid, uid_t owner_uid, gid_t admin_gid);

/* The same for a message's sender: has_creds is 0 when the message came
 * without peer credentials, and such a sender may touch nothing (fail
 * closed: the broker serves only ipc sockets, which always carry them).
 * owner_known is 0 for a session nobody with credentials owns yet. */
int gs_admin_sender_may_touch(int has_creds, uid_t uid, int owner_known, uid_t owner_uid,
                              gid_t admin_gid);

/* The account name of uid ("uid 1234" without a passwd entry), for what
 * the status and wait lines show as a session's user. */
void gs_admin_account_name(uid_t uid, char *out, size_t outlen);

#endif
