/*
 * protocol.c - the gpushare wire protocol (see protocol.h, doc/protocol.md).
 *
 * One static schema table drives validation: per message type, its name and
 * the specs of its fields.  Everything a peer sends is checked against it
 * before any field is read; everything we send is checked before it leaves.
 *
 * Error texts are plain printable ASCII: values taken from the peer are
 * quoted with non-printable bytes escaped and long values shortened, so an
 * error text can itself be sent back in an error reply.
 */
#include "protocol.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The schema                                                               */

static const char *const role_values[] = {"hook", "launcher", "cli", "provisioner", NULL};
static const char *const policy_values[] = {"exclusive", "burst", "adaptive", NULL};
static const char *const onoff_values[] = {"on", "off", NULL};
static const char *const cell_state_values[] = {"busy", "idle", NULL};
static const char *const memory_mode_values[] = {"device", "managed", NULL};
static const char *const revoke_reason_values[] = {"quantum", "cell_idle", "preempt", "park",
                                                   "policy",  "shutdown",  NULL};
static const char *const release_reason_values[] = {"revoked", "idle", "exit", NULL};
static const char *const direction_values[] = {"out", "in", "drop", NULL};

#define REQ 1
#define OPT 0
/* clang-format off */
#define F_STR(n, r)       {(n), GS_FIELD_STRING, (r), 0, GS_PROTO_MAX_STRING, NULL, 0}
#define F_INT(n, r, mn)   {(n), GS_FIELD_INT, (r), (mn), 0, NULL, 0}
#define F_BOOL(n, r)      {(n), GS_FIELD_BOOL, (r), 0, 0, NULL, 0}
#define F_OBJ(n, r)       {(n), GS_FIELD_OBJECT, (r), 0, 0, NULL, 0}
#define F_STRARR(n, r)    {(n), GS_FIELD_STRING_ARRAY, (r), 0, GS_PROTO_MAX_STRING, NULL, 0}
#define F_ENUM(n, r, v)   {(n), GS_FIELD_ENUM, (r), 0, 0, (v), 0}
#define F_ID(n, r)        {(n), GS_FIELD_STRING, (r), 0, GS_PROTO_MAX_ID, NULL, 1}
/* clang-format on */

