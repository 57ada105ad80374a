/*
 * sessions.c - see sessions.h.  Two czmq hash tables keyed by string.
 */
#include "sessions.h"

#include <string.h>

struct gs_sessions {
    zhashx_t *clients;  /* key -> gs_client_t */
    zhashx_t *sessions; /* id -> gs_session_t */
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

gs_sessions_t *gs_sessions_new(void)
{
    gs_sessions_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
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
    if (zhashx_insert(self->sessions, s->id, s) != 0) {
        free(s);
        return NULL;
    }
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
    if (size == 0)
        return;
    size_t n = strlen(src);
    if (n >= size) {
        n = size - 1;
        /* back off over continuation bytes to the start of the cut character */
        while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}
