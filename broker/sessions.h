/*
 * sessions.h - the broker's table of clients and notebook sessions.
 *
 * A session is one notebook kernel (registered by the launcher) or one
 * process tree started outside Jupyter (made when a hook joins without a
 * session id).  Hook clients join sessions.
 *
 * Names belong to their user (issue 34): the name a message gives (a
 * kernel id, `gpushare run --name`, GPUSHARE_SESSION) is looked up among
 * the sender's own sessions only, so alice's "train" and mallory's "train"
 * are two sessions and nobody can take or pre-claim another's name.  The
 * session's id, which the scheduler, parking, placement, the status and
 * the event log key it by, is its name for the broker's own user (a
 * per-user broker: every session, as before) and NAME@UID for everybody
 * else (gs_sessions_key).  This table keeps what the
 * broker needs to talk to them and to show them; grants, waiting and memory
 * live in the scheduler (scheduler.h), keyed by the same ids.
 */
#ifndef GS_SESSIONS_H
#define GS_SESSIONS_H

#include <czmq.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu_inventory.h"

/* The longest routing id the broker accepts (its hex is a client's key).
 * libzmq makes 5-byte ids; a peer may set its own of up to 255 bytes,
 * which would not fit: the broker refuses those (broker.c). */
#define GS_MAX_ROUTING_ID 31

/* A session id: a name (at most 128 bytes, protocol.h), '@' and a uid of
 * at most 10 digits, and the NUL (the scheduler's ids are as long). */
#define GS_SESSION_ID_MAX   140
#define GS_SESSION_NAME_MAX 129

typedef struct {
    char key[64];       /* hex of the ZeroMQ routing id; the scheduler's client id */
    zframe_t *identity; /* routing id, for replies */
    char role[16];
    long pid;       /* from join (informational) */
    long peer_pid;  /* from the connection's credentials, 0 = unknown */
    uid_t peer_uid; /* from the credentials of its first message; later ones must match */
    char session[GS_SESSION_ID_MAX]; /* the id of its session; empty until join */
    int64_t last_seen_us;
    long long acquire_seq[GS_MAX_GPUS]; /* seq of its last acquire, echoed in grants */
    long long epoch; /* its membership since its last join (0: none yet), in its grants */
} gs_client_t;

typedef struct {
    char id[GS_SESSION_ID_MAX];     /* unique: see gs_sessions_key */
    char name[GS_SESSION_NAME_MAX]; /* what its owner calls it (and sends) */
    char user[64];                  /* the owner's account name (from owner_uid), for display */
    char claimed[64];               /* the user name register sent, when it is not the account's */
    char kernel_id[129];
    char notebook[512];
    long kernel_pid;
    int registered;      /* by a launcher (else made for a hook's process) */
    int owner_known;     /* owner_uid came from the socket credentials */
    pid_t registrar_pid; /* process that registered it last (socket credentials), 0 unknown */
    /* For liveness.h: the start times of the registrar and of kernel_pid
     * (0: unknown), and whether the registrar was found gone. */
    unsigned long long registrar_start, kernel_start;
    int registrar_gone;
    uid_t owner_uid; /* who registered (or first joined) it: only they and admins act on it */
    int cell_busy;
    char cell_msg_id[129];
} gs_session_t;

typedef struct gs_sessions gs_sessions_t;

/* home_uid: the broker's own user, whose session ids are their names. */
gs_sessions_t *gs_sessions_new(uid_t home_uid);
void gs_sessions_destroy(gs_sessions_t **self_p);

/* Client by routing id; created (role "unknown") when absent.  NULL when
 * out of memory or the id is longer than GS_MAX_ROUTING_ID. */
gs_client_t *gs_sessions_client(gs_sessions_t *self, zframe_t *identity);
gs_client_t *gs_sessions_client_lookup(gs_sessions_t *self, zframe_t *identity);
gs_client_t *gs_sessions_client_by_key(gs_sessions_t *self, const char *key);
void gs_sessions_client_remove(gs_sessions_t *self, gs_client_t *client);

/* The id of the session that uid calls name, into out: name itself for
 * the home uid, unless it ends in '@' and digits (as an id of another
 * user's would), else name@uid; so no two (uid, name) pairs share an id.
 * 0, or -1 when it does not fit outlen. */
int gs_sessions_key(const gs_sessions_t *self, uid_t uid, const char *name, char *out,
                    size_t outlen);
/* The session that uid calls name (NULL: none), and the same made when
 * absent (its name set; the caller takes ownership; NULL without memory or
 * when the name is too long). */
gs_session_t *gs_sessions_named(gs_sessions_t *self, uid_t uid, const char *name);
gs_session_t *gs_sessions_create_named(gs_sessions_t *self, uid_t uid, const char *name);

/* Session by id; created when create is set and absent (named by its id).  NULL when out of
 * memory or when id does not fit (ids are checked by the protocol, see
 * GS_PROTO_MAX_ID: nothing here ever cuts one, which once let a long id
 * name another user's session). */
gs_session_t *gs_sessions_session(gs_sessions_t *self, const char *id, int create);
void gs_sessions_session_remove(gs_sessions_t *self, const char *id);

/* Iteration (stable while the table is not modified). */
gs_client_t *gs_sessions_first_client(gs_sessions_t *self);
gs_client_t *gs_sessions_next_client(gs_sessions_t *self);
gs_session_t *gs_sessions_first_session(gs_sessions_t *self);
gs_session_t *gs_sessions_next_session(gs_sessions_t *self);
size_t gs_sessions_client_count(gs_sessions_t *self);

/* Copy display text (a user or notebook name, from a message) into dst,
 * its control characters replaced and cut on a UTF-8 character boundary
 * (text_safe.h), so that what the status shows stays valid JSON and can
 * neither forge rows nor send escape sequences to a terminal. */
void gs_sessions_copy_text(char *dst, size_t size, const char *src);

#endif