/* One field per line, as the specification reads. */
/* clang-format off */
static const gs_field_spec_t hello_fields[] = {
    F_ENUM("role", REQ, role_values),
    F_INT("pid", REQ, 1),
    F_ID("session", OPT),
    F_STR("client_version", OPT),
    F_INT("gpus", OPT, 1),
    F_STR("visible", OPT),
    F_BOOL("place", OPT),
};
static const gs_field_spec_t welcome_fields[] = {
    F_STR("client_id", REQ),
    F_STR("broker_version", REQ),
    F_ENUM("policy", REQ, policy_values),
    F_ENUM("scheduler", REQ, onoff_values),
    F_INT("heartbeat_ms", REQ, 1),
    F_BOOL("simulated", REQ),
    F_STRARR("devices", OPT),
};
static const gs_field_spec_t register_fields[] = {
    F_ID("kernel_id", REQ),
    F_STR("user", REQ),
    F_STR("notebook", OPT),
    F_INT("pid", REQ, 1),
};
static const gs_field_spec_t registered_fields[] = {
    F_ID("session", REQ),
};
static const gs_field_spec_t unregister_fields[] = {
    F_ID("session", REQ),
};
static const gs_field_spec_t cell_fields[] = {
    F_ID("session", REQ),
    F_ENUM("state", REQ, cell_state_values),
    F_STR("msg_id", REQ),
};
static const gs_field_spec_t join_fields[] = {
    F_INT("pid", REQ, 1),
    F_ID("session", OPT),
    F_STRARR("devices", REQ),
    F_ENUM("memory_mode", OPT, memory_mode_values),
    F_BOOL("swap", OPT),
    F_INT("swap_segment_bytes", OPT, 1048576),
    F_BOOL("gang", OPT),
};
static const gs_field_spec_t acquire_fields[] = {
    F_STR("device", REQ),
    F_INT("burst_p90_us", OPT, 0),
    F_INT("burst_last_us", OPT, 0),
};
static const gs_field_spec_t grant_fields[] = {
    F_STR("device", REQ),
    F_INT("grant_id", REQ, 1),
    F_INT("quantum_us", REQ, 0),
    F_INT("epoch", OPT, 1),
    F_INT("idle_release_us", OPT, 0),
};
static const gs_field_spec_t revoke_fields[] = {
    F_STR("device", REQ),
    F_INT("grant_id", REQ, 1),
    F_ENUM("reason", REQ, revoke_reason_values),
};
static const gs_field_spec_t release_fields[] = {
    F_STR("device", REQ),
    F_INT("grant_id", REQ, 1),
    F_ENUM("reason", REQ, release_reason_values),
    F_INT("used_us", OPT, 0),
    F_INT("overuse_us", OPT, 0),
};
static const gs_field_spec_t memory_fields[] = {
    F_STR("device", REQ),
    F_INT("used_bytes", REQ, 0),
    F_INT("managed_bytes", OPT, 0),
    F_INT("peak_bytes", OPT, 0),
    F_INT("movable_bytes", OPT, 0),
    F_INT("swapped_bytes", OPT, 0),
};
static const gs_field_spec_t make_room_fields[] = {
    F_STR("device", REQ),
    F_INT("bytes", REQ, 1),
    F_INT("timeout_ms", OPT, 0), /* how long the hook waits (then told why it waits) */
};
static const gs_field_spec_t room_fields[] = {
    F_STR("device", REQ),
    F_BOOL("ok", REQ),
    F_INT("free_bytes", OPT, 0),
    F_STR("reason", OPT),
    F_BOOL("waiting", OPT), /* not an answer: the request waits, for reason */
};
static const gs_field_spec_t swap_out_fields[] = {
    F_STR("device", REQ),
    F_INT("lease", REQ, 1),
    F_INT("chunks", REQ, 1),
    F_INT("chunk_bytes", REQ, 1),
    F_INT("wait_ms", OPT, 1),
    F_INT("bytes", OPT, 0), /* a partial park: about this much (0: all) */
};
/* lease 0 in swap_in and swapped: the process maps chunks a broker that
 * is gone lent it (it reports swapped_bytes after a restart). */
static const gs_field_spec_t swap_in_fields[] = {
    F_STR("device", REQ),
    F_INT("lease", REQ, 0),
    F_INT("wait_ms", OPT, 1),
};
/* The disk tier holds what lease `lease` held (lease 0: the chunks a
 * broker that is gone lent). */
static const gs_field_spec_t swap_drop_fields[] = {
    F_STR("device", REQ),
    F_INT("lease", REQ, 0),
};
/* A checkpointed process restored onto another GPU: the device the hook
 * names (as its process saw it) is now the GPU `to`. */
static const gs_field_spec_t moved_fields[] = {
    F_STR("device", REQ),
    F_STR("to", REQ),
};
static const gs_field_spec_t frozen_fields[] = {
    F_STR("device", REQ),
    F_BOOL("frozen", REQ),
};
static const gs_field_spec_t swapped_fields[] = {
    F_STR("device", REQ),
    F_INT("lease", REQ, 0),
    F_ENUM("direction", REQ, direction_values),
    F_BOOL("ok", REQ),
    F_INT("bytes", REQ, 0),
    F_INT("elapsed_us", REQ, 0),
    F_INT("resident_bytes", REQ, 0),
    F_INT("movable_bytes", OPT, 0),
    F_INT("swapped_bytes", OPT, 0),
    F_STR("error", OPT),
};
static const gs_field_spec_t status_reply_fields[] = {
    F_OBJ("status", REQ),
};
static const gs_field_spec_t set_fields[] = {
    F_OBJ("settings", REQ),
    F_BOOL("persist", OPT),
};
static const gs_field_spec_t park_fields[] = {
    F_ID("session", REQ),
};
static const gs_field_spec_t ok_fields[] = {
    F_STR("info", OPT),
    F_ID("session", OPT),
    F_INT("epoch", OPT, 1),
    F_STR("holder", OPT),
    F_INT("left_ms", OPT, 0),
};
static const gs_field_spec_t heartbeat_fields[] = {
    F_INT("epoch", OPT, 1),
};
static const gs_field_spec_t error_fields[] = {
    F_STR("code", REQ),
    F_STR("message", REQ),
    F_STR("request_type", OPT),
};

