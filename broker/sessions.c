/*
 * sessions.c - see sessions.h.  Two czmq hash tables keyed by string.
 */
#include "sessions.h"

#include <stdio.h>
#include <string.h>

#include "protocol.h"
#include "sched/scheduler.h"
#include "text_safe.h"

_Static_assert(GS_SESSION_ID_MAX <= GS_SCHED_ID_MAX, "the scheduler keys sessions by their ids");
_Static_assert(GS_SESSION_NAME_MAX == GS_PROTO_MAX_ID + 1, "a name is a protocol id");

struct gs_sessions {
    zhashx_t *clients;  /* key -> gs_client_t */
    zhashx_t *sessions; /* id -> gs_session_t */
    uid_t home_uid;     /* the broker's own: its sessions' ids are their names */
};

static void client_free(void **item)
{
    gs_client_t *c = *item;
    if (c) {
        zframe_destroy(&c->identity);
        free(c);
    }
    *item = NULL;
}

static void session_free(void **item)
{
    free(*item);
    *item = NULL;
}

gs_sessions_t *gs_sessions_new(uid_t home_uid)
{
    gs_sessions_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->home_uid = home_uid;
    self->clients = zhashx_new();
    self->sessions = zhashx_new();
    zhashx_set_destructor(self->clients, client_free);
    zhashx_set_destructor(self->sessions, session_free);
    return self;
}

void gs_sessions_destroy(gs_sessions_t **self_p)
{
    gs_sessions_t *self = *self_p;
    if (!self)
        return;
    zhashx_destroy(&self->clients);
    zhashx_destroy(&self->sessions);
    free(self);
    *self_p = NULL;
}

static void identity_key(zframe_t *identity, char *key, size_t keylen)
{
    char *hex = zframe_strhex(identity);
    snprintf(key, keylen, "%s", hex ? hex : "");
    free(hex);
}

gs_client_t *gs_sessions_client_lookup(gs_sessions_t *self, zframe_t *identity)
{
    char key[64];
    identity_key(identity, key, sizeof key);
    return zhashx_lookup(self->clients, key);
}

gs_client_t *gs_sessions_client_by_key(gs_sessions_t *self, const char *key)
{
    return zhashx_lookup(self->clients, key);
}

gs_client_t *gs_sessions_client(gs_sessions_t *self, zframe_t *identity)
{
    if (zframe_size(identity) > GS_MAX_ROUTING_ID)
        return NULL; /* its key would be cut, and could name another client */
    gs_client_t *c = gs_sessions_client_lookup(self, identity);
    if (c)
        return c;
    c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    identity_key(identity, c->key, sizeof c->key);
    c->identity = zframe_dup(identity);
    snprintf(c->role, sizeof c->role, "unknown");
    for (int i = 0; i < GS_MAX_GPUS; i++)
        c->acquire_seq[i] = -1;
    if (!c->identity || zhashx_insert(self->clients, c->key, c) != 0) {
        zframe_destroy(&c->identity);
        free(c);
        return NULL;
    }
    return c;
}

void gs_sessions_client_remove(gs_sessions_t *self, gs_client_t *client)
{
    zhashx_delete(self->clients, client->key);
}

gs_session_t *gs_sessions_session(gs_sessions_t *self, const char *id, int create)
{
    gs_session_t *s = zhashx_lookup(self->sessions, id);
    if (s || !create)
        return s;
    if (strlen(id) >= sizeof s->id)
        return NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    memcpy(s->id, id, strlen(id) + 1);
    gs_sessions_copy_text(s->name, sizeof s->name, id); /* (callers with a name set theirs) */
    if (zhashx_insert(self->sessions, s->id, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* 1 when name ends in '@' and at least one digit: what an id of another
 * user's session looks like. */
static int looks_qualified(const char *name)
{
    const char *at = strrchr(name, '@');
    if (!at || !at[1])
        return 0;
    for (const char *p = at + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

int gs_sessions_key(const gs_sessions_t *self, uid_t uid, const char *name, char *out,
                    size_t outlen)
{
    int n = uid == self->home_uid && !looks_qualified(name)
                ? snprintf(out, outlen, "%s", name)
                : snprintf(out, outlen, "%s@%u", name, (unsigned)uid);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

gs_session_t *gs_sessions_named(gs_sessions_t *self, uid_t uid, const char *name)
{
    char id[GS_SESSION_ID_MAX];
    if (gs_sessions_key(self, uid, name, id, sizeof id) != 0)
        return NULL;
    return zhashx_lookup(self->sessions, id);
}

gs_session_t *gs_sessions_create_named(gs_sessions_t *self, uid_t uid, const char *name)
{
    char id[GS_SESSION_ID_MAX];
    if (strlen(name) >= GS_SESSION_NAME_MAX || gs_sessions_key(self, uid, name, id, sizeof id) != 0)
        return NULL;
    gs_session_t *s = gs_sessions_session(self, id, 1);
    if (s)
        memcpy(s->name, name, strlen(name) + 1);
    return s;
}

void gs_sessions_session_remove(gs_sessions_t *self, const char *id)
{
    zhashx_delete(self->sessions, id);
}

gs_client_t *gs_sessions_first_client(gs_sessions_t *self)
{
    return zhashx_first(self->clients);
}

gs_client_t *gs_sessions_next_client(gs_sessions_t *self)
{
    return zhashx_next(self->clients);
}

gs_session_t *gs_sessions_first_session(gs_sessions_t *self)
{
    return zhashx_first(self->sessions);
}

gs_session_t *gs_sessions_next_session(gs_sessions_t *self)
{
    return zhashx_next(self->sessions);
}

size_t gs_sessions_client_count(gs_sessions_t *self)
{
    return zhashx_size(self->clients);
}

void gs_sessions_copy_text(char *dst, size_t size, const char *src)
{
    gs_text_safe(dst, size, src);
}
