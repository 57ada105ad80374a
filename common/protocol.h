/*
 * protocol.h - the gpushare wire protocol: build, parse and validate messages.
 *
 * Every message between hook, launcher, CLI and broker is one JSON object in
 * one ZeroMQ frame: {"v": 1, "type": "<type>", ...fields}.  doc/protocol.md
 * is the specification; this module is its only implementation, shared by
 * every program, so that a field cannot mean one thing to the hook and
 * another to the broker.
 *
 * Parsing never trusts the peer: size, JSON syntax, version, type and every
 * field's presence and JSON type are checked before anyone reads a field, and
 * a failure comes back as a typed error whose text names the problem.
 * Unknown extra fields are ignored (forward compatibility); unknown types are
 * errors.
 */
#ifndef GS_PROTOCOL_H
#define GS_PROTOCOL_H

#include <jansson.h>
#include <stddef.h>

#define GS_PROTO_VERSION 1
/* No legitimate message comes near this; a status reply with 256 sessions
 * is ~100 KiB.  Larger frames are rejected before JSON parsing. */
#define GS_PROTO_MAX_SIZE (1024 * 1024)

/* Message types.  Keep in the order of doc/protocol.md. */
typedef enum {
    GS_MSG_HELLO = 0,    /* any client -> broker: who I am */
    GS_MSG_WELCOME,      /* broker -> client: reply to hello */
    GS_MSG_REGISTER,     /* launcher/provisioner -> broker: a notebook kernel */
    GS_MSG_REGISTERED,   /* broker -> launcher: reply to register */
    GS_MSG_UNREGISTER,   /* launcher/provisioner -> broker: kernel gone */
    GS_MSG_CELL,         /* launcher -> broker: a cell started / finished */
    GS_MSG_JOIN,         /* hook -> broker: this process uses these GPUs */
    GS_MSG_ACQUIRE,      /* hook -> broker: I want to submit work to a GPU */
    GS_MSG_GRANT,        /* broker -> hook: you may submit work */
    GS_MSG_REVOKE,       /* broker -> hook: stop submitting, drain, ack */
    GS_MSG_RELEASE,      /* hook -> broker: grant given back (ack or idle) */
    GS_MSG_MEMORY,       /* hook -> broker: memory footprint changed */
    GS_MSG_MAKE_ROOM,    /* hook -> broker: an allocation did not fit */
    GS_MSG_ROOM,         /* broker -> hook: reply to make_room */
    GS_MSG_SWAP_OUT,     /* broker -> hook: copy your GPU memory to this lease */
    GS_MSG_SWAP_IN,      /* broker -> hook: bring it back */
    GS_MSG_SWAP_DROP,    /* broker -> hook: it is on disk: give the lease's chunks back */
    GS_MSG_SWAPPED,      /* hook -> broker: a swap_out, swap_in or swap_drop is done */
    GS_MSG_MOVED,        /* broker -> hook: your process now runs on another GPU */
    GS_MSG_FROZEN,       /* broker -> hook: your process is (no longer) checkpointed */
    GS_MSG_HEARTBEAT,    /* any client -> broker: still alive */
    GS_MSG_STATUS,       /* cli -> broker: give me the status */
    GS_MSG_STATUS_REPLY, /* broker -> cli */
    GS_MSG_SET,          /* cli -> broker: change settings at run time */
    GS_MSG_PARK,         /* any client -> broker: park this session's memory now */
    GS_MSG_OK,           /* broker -> client: generic success reply */
    GS_MSG_ERROR,        /* broker -> client: request refused or malformed */
    GS_MSG_COUNT
} gs_msg_type_t;

/* Why a frame was rejected. */
typedef enum {
    GS_PERR_NONE = 0,
    GS_PERR_TOO_LARGE,     /* frame larger than GS_PROTO_MAX_SIZE */
    GS_PERR_EMPTY,         /* zero-length frame */
    GS_PERR_NOT_JSON,      /* JSON syntax error (text has line/column) */
    GS_PERR_NOT_OBJECT,    /* valid JSON but not an object */
    GS_PERR_NO_VERSION,    /* "v" missing */
    GS_PERR_BAD_VERSION,   /* "v" not an integer or not GS_PROTO_VERSION */
    GS_PERR_NO_TYPE,       /* "type" missing or not a string */
    GS_PERR_UNKNOWN_TYPE,  /* "type" names no known message */
    GS_PERR_MISSING_FIELD, /* a required field is absent */
    GS_PERR_WRONG_TYPE,    /* a field has the wrong JSON type */
    GS_PERR_BAD_VALUE,     /* right type, value out of range / not allowed */
    GS_PERR_COUNT
} gs_perr_code_t;

typedef struct {
    gs_perr_code_t code;
    char text[200]; /* human-readable, names the field / type / limit */
} gs_perr_t;