/* clang-format on */

typedef struct {
    const char *name;
    const gs_field_spec_t *fields;
    size_t nfields;
} gs_msg_schema_t;

/* clang-format off */
#define SCHEMA(n, f)    {(n), (f), sizeof(f) / sizeof((f)[0])}
#define SCHEMA_EMPTY(n) {(n), NULL, 0}
/* clang-format on */

static const gs_msg_schema_t schema[GS_MSG_COUNT] = {
    [GS_MSG_HELLO] = SCHEMA("hello", hello_fields),
    [GS_MSG_WELCOME] = SCHEMA("welcome", welcome_fields),
    [GS_MSG_REGISTER] = SCHEMA("register", register_fields),
    [GS_MSG_REGISTERED] = SCHEMA("registered", registered_fields),
    [GS_MSG_UNREGISTER] = SCHEMA("unregister", unregister_fields),
    [GS_MSG_CELL] = SCHEMA("cell", cell_fields),
    [GS_MSG_JOIN] = SCHEMA("join", join_fields),
    [GS_MSG_ACQUIRE] = SCHEMA("acquire", acquire_fields),
    [GS_MSG_GRANT] = SCHEMA("grant", grant_fields),
    [GS_MSG_REVOKE] = SCHEMA("revoke", revoke_fields),
    [GS_MSG_RELEASE] = SCHEMA("release", release_fields),
    [GS_MSG_MEMORY] = SCHEMA("memory", memory_fields),
    [GS_MSG_MAKE_ROOM] = SCHEMA("make_room", make_room_fields),
    [GS_MSG_ROOM] = SCHEMA("room", room_fields),
    [GS_MSG_SWAP_OUT] = SCHEMA("swap_out", swap_out_fields),
    [GS_MSG_SWAP_IN] = SCHEMA("swap_in", swap_in_fields),
    [GS_MSG_SWAP_DROP] = SCHEMA("swap_drop", swap_drop_fields),
    [GS_MSG_SWAPPED] = SCHEMA("swapped", swapped_fields),
    [GS_MSG_MOVED] = SCHEMA("moved", moved_fields),
    [GS_MSG_FROZEN] = SCHEMA("frozen", frozen_fields),
    [GS_MSG_HEARTBEAT] = SCHEMA("heartbeat", heartbeat_fields),
    [GS_MSG_STATUS] = SCHEMA_EMPTY("status"),
    [GS_MSG_STATUS_REPLY] = SCHEMA("status_reply", status_reply_fields),
    [GS_MSG_SET] = SCHEMA("set", set_fields),
    [GS_MSG_PARK] = SCHEMA("park", park_fields),
    [GS_MSG_OK] = SCHEMA("ok", ok_fields),
    [GS_MSG_ERROR] = SCHEMA("error", error_fields),
};

