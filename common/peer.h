/*
 * peer.h - who is on the other end of an ipc connection.
 *
 * libzmq reads SO_PEERCRED when an ipc connection is accepted and appends
 * ":uid:gid:pid" to the message property "Peer-Address".  The broker takes
 * identities from there, never from message fields, which a client could
 * forge.
 */
#ifndef GS_PEER_H
#define GS_PEER_H

#include <sys/types.h>

typedef struct {
    int valid; /* credentials were available (ipc transport): uid and gid are real */
    uid_t uid;
    gid_t gid;
    pid_t pid; /* 0 when the peer is outside the receiver's pid namespace */
} gs_peer_t;

/* Parse a Peer-Address value ("<addr>:uid:gid:pid").  Returns 0, or -1
 * (out->valid = 0) when it carries no credentials.  A pid of 0 still
 * parses: the kernel gives 0 for a peer in a pid namespace the receiver
 * cannot see (a container without hostPID), whose uid is still the
 * receiver's view of the peer's uid, so it still decides what it may do. */
int gs_peer_parse(const char *peer_address, gs_peer_t *out);

#endif