/* Name of a message type ("hello", ...) or NULL if out of range. */
const char *gs_msg_type_name(gs_msg_type_t type);
/* Type for a name; returns GS_MSG_COUNT when unknown. */
gs_msg_type_t gs_msg_type_from_name(const char *name);
/* Stable machine-readable name of an error code ("not_json", ...); "unknown"
 * when out of range, so the result can always go into an error reply. */
const char *gs_perr_code_name(gs_perr_code_t code);

/* A new message {"v":1,"type":...}; the caller adds fields with jansson and
 * owns the reference.  Returns NULL only on allocation failure. */
json_t *gs_msg_new(gs_msg_type_t type);

/* Check a message object against its type's schema.  Returns the type, or
 * GS_MSG_COUNT with *err filled.  Does not take ownership. */
gs_msg_type_t gs_msg_validate(const json_t *msg, gs_perr_t *err);

/* Schema introspection: the table the validator runs on, for tests and for
 * tools that want to list a message's fields.  Kinds and their rules: */
typedef enum {
    GS_FIELD_STRING = 0,   /* non-empty UTF-8 string of at most max_len bytes */
    GS_FIELD_INT,          /* JSON integer (not a real) >= min */
    GS_FIELD_BOOL,         /* true or false */
    GS_FIELD_OBJECT,       /* any JSON object (its keys are checked elsewhere) */
    GS_FIELD_STRING_ARRAY, /* at most GS_PROTO_MAX_ITEMS strings, each as STRING */
    GS_FIELD_ENUM,         /* a string from the NULL-terminated list values */
    GS_FIELD_KIND_COUNT
} gs_field_kind_t;

#define GS_PROTO_MAX_STRING 4096 /* default max_len of a STRING field, bytes */
#define GS_PROTO_MAX_ITEMS  64   /* max items of a STRING_ARRAY field */
/* Session and kernel ids: at most this many bytes, and only ASCII letters,
 * digits and GS_PROTO_ID_PUNCT.  The broker keys its tables by them, logs
 * them and shows them to other users, so they are checked here, where a
 * message enters, rather than truncated or escaped wherever they are used. */
#define GS_PROTO_MAX_ID   128
#define GS_PROTO_ID_PUNCT "-_.:@"

typedef struct {
    const char *name;
    gs_field_kind_t kind;
    int required;              /* 1: must be present */
    long long min;             /* INT: smallest allowed value */
    size_t max_len;            /* STRING, STRING_ARRAY items: max bytes */
    const char *const *values; /* ENUM: allowed values, NULL-terminated */
    int ident;                 /* STRING: an id (GS_PROTO_MAX_ID, letters, digits, punct.) */
} gs_field_spec_t;

/* Number of fields of a type besides v, type and seq (0 when out of range). */
size_t gs_msg_field_count(gs_msg_type_t type);
/* Field i of a type, in schema order; NULL when type or i is out of range. */
const gs_field_spec_t *gs_msg_field_info(gs_msg_type_t type, size_t i);
/* 1 when s (len bytes) is a valid id: 1 to GS_PROTO_MAX_ID bytes of ASCII
 * letters, digits and GS_PROTO_ID_PUNCT. */
int gs_proto_id_valid(const char *s, size_t len);
/* "string", "int", "bool", "object", "string_array", "enum"; NULL if out of range. */
const char *gs_field_kind_name(gs_field_kind_t kind);

/* The first half of gs_msg_parse: size check, JSON syntax, must be an object.
 * Returns a new reference to the object without checking v, type or fields,
 * so that a receiver can still echo "seq" and "type" in the error reply when
 * gs_msg_validate() then refuses it.  NULL with *err filled on failure. */
json_t *gs_msg_load(const void *data, size_t size, gs_perr_t *err);

/* Parse and validate one frame.  On success returns a new reference and sets
 * *type; on failure returns NULL and fills *err.  Never reads past size,
 * never needs a terminating NUL. */
json_t *gs_msg_parse(const void *data, size_t size, gs_msg_type_t *type, gs_perr_t *err);

/* Validate then serialise compactly.  Returns a malloc'd NUL-terminated
 * string (free()), or NULL with *err filled when msg breaks its schema: the
 * sender finds its own bugs before the peer does. */
char *gs_msg_encode(const json_t *msg, size_t *size, gs_perr_t *err);

/* An error reply {"v":1,"type":"error","code":...,"message":...} with the
 * offending request's type and "seq" echoed when known. */
json_t *gs_msg_error_reply(const json_t *request, const char *code, const char *message);

/* Field readers for validated messages: the schema guarantees required
 * fields exist with the right type; optional ones return the default. */
const char *gs_msg_str(const json_t *msg, const char *field, const char *dflt);
long long gs_msg_int(const json_t *msg, const char *field, long long dflt);
double gs_msg_num(const json_t *msg, const char *field, double dflt);
int gs_msg_bool(const json_t *msg, const char *field, int dflt);

#endif