static const char *const perr_names[GS_PERR_COUNT] = {
    [GS_PERR_NONE] = "none",
    [GS_PERR_TOO_LARGE] = "too_large",
    [GS_PERR_EMPTY] = "empty",
    [GS_PERR_NOT_JSON] = "not_json",
    [GS_PERR_NOT_OBJECT] = "not_object",
    [GS_PERR_NO_VERSION] = "no_version",
    [GS_PERR_BAD_VERSION] = "bad_version",
    [GS_PERR_NO_TYPE] = "no_type",
    [GS_PERR_UNKNOWN_TYPE] = "unknown_type",
    [GS_PERR_MISSING_FIELD] = "missing_field",
    [GS_PERR_WRONG_TYPE] = "wrong_type",
    [GS_PERR_BAD_VALUE] = "bad_value",
};

static const char *const kind_names[GS_FIELD_KIND_COUNT] = {
    [GS_FIELD_STRING] = "string",
    [GS_FIELD_INT] = "int",
    [GS_FIELD_BOOL] = "bool",
    [GS_FIELD_OBJECT] = "object",
    [GS_FIELD_STRING_ARRAY] = "string_array",
    [GS_FIELD_ENUM] = "enum",
};

/* ------------------------------------------------------------------------ */
/* Names                                                                    */

const char *gs_msg_type_name(gs_msg_type_t type)
{
    if ((unsigned)type >= GS_MSG_COUNT)
        return NULL;
    return schema[type].name;
}

gs_msg_type_t gs_msg_type_from_name(const char *name)
{
    if (!name)
        return GS_MSG_COUNT;
    for (int t = 0; t < GS_MSG_COUNT; t++)
        if (strcmp(schema[t].name, name) == 0)
            return (gs_msg_type_t)t;
    return GS_MSG_COUNT;
}

/* Same, for a string that may hold NULs (a jansson string has a length). */
static gs_msg_type_t type_from_namen(const char *name, size_t len)
{
    for (int t = 0; t < GS_MSG_COUNT; t++)
        if (strlen(schema[t].name) == len && memcmp(schema[t].name, name, len) == 0)
            return (gs_msg_type_t)t;
    return GS_MSG_COUNT;
}

const char *gs_perr_code_name(gs_perr_code_t code)
{
    if ((unsigned)code >= GS_PERR_COUNT)
        return "unknown";
    return perr_names[code];
}

size_t gs_msg_field_count(gs_msg_type_t type)
{
    if ((unsigned)type >= GS_MSG_COUNT)
        return 0;
    return schema[type].nfields;
}

const gs_field_spec_t *gs_msg_field_info(gs_msg_type_t type, size_t i)
{
    if ((unsigned)type >= GS_MSG_COUNT || i >= schema[type].nfields)
        return NULL;
    return &schema[type].fields[i];
}

const char *gs_field_kind_name(gs_field_kind_t kind)
{
    if ((unsigned)kind >= GS_FIELD_KIND_COUNT)
        return NULL;
    return kind_names[kind];
}

/* ------------------------------------------------------------------------ */
/* Error texts                                                              */

static void set_err(gs_perr_t *err, gs_perr_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* snprintf truncates safely; all pieces are ASCII, so no character is cut. */
static void set_err(gs_perr_t *err, gs_perr_code_t code, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}

static void clear_err(gs_perr_t *err)
{
    if (!err)
        return;
    err->code = GS_PERR_NONE;
    err->text[0] = '\0';
}

/* Longest piece of peer data quoted in an error text. */
#define QUOTE_MAX 48

/* Copy s (len bytes, may hold NULs or any byte) into out as printable ASCII:
 * '"', '\\' and bytes outside 0x20..0x7e are escaped, and a long value is
 * cut with "..." appended.  out must hold at least QUOTE_MAX + 8 bytes. */
static void quote(char *out, size_t outsz, const char *s, size_t len)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[5];
        size_t n;

        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            n = 2;
        } else if (c < 0x20 || c > 0x7e) {
            snprintf(tmp, sizeof(tmp), "\\x%02x", c);
            n = 4;
        } else {
            tmp[0] = (char)c;
            n = 1;
        }
        if (o + n > QUOTE_MAX || o + n + 4 > outsz) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, tmp, n);
        o += n;
    }
    out[o] = '\0';
}

static const char *json_type_word(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}

static const char *kind_expect(gs_field_kind_t kind)
{
    switch (kind) {
    case GS_FIELD_STRING:
    case GS_FIELD_ENUM:
        return "a string";
    case GS_FIELD_INT:
        return "an integer";
    case GS_FIELD_BOOL:
        return "a boolean";
    case GS_FIELD_OBJECT:
        return "an object";
    case GS_FIELD_STRING_ARRAY:
        return "an array of strings";
    case GS_FIELD_KIND_COUNT:
        break;
    }
    return "?";
}

/* ------------------------------------------------------------------------ */
/* Validation                                                               */

/* A STRING value (or a STRING_ARRAY item): non-empty, no NUL, <= max bytes.
 * what is e.g. `field "user"` or `field "devices" item 3`. */
static int check_string(const char *mname, const char *what, const json_t *v, size_t max,
                        gs_perr_t *err)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);

    if (len == 0) {
        set_err(err, GS_PERR_BAD_VALUE, "message \"%s\": %s must not be empty", mname, what);
        return -1;
    }
    if (len > max) {
        set_err(err, GS_PERR_BAD_VALUE,
                "message \"%s\": %s is %zu bytes, longer than the %zu-byte limit", mname, what, len,
                max);
        return -1;
    }
    if (memchr(s, '\0', len)) {
        set_err(err, GS_PERR_BAD_VALUE, "message \"%s\": %s contains a NUL byte", mname, what);
        return -1;
    }
    return 0;
}

int gs_proto_id_valid(const char *s, size_t len)
{
    if (!s || len == 0 || len > GS_PROTO_MAX_ID)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (c == '\0' || !strchr(GS_PROTO_ID_PUNCT, c)))
            return 0;
    }
    return 1;
}

/* An id field (session, kernel_id): a STRING that passed check_string, in
 * the id alphabet. */
static int check_id(const char *mname, const char *what, const json_t *v, gs_perr_t *err)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (gs_proto_id_valid(s, len))
        return 0;
    char got[QUOTE_MAX + 8];
    quote(got, sizeof(got), s, len);
    set_err(err, GS_PERR_BAD_VALUE,
            "message \"%s\": %s may hold only ASCII letters, digits and \"%s\", got \"%s\"", mname,
            what, GS_PROTO_ID_PUNCT, got);
    return -1;
}

static int check_field(const char *mname, const gs_field_spec_t *f, const json_t *v, gs_perr_t *err)
{
    char what[96];
    int ok;

    snprintf(what, sizeof(what), "field \"%s\"", f->name);
    switch (f->kind) {
    case GS_FIELD_STRING:
    case GS_FIELD_ENUM:
        ok = json_is_string(v);
        break;
    case GS_FIELD_INT:
        ok = json_is_integer(v);
        break;
    case GS_FIELD_BOOL:
        ok = json_is_boolean(v);
        break;
    case GS_FIELD_OBJECT:
        ok = json_is_object(v);
        break;
    case GS_FIELD_STRING_ARRAY:
        ok = json_is_array(v);
        break;
    default:
        ok = 0;
        break;
    }
    if (!ok) {
        set_err(err, GS_PERR_WRONG_TYPE, "message \"%s\": %s must be %s, got %s", mname, what,
                kind_expect(f->kind), json_type_word(v));
        return -1;
    }

    switch (f->kind) {
    case GS_FIELD_STRING:
        if (check_string(mname, what, v, f->max_len, err) < 0)
            return -1;
        return f->ident ? check_id(mname, what, v, err) : 0;

    case GS_FIELD_INT: {
        json_int_t n = json_integer_value(v);
        if (n < f->min) {
            set_err(err, GS_PERR_BAD_VALUE, "message \"%s\": %s must be >= %lld, got %lld", mname,
                    what, (long long)f->min, (long long)n);
            return -1;
        }
        return 0;
    }

    case GS_FIELD_ENUM: {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        char list[160], got[QUOTE_MAX + 8];
        size_t o = 0;

        for (const char *const *e = f->values; *e; e++)
            if (strlen(*e) == len && memcmp(*e, s, len) == 0)
                return 0;
        list[0] = '\0';
        for (const char *const *e = f->values; *e; e++) {
            int n = snprintf(list + o, sizeof(list) - o, "%s%s", e == f->values ? "" : ", ", *e);
            if (n < 0 || (size_t)n >= sizeof(list) - o)
                break;
            o += (size_t)n;
        }
        quote(got, sizeof(got), s, len);
        set_err(err, GS_PERR_BAD_VALUE, "message \"%s\": %s must be one of %s, got \"%s\"", mname,
                what, list, got);
        return -1;
    }

    case GS_FIELD_STRING_ARRAY: {
        size_t n = json_array_size(v);
        if (n > GS_PROTO_MAX_ITEMS) {
            set_err(err, GS_PERR_BAD_VALUE,
                    "message \"%s\": %s has %zu items, more than the %d-item limit", mname, what, n,
                    GS_PROTO_MAX_ITEMS);
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            const json_t *item = json_array_get(v, i);
            char iwhat[128];

            snprintf(iwhat, sizeof(iwhat), "field \"%s\" item %zu", f->name, i);
            if (!json_is_string(item)) {
                set_err(err, GS_PERR_WRONG_TYPE, "message \"%s\": %s must be a string, got %s",
                        mname, iwhat, json_type_word(item));
                return -1;
            }
            if (check_string(mname, iwhat, item, f->max_len, err) < 0)
                return -1;
        }
        return 0;
    }

    case GS_FIELD_BOOL:
    case GS_FIELD_OBJECT:
    default:
        return 0;
    }
}

gs_msg_type_t gs_msg_validate(const json_t *msg, gs_perr_t *err)
{
    const json_t *v, *t, *seq;
    const gs_msg_schema_t *sc;
    gs_msg_type_t type;

    clear_err(err);
    if (!msg) {
        set_err(err, GS_PERR_NOT_OBJECT, "no message (NULL)");
        return GS_MSG_COUNT;
    }
    if (!json_is_object(msg)) {
        set_err(err, GS_PERR_NOT_OBJECT, "message must be a JSON object, got %s",
                json_type_word(msg));
        return GS_MSG_COUNT;
    }

    /* The version first: another version may name its types differently. */
    v = json_object_get(msg, "v");
    if (!v) {
        set_err(err, GS_PERR_NO_VERSION, "field \"v\" (protocol version) is missing");
        return GS_MSG_COUNT;
    }
    if (!json_is_integer(v)) {
        set_err(err, GS_PERR_BAD_VERSION,
                "field \"v\" (protocol version) must be an integer, got %s (this side speaks %d)",
                json_type_word(v), GS_PROTO_VERSION);
        return GS_MSG_COUNT;
    }
    if (json_integer_value(v) != GS_PROTO_VERSION) {
        set_err(err, GS_PERR_BAD_VERSION,
                "protocol version %lld is not supported (this side speaks %d)",
                (long long)json_integer_value(v), GS_PROTO_VERSION);
        return GS_MSG_COUNT;
    }

    t = json_object_get(msg, "type");
    if (!t) {
        set_err(err, GS_PERR_NO_TYPE, "field \"type\" is missing");
        return GS_MSG_COUNT;
    }
    if (!json_is_string(t)) {
        set_err(err, GS_PERR_NO_TYPE, "field \"type\" must be a string, got %s", json_type_word(t));
        return GS_MSG_COUNT;
    }
    type = type_from_namen(json_string_value(t), json_string_length(t));
    if (type == GS_MSG_COUNT) {
        char q[QUOTE_MAX + 8];
        quote(q, sizeof(q), json_string_value(t), json_string_length(t));
        set_err(err, GS_PERR_UNKNOWN_TYPE, "unknown message type \"%s\"", q);
        return GS_MSG_COUNT;
    }
    sc = &schema[type];

    seq = json_object_get(msg, "seq");
    if (seq) {
        if (!json_is_integer(seq)) {
            set_err(err, GS_PERR_WRONG_TYPE,
                    "message \"%s\": field \"seq\" must be an integer, got %s", sc->name,
                    json_type_word(seq));
            return GS_MSG_COUNT;
        }
        if (json_integer_value(seq) < 0) {
            set_err(err, GS_PERR_BAD_VALUE, "message \"%s\": field \"seq\" must be >= 0, got %lld",
                    sc->name, (long long)json_integer_value(seq));
            return GS_MSG_COUNT;
        }
    }

    for (size_t i = 0; i < sc->nfields; i++) {
        const gs_field_spec_t *f = &sc->fields[i];
        const json_t *fv = json_object_get(msg, f->name);

        if (!fv) {
            if (f->required) {
                set_err(err, GS_PERR_MISSING_FIELD, "message \"%s\": field \"%s\" is missing",
                        sc->name, f->name);
                return GS_MSG_COUNT;
            }
            continue;
        }
        if (check_field(sc->name, f, fv, err) < 0)
            return GS_MSG_COUNT;
    }
    /* Other keys are ignored: a newer peer may send more. */
    return type;
}

/* ------------------------------------------------------------------------ */
/* Parsing and encoding                                                     */

json_t *gs_msg_load(const void *data, size_t size, gs_perr_t *err)
{
    json_error_t jerr;
    json_t *root;

    clear_err(err);
    if (size > GS_PROTO_MAX_SIZE) {
        set_err(err, GS_PERR_TOO_LARGE, "frame of %zu bytes exceeds the %d-byte limit", size,
                GS_PROTO_MAX_SIZE);
        return NULL;
    }
    if (size == 0 || !data) {
        set_err(err, GS_PERR_EMPTY, "empty frame");
        return NULL;
    }
    /* json_loadb reads exactly size bytes.  Without JSON_ALLOW_NUL jansson
     * refuses "\u0000" in strings; a raw NUL byte is a syntax error, and so is
     * anything after the object (EOF check); bad UTF-8 is refused.
     * JSON_DECODE_ANY so that a bare number or string is "not an object"
     * rather than a syntax error.  Nesting depth is bounded by jansson. */
    root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        char q[sizeof(jerr.text) + 8];
        size_t tl = strnlen(jerr.text, sizeof(jerr.text));
        size_t o = 0;

        /* jansson may quote input bytes in its text; keep it printable. */
        for (size_t i = 0; i < tl && o + 1 < sizeof(q); i++) {
            unsigned char c = (unsigned char)jerr.text[i];
            q[o++] = (c >= 0x20 && c <= 0x7e) ? (char)c : '?';
        }
        q[o] = '\0';
        set_err(err, GS_PERR_NOT_JSON, "not JSON: %s at line %d column %d", q, jerr.line,
                jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        set_err(err, GS_PERR_NOT_OBJECT, "message must be a JSON object, got %s",
                json_type_word(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

json_t *gs_msg_parse(const void *data, size_t size, gs_msg_type_t *type, gs_perr_t *err)
{
    json_t *root;
    gs_msg_type_t t;

    if (type)
        *type = GS_MSG_COUNT;
    root = gs_msg_load(data, size, err);
    if (!root)
        return NULL;
    t = gs_msg_validate(root, err);
    if (t == GS_MSG_COUNT) {
        json_decref(root);
        return NULL;
    }
    if (type)
        *type = t;
    return root;
}

char *gs_msg_encode(const json_t *msg, size_t *size, gs_perr_t *err)
{
    char *out;
    size_t len;

    if (size)
        *size = 0;
    if (gs_msg_validate(msg, err) == GS_MSG_COUNT)
        return NULL;
    out = json_dumps(msg, JSON_COMPACT);
    if (!out) {
        set_err(err, GS_PERR_BAD_VALUE, "could not serialise the message (out of memory?)");
        return NULL;
    }
    len = strlen(out);
    if (len > GS_PROTO_MAX_SIZE) {
        set_err(err, GS_PERR_TOO_LARGE, "frame of %zu bytes exceeds the %d-byte limit", len,
                GS_PROTO_MAX_SIZE);
        free(out);
        return NULL;
    }
    if (size)
        *size = len;
    return out;
}

/* ------------------------------------------------------------------------ */
/* Building                                                                 */

json_t *gs_msg_new(gs_msg_type_t type)
{
    json_t *m;

    if ((unsigned)type >= GS_MSG_COUNT)
        return NULL;
    m = json_object();
    if (!m)
        return NULL;
    if (json_object_set_new(m, "v", json_integer(GS_PROTO_VERSION)) < 0 ||
        json_object_set_new(m, "type", json_string(schema[type].name)) < 0) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* A JSON string that passes the STRING rule whatever the caller gave:
 * NULL or empty -> dflt, cut to GS_PROTO_MAX_STRING bytes on a character
 * boundary, and bytes that are not valid UTF-8 (or NUL) replaced by '?'. */
static json_t *safe_string(const char *s, const char *dflt)
{
    size_t len;
    json_t *j;
    char *copy;

    if (!s || !*s)
        s = dflt;
    len = strlen(s);
    if (len > GS_PROTO_MAX_STRING) {
        len = GS_PROTO_MAX_STRING;
        while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80)
            len--;
    }
    j = json_stringn(s, len);
    if (j)
        return j;
    /* Not UTF-8: keep printable ASCII. */
    copy = malloc(len + 1);
    if (!copy)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        copy[i] = (c >= 0x20 && c <= 0x7e) ? (char)c : '?';
    }
    j = json_stringn(copy, len);
    free(copy);
    return j;
}

json_t *gs_msg_error_reply(const json_t *request, const char *code, const char *message)
{
    json_t *m = gs_msg_new(GS_MSG_ERROR);

    if (!m)
        return NULL;
    if (json_object_set_new(m, "code", safe_string(code, "error")) < 0 ||
        json_object_set_new(m, "message", safe_string(message, code && *code ? code : "error")) <
            0) {
        json_decref(m);
        return NULL;
    }
    if (json_is_object(request)) {
        const json_t *seq = json_object_get(request, "seq");
        const json_t *t = json_object_get(request, "type");

        /* Echo only what keeps the reply valid. */
        if (json_is_integer(seq) && json_integer_value(seq) >= 0)
            json_object_set_new(m, "seq", json_integer(json_integer_value(seq)));
        if (json_is_string(t)) {
            size_t len = json_string_length(t);
            const char *s = json_string_value(t);
            if (len > 0 && len <= GS_PROTO_MAX_STRING && !memchr(s, '\0', len))
                json_object_set_new(m, "request_type", json_stringn(s, len));
        }
    }
    return m;
}

/* ------------------------------------------------------------------------ */
/* Field readers                                                            */

static const json_t *field(const json_t *msg, const char *name)
{
    if (!name || !json_is_object(msg))
        return NULL;
    return json_object_get(msg, name);
}

const char *gs_msg_str(const json_t *msg, const char *name, const char *dflt)
{
    const json_t *v = field(msg, name);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

long long gs_msg_int(const json_t *msg, const char *name, long long dflt)
{
    const json_t *v = field(msg, name);
    return json_is_integer(v) ? (long long)json_integer_value(v) : dflt;
}

double gs_msg_num(const json_t *msg, const char *name, double dflt)
{
    const json_t *v = field(msg, name);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

int gs_msg_bool(const json_t *msg, const char *name, int dflt)
{
    const json_t *v = field(msg, name);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}
