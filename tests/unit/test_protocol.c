/*
 * test_protocol.c - unit tests of common/protocol.c, the wire protocol.
 *
 * Most tests are driven by the schema table itself (gs_msg_field_info), so a
 * field added to the table is covered by the missing/wrong-type/range tests
 * without touching this file; test_schema_matches_spec pins the table to the
 * specification so that the table cannot drift silently either.
 */
#include "unit_fixture.h"

#include "protocol.h"

#ifndef GS_PROTOCOL_DOC
#define GS_PROTOCOL_DOC "../../doc/protocol.md"
#endif

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

/* Parse a C string (its strlen) as a frame. */
static json_t *parse_str(const char *s, gs_msg_type_t *type, gs_perr_t *err)
{
    return gs_msg_parse(s, strlen(s), type, err);
}

/* Parse a frame copied into a buffer of exactly len bytes, no terminator, so
 * that AddressSanitizer catches any read past the end. */
static json_t *parse_exact(const void *data, size_t len, gs_msg_type_t *type, gs_perr_t *err)
{
    char *buf = malloc(len ? len : 1);
    json_t *m;

    assert_non_null(buf);
    memcpy(buf, data, len);
    m = gs_msg_parse(buf, len, type, err);
    free(buf);
    return m;
}

/* The error text is always a terminated string that fits. */
static void assert_text_sane(const gs_perr_t *err)
{
    assert_non_null(memchr(err->text, '\0', sizeof(err->text)));
    for (const char *p = err->text; *p; p++)
        assert_true(*p >= 0x20 && *p <= 0x7e);
}

/* Expect a parse of s to fail with code, and the text to contain want. */
static void expect_fail(const char *s, gs_perr_code_t code, const char *want)
{
    gs_perr_t err;
    gs_msg_type_t type = GS_MSG_HELLO;
    json_t *m = parse_exact(s, strlen(s), &type, &err);

    if (m || err.code != code || (want && !strstr(err.text, want)))
        print_error("input %s\n  got code %s text \"%s\", want %s containing \"%s\"\n", s,
                    gs_perr_code_name(err.code), err.text, gs_perr_code_name(code),
                    want ? want : "");
    assert_null(m);
    assert_int_equal(type, GS_MSG_COUNT);
    assert_int_equal(err.code, code);
    assert_text_sane(&err);
    if (want)
        assert_non_null(strstr(err.text, want));
}

static gs_msg_type_t expect_ok(const char *s)
{
    gs_perr_t err;
    gs_msg_type_t type = GS_MSG_COUNT;
    json_t *m = parse_exact(s, strlen(s), &type, &err);

    if (!m)
        print_error("input %s\n  refused: %s: %s\n", s, gs_perr_code_name(err.code), err.text);
    assert_non_null(m);
    assert_int_equal(err.code, GS_PERR_NONE);
    assert_true(type < GS_MSG_COUNT);
    json_decref(m);
    return type;
}

/* Validate msg (owned by the caller) and expect code with want in the text. */
static void expect_invalid(const json_t *msg, gs_perr_code_t code, const char *want)
{
    gs_perr_t err;
    gs_msg_type_t t = gs_msg_validate(msg, &err);

    if (t != GS_MSG_COUNT || err.code != code || (want && !strstr(err.text, want))) {
        char *dump = json_dumps(msg, JSON_COMPACT);
        print_error("message %.300s\n  got code %s text \"%s\", want %s containing \"%s\"\n",
                    dump ? dump : "?", gs_perr_code_name(err.code), err.text,
                    gs_perr_code_name(code), want ? want : "");
        free(dump);
    }
    assert_int_equal(t, GS_MSG_COUNT);
    assert_int_equal(err.code, code);
    assert_text_sane(&err);
    if (want)
        assert_non_null(strstr(err.text, want));
}

/* A value that satisfies the field's spec. */
static json_t *valid_value(const gs_field_spec_t *f)
{
    char buf[128];
    const char *const *e;

    switch (f->kind) {
    case GS_FIELD_STRING:
        snprintf(buf, sizeof(buf), "val-%s", f->name);
        return json_string(buf);
    case GS_FIELD_INT:
        return json_integer(f->min + 7);
    case GS_FIELD_BOOL:
        return json_true();
    case GS_FIELD_OBJECT:
        return json_pack("{s:i,s:[s]}", "k", 1, "list", "x");
    case GS_FIELD_STRING_ARRAY:
        return json_pack("[s,s]", "GPU-00000000-1111-2222-3333-444444444444",
                         "GPU-55555555-6666-7777-8888-999999999999");
    case GS_FIELD_ENUM:
        for (e = f->values; e[1]; e++) /* the last allowed value */
            ;
        return json_string(*e);
    default:
        fail_msg("unknown kind %d", (int)f->kind);
    }
    return NULL;
}

/* A message of type t with every field (all=1) or only the required ones. */
static json_t *build_valid(gs_msg_type_t t, int all)
{
    json_t *m = gs_msg_new(t);

    assert_non_null(m);
    for (size_t i = 0; i < gs_msg_field_count(t); i++) {
        const gs_field_spec_t *f = gs_msg_field_info(t, i);
        assert_non_null(f);
        if (f->required || all)
            assert_int_equal(json_object_set_new(m, f->name, valid_value(f)), 0);
    }
    return m;
}

static int kind_accepts(gs_field_kind_t kind, const json_t *v)
{
    switch (kind) {
    case GS_FIELD_STRING:
    case GS_FIELD_ENUM:
        return json_is_string(v);
    case GS_FIELD_INT:
        return json_is_integer(v);
    case GS_FIELD_BOOL:
        return json_is_boolean(v);
    case GS_FIELD_OBJECT:
        return json_is_object(v);
    case GS_FIELD_STRING_ARRAY:
        return json_is_array(v);
    default:
        return 0;
    }
}

/* One value of every JSON type. */
static json_t *sample_of_each_type(void)
{
    return json_pack("[s,i,f,b,b,n,{s:i},[i]]", "text", 3, 2.5, 1, 0, "a", 1, 1);
}

static const char *const all_type_names[GS_MSG_COUNT] = {
    "hello",    "welcome",      "register",  "registered", "unregister", "cell",      "join",
    "acquire",  "grant",        "revoke",    "release",    "memory",     "make_room", "room",
    "swap_out", "swap_in",      "swap_drop", "swapped",    "moved",      "frozen",    "heartbeat",
    "status",   "status_reply", "set",       "park",       "ok",         "error",
};

/* ------------------------------------------------------------------------ */
/* Names and the schema table                                               */

static void test_type_names(void **state)
{
    for (int t = 0; t < GS_MSG_COUNT; t++) {
        assert_string_equal(gs_msg_type_name((gs_msg_type_t)t), all_type_names[t]);
        assert_int_equal(gs_msg_type_from_name(all_type_names[t]), t);
    }
    assert_null(gs_msg_type_name(GS_MSG_COUNT));
    assert_null(gs_msg_type_name((gs_msg_type_t)-1));
    assert_null(gs_msg_type_name((gs_msg_type_t)1000));
    assert_int_equal(gs_msg_type_from_name("nope"), GS_MSG_COUNT);
    assert_int_equal(gs_msg_type_from_name(""), GS_MSG_COUNT);
    assert_int_equal(gs_msg_type_from_name("HELLO"), GS_MSG_COUNT);
    assert_int_equal(gs_msg_type_from_name("hello "), GS_MSG_COUNT);
    assert_int_equal(gs_msg_type_from_name(NULL), GS_MSG_COUNT);
}

static void test_perr_code_names(void **state)
{
    static const char *const want[GS_PERR_COUNT] = {
        "none",        "too_large", "empty",        "not_json",      "not_object", "no_version",
        "bad_version", "no_type",   "unknown_type", "missing_field", "wrong_type", "bad_value",
    };
    for (int c = 0; c < GS_PERR_COUNT; c++)
        assert_string_equal(gs_perr_code_name((gs_perr_code_t)c), want[c]);
    assert_string_equal(gs_perr_code_name(GS_PERR_COUNT), "unknown");
    assert_string_equal(gs_perr_code_name((gs_perr_code_t)-1), "unknown");
}

static void test_kind_names(void **state)
{
    static const char *const want[GS_FIELD_KIND_COUNT] = {"string", "int",          "bool",
                                                          "object", "string_array", "enum"};
    for (int k = 0; k < GS_FIELD_KIND_COUNT; k++)
        assert_string_equal(gs_field_kind_name((gs_field_kind_t)k), want[k]);
    assert_null(gs_field_kind_name(GS_FIELD_KIND_COUNT));
}

/* Render a type's schema as "name:kind[constraint]!|? ..." for comparison. */
static void render_schema(gs_msg_type_t t, char *out, size_t outsz)
{
    size_t o = 0;

    out[0] = '\0';
    for (size_t i = 0; i < gs_msg_field_count(t); i++) {
        const gs_field_spec_t *f = gs_msg_field_info(t, i);
        char c[256] = "";

        if (f->kind == GS_FIELD_INT) {
            snprintf(c, sizeof(c), ">=%lld", f->min);
        } else if (f->kind == GS_FIELD_STRING && f->ident) {
            snprintf(c, sizeof(c), "<=%zu,id", f->max_len);
        } else if ((f->kind == GS_FIELD_STRING || f->kind == GS_FIELD_STRING_ARRAY) &&
                   f->max_len != GS_PROTO_MAX_STRING) {
            snprintf(c, sizeof(c), "<=%zu", f->max_len);
        } else if (f->kind == GS_FIELD_ENUM) {
            size_t co = 0;
            for (const char *const *e = f->values; *e; e++)
                co += (size_t)snprintf(c + co, sizeof(c) - co, "%s%s", e == f->values ? "(" : "|",
                                       *e);
            snprintf(c + co, sizeof(c) - co, ")");
        }
        o += (size_t)snprintf(out + o, outsz - o, "%s%s:%s%s%s", i ? " " : "", f->name,
                              gs_field_kind_name(f->kind), c, f->required ? "!" : "?");
        assert_true(o < outsz);
    }
}

/* The table, written out from the specification (! required, ? optional). */
static void test_schema_matches_spec(void **state)
{
    static const char *const want[GS_MSG_COUNT] = {
        [GS_MSG_HELLO] =
            "role:enum(hook|launcher|cli|provisioner)! pid:int>=1! session:string<=128,id? "
            "client_version:string? gpus:int>=1? visible:string? place:bool?",
        [GS_MSG_WELCOME] = "client_id:string! broker_version:string! "
                           "policy:enum(exclusive|burst|adaptive)! scheduler:enum(on|off)! "
                           "heartbeat_ms:int>=1! simulated:bool! devices:string_array?",
        [GS_MSG_REGISTER] = "kernel_id:string<=128,id! user:string! notebook:string? pid:int>=1!",
        [GS_MSG_REGISTERED] = "session:string<=128,id!",
        [GS_MSG_UNREGISTER] = "session:string<=128,id!",
        [GS_MSG_CELL] = "session:string<=128,id! state:enum(busy|idle)! msg_id:string!",
        [GS_MSG_JOIN] = "pid:int>=1! session:string<=128,id? devices:string_array! "
                        "memory_mode:enum(device|managed)? swap:bool? "
                        "swap_segment_bytes:int>=1048576? gang:bool?",
        [GS_MSG_ACQUIRE] = "device:string! burst_p90_us:int>=0? burst_last_us:int>=0?",
        [GS_MSG_GRANT] = "device:string! grant_id:int>=1! quantum_us:int>=0! epoch:int>=1? "
                         "idle_release_us:int>=0?",
        [GS_MSG_REVOKE] = "device:string! grant_id:int>=1! "
                          "reason:enum(quantum|cell_idle|preempt|park|policy|shutdown)!",
        [GS_MSG_RELEASE] = "device:string! grant_id:int>=1! reason:enum(revoked|idle|exit)! "
                           "used_us:int>=0? overuse_us:int>=0?",
        [GS_MSG_MEMORY] = "device:string! used_bytes:int>=0! managed_bytes:int>=0? "
                          "peak_bytes:int>=0? movable_bytes:int>=0? swapped_bytes:int>=0?",
        [GS_MSG_MAKE_ROOM] = "device:string! bytes:int>=1! timeout_ms:int>=0?",
        [GS_MSG_ROOM] = "device:string! ok:bool! free_bytes:int>=0? reason:string? waiting:bool?",
        [GS_MSG_SWAP_OUT] = "device:string! lease:int>=1! chunks:int>=1! chunk_bytes:int>=1! "
                            "wait_ms:int>=1? bytes:int>=0?",
        [GS_MSG_SWAP_IN] = "device:string! lease:int>=0! wait_ms:int>=1?",
        [GS_MSG_SWAP_DROP] = "device:string! lease:int>=0!",
        [GS_MSG_SWAPPED] = "device:string! lease:int>=0! direction:enum(out|in|drop)! ok:bool! "
                           "bytes:int>=0! elapsed_us:int>=0! resident_bytes:int>=0! "
                           "movable_bytes:int>=0? swapped_bytes:int>=0? error:string?",
        [GS_MSG_MOVED] = "device:string! to:string!",
        [GS_MSG_FROZEN] = "device:string! frozen:bool!",
        [GS_MSG_HEARTBEAT] = "epoch:int>=1?",
        [GS_MSG_STATUS] = "",
        [GS_MSG_STATUS_REPLY] = "status:object!",
        [GS_MSG_SET] = "settings:object! persist:bool?",
        [GS_MSG_PARK] = "session:string<=128,id!",
        [GS_MSG_OK] = "info:string? session:string<=128,id? epoch:int>=1? holder:string? "
                      "left_ms:int>=0?",
        [GS_MSG_ERROR] = "code:string! message:string! request_type:string?",
    };
    char got[1024];

    for (int t = 0; t < GS_MSG_COUNT; t++) {
        assert_non_null(want[t]);
        render_schema((gs_msg_type_t)t, got, sizeof(got));
        if (strcmp(got, want[t]) != 0)
            print_error("type %s\n  table: %s\n  spec:  %s\n", all_type_names[t], got, want[t]);
        assert_string_equal(got, want[t]);
        /* no field may shadow the envelope */
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const char *n = gs_msg_field_info((gs_msg_type_t)t, i)->name;
            assert_string_not_equal(n, "v");
            assert_string_not_equal(n, "type");
            assert_string_not_equal(n, "seq");
        }
        assert_null(gs_msg_field_info((gs_msg_type_t)t, gs_msg_field_count((gs_msg_type_t)t)));
    }
    assert_int_equal(gs_msg_field_count(GS_MSG_COUNT), 0);
    assert_null(gs_msg_field_info(GS_MSG_COUNT, 0));
}

static void test_msg_new(void **state)
{
    for (int t = 0; t < GS_MSG_COUNT; t++) {
        json_t *m = gs_msg_new((gs_msg_type_t)t);
        assert_non_null(m);
        assert_int_equal(json_object_size(m), 2);
        assert_int_equal(json_integer_value(json_object_get(m, "v")), GS_PROTO_VERSION);
        assert_string_equal(json_string_value(json_object_get(m, "type")), all_type_names[t]);
        json_decref(m);
    }
    assert_null(gs_msg_new(GS_MSG_COUNT));
    assert_null(gs_msg_new((gs_msg_type_t)-1));
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                              */

static void roundtrip(gs_msg_type_t t, int all, long long seq)
{
    json_t *m = build_valid(t, all), *back;
    gs_perr_t err;
    gs_msg_type_t type;
    size_t size = 0;
    char *wire;

    if (seq >= 0)
        json_object_set_new(m, "seq", json_integer(seq));
    wire = gs_msg_encode(m, &size, &err);
    if (!wire)
        print_error("encode %s: %s\n", all_type_names[t], err.text);
    assert_non_null(wire);
    assert_int_equal(err.code, GS_PERR_NONE);
    assert_int_equal(size, strlen(wire));
    assert_null(strchr(wire, '\n'));
    assert_null(strstr(wire, "\": ")); /* compact */

    back = parse_exact(wire, size, &type, &err);
    assert_non_null(back);
    assert_int_equal(type, t);
    assert_int_equal(err.code, GS_PERR_NONE);
    assert_int_equal(json_object_size(back), json_object_size(m));
    assert_true(json_equal(back, m));
    for (size_t i = 0; i < gs_msg_field_count(t); i++) {
        const gs_field_spec_t *f = gs_msg_field_info(t, i);
        json_t *a = json_object_get(m, f->name), *b = json_object_get(back, f->name);
        if (!a) {
            assert_null(b);
            continue;
        }
        assert_non_null(b);
        assert_true(json_equal(a, b));
    }
    assert_int_equal(gs_msg_int(back, "seq", -1), seq);
    free(wire);
    json_decref(back);
    json_decref(m);
}

static void test_roundtrip_every_type(void **state)
{
    for (int t = 0; t < GS_MSG_COUNT; t++) {
        roundtrip((gs_msg_type_t)t, 1, -1);
        roundtrip((gs_msg_type_t)t, 0, -1);
        roundtrip((gs_msg_type_t)t, 1, 0);
        roundtrip((gs_msg_type_t)t, 0, 9007199254740993LL);
    }
}

/* Built by hand, read back with the field readers. */
static void test_roundtrip_readers(void **state)
{
    json_t *m = gs_msg_new(GS_MSG_RELEASE), *back;
    gs_perr_t err;
    gs_msg_type_t type;
    size_t size;
    char *wire;

    json_object_set_new(m, "device", json_string("GPU-\xc3\xa9t\xc3\xa9"));
    json_object_set_new(m, "grant_id", json_integer(9223372036854775807LL));
    json_object_set_new(m, "reason", json_string("revoked"));
    json_object_set_new(m, "used_us", json_integer(0));
    json_object_set_new(m, "overuse_us", json_integer(1234567));
    json_object_set_new(m, "seq", json_integer(42));
    wire = gs_msg_encode(m, &size, &err);
    assert_non_null(wire);
    back = gs_msg_parse(wire, size, &type, &err);
    assert_non_null(back);
    assert_int_equal(type, GS_MSG_RELEASE);
    assert_string_equal(gs_msg_str(back, "device", NULL), "GPU-\xc3\xa9t\xc3\xa9");
    assert_true(gs_msg_int(back, "grant_id", 0) == 9223372036854775807LL);
    assert_string_equal(gs_msg_str(back, "reason", NULL), "revoked");
    assert_int_equal(gs_msg_int(back, "used_us", -1), 0);
    assert_int_equal(gs_msg_int(back, "overuse_us", -1), 1234567);
    assert_int_equal(gs_msg_int(back, "seq", -1), 42);
    free(wire);
    json_decref(back);
    json_decref(m);

    m = gs_msg_new(GS_MSG_WELCOME);
    json_object_set_new(m, "client_id", json_string("c-17"));
    json_object_set_new(m, "broker_version", json_string("0.1.0"));
    json_object_set_new(m, "policy", json_string("adaptive"));
    json_object_set_new(m, "scheduler", json_string("on"));
    json_object_set_new(m, "heartbeat_ms", json_integer(1000));
    json_object_set_new(m, "simulated", json_false());
    wire = gs_msg_encode(m, NULL, &err);
    assert_non_null(wire);
    back = parse_str(wire, &type, &err);
    assert_non_null(back);
    assert_int_equal(type, GS_MSG_WELCOME);
    assert_int_equal(gs_msg_bool(back, "simulated", -1), 0);
    assert_int_equal(gs_msg_int(back, "heartbeat_ms", 0), 1000);
    assert_true(gs_msg_num(back, "heartbeat_ms", 0) == 1000.0);
    assert_string_equal(gs_msg_str(back, "policy", ""), "adaptive");
    free(wire);
    json_decref(back);
    json_decref(m);
}

/* ------------------------------------------------------------------------ */
/* Schema violations, driven by the table                                   */

static void test_missing_required_fields(void **state)
{
    int checked = 0;

    for (int t = 0; t < GS_MSG_COUNT; t++) {
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const gs_field_spec_t *f = gs_msg_field_info((gs_msg_type_t)t, i);
            json_t *m = build_valid((gs_msg_type_t)t, 1);
            char want[128];

            json_object_del(m, f->name);
            if (f->required) {
                snprintf(want, sizeof(want), "message \"%s\": field \"%s\" is missing",
                         all_type_names[t], f->name);
                expect_invalid(m, GS_PERR_MISSING_FIELD, want);
                checked++;
            } else {
                gs_perr_t err;
                assert_int_equal(gs_msg_validate(m, &err), t);
            }
            json_decref(m);
        }
    }
    assert_int_equal(checked, 58); /* swap_drop: device, lease */
    expect_fail("{\"v\":1,\"type\":\"acquire\"}", GS_PERR_MISSING_FIELD,
                "message \"acquire\": field \"device\" is missing");
}

static void test_wrong_json_types(void **state)
{
    json_t *samples = sample_of_each_type();
    int checked = 0;

    for (int t = 0; t < GS_MSG_COUNT; t++) {
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const gs_field_spec_t *f = gs_msg_field_info((gs_msg_type_t)t, i);
            for (size_t s = 0; s < json_array_size(samples); s++) {
                json_t *v = json_array_get(samples, s);
                json_t *m;
                char want[128];

                if (kind_accepts(f->kind, v))
                    continue;
                m = build_valid((gs_msg_type_t)t, f->required ? 0 : 1);
                json_object_set(m, f->name, v);
                snprintf(want, sizeof(want), "message \"%s\": field \"%s\" must be ",
                         all_type_names[t], f->name);
                expect_invalid(m, GS_PERR_WRONG_TYPE, want);
                json_decref(m);
                checked++;
            }
        }
    }
    assert_true(checked >= 200);
    json_decref(samples);

    expect_fail("{\"v\":1,\"type\":\"grant\",\"device\":\"d\",\"grant_id\":\"7\",\"quantum_us\":0}",
                GS_PERR_WRONG_TYPE,
                "message \"grant\": field \"grant_id\" must be an integer, got string");
    /* a real where an integer is wanted */
    expect_fail("{\"v\":1,\"type\":\"grant\",\"device\":\"d\",\"grant_id\":1.0,\"quantum_us\":0}",
                GS_PERR_WRONG_TYPE, "field \"grant_id\" must be an integer, got real");
    /* null is a value of the wrong type, also for an optional field */
    expect_fail("{\"v\":1,\"type\":\"ok\",\"info\":null}", GS_PERR_WRONG_TYPE,
                "field \"info\" must be a string, got null");
    expect_fail("{\"v\":1,\"type\":\"room\",\"device\":\"d\",\"ok\":1}", GS_PERR_WRONG_TYPE,
                "field \"ok\" must be a boolean, got integer");
    expect_fail("{\"v\":1,\"type\":\"set\",\"settings\":[]}", GS_PERR_WRONG_TYPE,
                "field \"settings\" must be an object, got array");
}

static void test_int_minimums(void **state)
{
    int checked = 0;

    for (int t = 0; t < GS_MSG_COUNT; t++) {
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const gs_field_spec_t *f = gs_msg_field_info((gs_msg_type_t)t, i);
            json_t *m;
            gs_perr_t err;
            char want[160];

            if (f->kind != GS_FIELD_INT)
                continue;
            m = build_valid((gs_msg_type_t)t, 1);
            json_object_set_new(m, f->name, json_integer(f->min));
            assert_int_equal(gs_msg_validate(m, &err), t);
            json_object_set_new(m, f->name, json_integer(f->min - 1));
            snprintf(want, sizeof(want), "message \"%s\": field \"%s\" must be >= %lld, got %lld",
                     all_type_names[t], f->name, f->min, f->min - 1);
            expect_invalid(m, GS_PERR_BAD_VALUE, want);
            json_object_set_new(m, f->name, json_integer(INT64_MIN));
            expect_invalid(m, GS_PERR_BAD_VALUE, "must be >=");
            json_object_set_new(m, f->name, json_integer(INT64_MAX));
            assert_int_equal(gs_msg_validate(m, &err), t);
            json_decref(m);
            checked++;
        }
    }
    assert_int_equal(checked, 41);
    expect_fail("{\"v\":1,\"type\":\"make_room\",\"device\":\"d\",\"bytes\":0}", GS_PERR_BAD_VALUE,
                "field \"bytes\" must be >= 1, got 0");
    expect_fail("{\"v\":1,\"type\":\"hello\",\"role\":\"hook\",\"pid\":-5}", GS_PERR_BAD_VALUE,
                "field \"pid\" must be >= 1, got -5");
}

static void test_enum_values(void **state)
{
    int checked = 0;

    for (int t = 0; t < GS_MSG_COUNT; t++) {
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const gs_field_spec_t *f = gs_msg_field_info((gs_msg_type_t)t, i);
            json_t *m;
            gs_perr_t err;

            if (f->kind != GS_FIELD_ENUM)
                continue;
            m = build_valid((gs_msg_type_t)t, 1);
            for (const char *const *e = f->values; *e; e++) {
                char upper[64];
                size_t n = strlen(*e);

                json_object_set_new(m, f->name, json_string(*e));
                assert_int_equal(gs_msg_validate(m, &err), t);
                /* case matters, prefixes do not match */
                for (size_t k = 0; k <= n; k++)
                    upper[k] = (char)((*e)[k] >= 'a' && (*e)[k] <= 'z' ? (*e)[k] - 32 : (*e)[k]);
                json_object_set_new(m, f->name, json_string(upper));
                expect_invalid(m, GS_PERR_BAD_VALUE, "must be one of ");
                json_object_set_new(m, f->name, json_stringn(*e, n - 1));
                expect_invalid(m, GS_PERR_BAD_VALUE, "must be one of ");
            }
            json_object_set_new(m, f->name, json_string("running"));
            expect_invalid(m, GS_PERR_BAD_VALUE, "got \"running\"");
            /* every allowed value is named */
            for (const char *const *e = f->values; *e; e++)
                expect_invalid(m, GS_PERR_BAD_VALUE, *e);
            json_object_set_new(m, f->name, json_string(""));
            expect_invalid(m, GS_PERR_BAD_VALUE, "got \"\"");
            json_decref(m);
            checked++;
        }
    }
    assert_int_equal(checked, 8);
    expect_fail(
        "{\"v\":1,\"type\":\"cell\",\"session\":\"s\",\"state\":\"running\",\"msg_id\":\"m\"}",
        GS_PERR_BAD_VALUE,
        "message \"cell\": field \"state\" must be one of busy, idle, got \"running\"");
    expect_fail("{\"v\":1,\"type\":\"revoke\",\"device\":\"d\",\"grant_id\":1,\"reason\":\"x\"}",
                GS_PERR_BAD_VALUE,
                "must be one of quantum, cell_idle, preempt, park, policy, shutdown, got \"x\"");
    /* hostile bytes in the value are escaped in the text */
    expect_fail("{\"v\":1,\"type\":\"cell\",\"session\":\"s\",\"state\":\"a\\\"\\n\\u00e9\","
                "\"msg_id\":\"m\"}",
                GS_PERR_BAD_VALUE, "got \"a\\\"\\x0a\\xc3\\xa9\"");
}

static void test_string_limits(void **state)
{
    int checked = 0;
    char *big = malloc(GS_PROTO_MAX_STRING + 2);

    assert_non_null(big);
    memset(big, 'x', GS_PROTO_MAX_STRING + 1);
    big[GS_PROTO_MAX_STRING + 1] = '\0';

    for (int t = 0; t < GS_MSG_COUNT; t++) {
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const gs_field_spec_t *f = gs_msg_field_info((gs_msg_type_t)t, i);
            json_t *m;
            gs_perr_t err;
            char want[160];

            if (f->kind != GS_FIELD_STRING)
                continue;
            assert_true(f->max_len > 0 && f->max_len <= GS_PROTO_MAX_STRING);
            m = build_valid((gs_msg_type_t)t, 1);
            json_object_set_new(m, f->name, json_stringn(big, f->max_len));
            assert_int_equal(gs_msg_validate(m, &err), t);
            json_object_set_new(m, f->name, json_stringn(big, f->max_len + 1));
            snprintf(want, sizeof(want),
                     "message \"%s\": field \"%s\" is %zu bytes, longer than the %zu-byte limit",
                     all_type_names[t], f->name, f->max_len + 1, f->max_len);
            expect_invalid(m, GS_PERR_BAD_VALUE, want);
            json_object_set_new(m, f->name, json_string(""));
            snprintf(want, sizeof(want), "message \"%s\": field \"%s\" must not be empty",
                     all_type_names[t], f->name);
            expect_invalid(m, GS_PERR_BAD_VALUE, want);
            /* a NUL can only get in through the C API; still refused */
            json_object_set_new(m, f->name, json_stringn("a\0b", 3));
            expect_invalid(m, GS_PERR_BAD_VALUE, "contains a NUL byte");
            json_decref(m);
            checked++;
        }
    }
    assert_int_equal(checked, 36);

    /* the limit counts bytes, not characters: 2049 two-byte characters */
    {
        json_t *m = gs_msg_new(GS_MSG_OK);
        char *s = malloc(2 * 2049 + 1);
        assert_non_null(s);
        for (int k = 0; k < 2049; k++)
            memcpy(s + 2 * k, "\xc3\xa9", 2);
        s[2 * 2049] = '\0';
        json_object_set_new(m, "info", json_string(s));
        expect_invalid(m, GS_PERR_BAD_VALUE, "is 4098 bytes, longer than the 4096-byte limit");
        free(s);
        json_decref(m);
    }
    /* kernel_id has its own limit of 128 */
    {
        json_t *m = build_valid(GS_MSG_REGISTER, 1);
        json_object_set_new(m, "kernel_id", json_stringn(big, 129));
        expect_invalid(m, GS_PERR_BAD_VALUE,
                       "message \"register\": field \"kernel_id\" is 129 bytes, longer than the "
                       "128-byte limit");
        json_object_set_new(m, "kernel_id", json_stringn(big, 128));
        assert_int_equal(gs_msg_validate(m, NULL), GS_MSG_REGISTER);
        json_decref(m);
    }
    free(big);
}

/* Session and kernel ids: at most 128 bytes of letters, digits and -_.:@,
 * refused as they arrive (a longer id was once looked up in full, stored
 * cut to 128 bytes and so joined another user's session). */
static void test_ids(void **state)
{
    static const char *const good[] = {
        "s-7f3a", "5b1c3e0a-8d2f-4c4e-9a55-0d6c2b9f1e77", "p4242", "a_b.c:d@e", "Z9", NULL};
    static const char *const bad[] = {"a b",  "a/b", "a\"b", "caf\xc3\xa9",
                                      "a\nb", "x;y", "%s",   NULL};
    for (int i = 0; good[i]; i++)
        assert_true(gs_proto_id_valid(good[i], strlen(good[i])));
    for (int i = 0; bad[i]; i++)
        assert_false(gs_proto_id_valid(bad[i], strlen(bad[i])));
    char id[GS_PROTO_MAX_ID + 2];
    memset(id, 'A', sizeof id);
    assert_true(gs_proto_id_valid(id, GS_PROTO_MAX_ID));
    assert_false(gs_proto_id_valid(id, GS_PROTO_MAX_ID + 1));
    assert_false(gs_proto_id_valid(id, 0));
    assert_false(gs_proto_id_valid("a\0b", 3));

    int ids = 0;
    for (int t = 0; t < GS_MSG_COUNT; t++) {
        for (size_t i = 0; i < gs_msg_field_count((gs_msg_type_t)t); i++) {
            const gs_field_spec_t *f = gs_msg_field_info((gs_msg_type_t)t, i);
            if (!f->ident)
                continue;
            assert_int_equal(f->kind, GS_FIELD_STRING);
            assert_int_equal(f->max_len, GS_PROTO_MAX_ID);
            json_t *m = build_valid((gs_msg_type_t)t, 1);
            id[GS_PROTO_MAX_ID] = 'X';
            json_object_set_new(m, f->name, json_stringn(id, GS_PROTO_MAX_ID + 1));
            expect_invalid(m, GS_PERR_BAD_VALUE, "longer than the 128-byte limit");
            json_object_set_new(m, f->name, json_string("../../etc"));
            char want[200];
            snprintf(want, sizeof want,
                     "message \"%s\": field \"%s\" may hold only ASCII letters, digits and "
                     "\"-_.:@\", got \"../../etc\"",
                     all_type_names[t], f->name);
            expect_invalid(m, GS_PERR_BAD_VALUE, want);
            json_object_set_new(m, f->name, json_string("s-1"));
            assert_int_equal(gs_msg_validate(m, NULL), t);
            json_decref(m);
            ids++;
        }
    }
    /* hello, register, registered, unregister, cell, join, park, ok */
    assert_int_equal(ids, 8);
}

static void test_string_arrays(void **state)
{
    json_t *m = build_valid(GS_MSG_JOIN, 1);
    json_t *arr = json_array();
    gs_perr_t err;

    /* may be empty */
    json_object_set(m, "devices", arr);
    assert_int_equal(gs_msg_validate(m, &err), GS_MSG_JOIN);
    for (int k = 0; k < GS_PROTO_MAX_ITEMS; k++)
        json_array_append_new(arr, json_string("GPU-x"));
    assert_int_equal(gs_msg_validate(m, &err), GS_MSG_JOIN);
    json_array_append_new(arr, json_string("GPU-x"));
    expect_invalid(m, GS_PERR_BAD_VALUE,
                   "message \"join\": field \"devices\" has 65 items, more than the 64-item limit");
    json_array_clear(arr);
    json_array_append_new(arr, json_string("GPU-a"));
    json_array_append_new(arr, json_integer(3));
    expect_invalid(m, GS_PERR_WRONG_TYPE,
                   "message \"join\": field \"devices\" item 1 must be a string, got integer");
    json_array_set_new(arr, 1, json_null());
    expect_invalid(m, GS_PERR_WRONG_TYPE, "item 1 must be a string, got null");
    json_array_set_new(arr, 1, json_pack("[s]", "GPU-b"));
    expect_invalid(m, GS_PERR_WRONG_TYPE, "item 1 must be a string, got array");
    json_array_set_new(arr, 1, json_string(""));
    expect_invalid(m, GS_PERR_BAD_VALUE, "field \"devices\" item 1 must not be empty");
    json_decref(arr);
    json_decref(m);

    expect_fail("{\"v\":1,\"type\":\"join\",\"pid\":1,\"devices\":\"GPU-a\"}", GS_PERR_WRONG_TYPE,
                "field \"devices\" must be an array of strings, got string");
    expect_fail("{\"v\":1,\"type\":\"join\",\"pid\":1,\"devices\":[\"GPU-a\",{}]}",
                GS_PERR_WRONG_TYPE, "item 1 must be a string, got object");
}

/* ------------------------------------------------------------------------ */
/* The envelope                                                             */

static void test_version(void **state)
{
    expect_fail("{\"type\":\"heartbeat\"}", GS_PERR_NO_VERSION, "field \"v\"");
    expect_fail("{\"v\":2,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION,
                "protocol version 2 is not supported (this side speaks 1)");
    expect_fail("{\"v\":0,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION, "protocol version 0");
    expect_fail("{\"v\":-1,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION, "protocol version -1");
    expect_fail("{\"v\":9223372036854775807,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION,
                "protocol version 9223372036854775807 is not supported");
    expect_fail("{\"v\":\"1\",\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION,
                "must be an integer, got string");
    expect_fail("{\"v\":1.0,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION,
                "must be an integer, got real");
    expect_fail("{\"v\":null,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION, "got null");
    expect_fail("{\"v\":true,\"type\":\"heartbeat\"}", GS_PERR_BAD_VERSION, "got boolean");
    /* the version is checked before the type */
    expect_fail("{\"v\":2,\"type\":\"frobnicate\"}", GS_PERR_BAD_VERSION, NULL);
    expect_fail("{\"v\":2}", GS_PERR_BAD_VERSION, NULL);
    expect_ok("{\"v\":1,\"type\":\"heartbeat\"}");
    expect_ok("{\"type\":\"heartbeat\",\"v\":1}");
}

static void test_type_field(void **state)
{
    char buf[600];

    expect_fail("{\"v\":1}", GS_PERR_NO_TYPE, "field \"type\" is missing");
    expect_fail("{\"v\":1,\"type\":7}", GS_PERR_NO_TYPE,
                "field \"type\" must be a string, got integer");
    expect_fail("{\"v\":1,\"type\":null}", GS_PERR_NO_TYPE, "got null");
    expect_fail("{\"v\":1,\"type\":[\"hello\"]}", GS_PERR_NO_TYPE, "got array");
    expect_fail("{\"v\":1,\"type\":\"foo\"}", GS_PERR_UNKNOWN_TYPE, "unknown message type \"foo\"");
    expect_fail("{\"v\":1,\"type\":\"\"}", GS_PERR_UNKNOWN_TYPE, "unknown message type \"\"");
    expect_fail("{\"v\":1,\"type\":\"Hello\"}", GS_PERR_UNKNOWN_TYPE, NULL);
    expect_fail("{\"v\":1,\"type\":\"error\\u0001\"}", GS_PERR_UNKNOWN_TYPE,
                "unknown message type \"error\\x01\"");
    /* a long type name is shortened in the text, which still fits */
    strcpy(buf, "{\"v\":1,\"type\":\"");
    memset(buf + strlen(buf), 'A', 500);
    strcpy(buf + 15 + 500, "\"}");
    expect_fail(buf, GS_PERR_UNKNOWN_TYPE, "...\"");
}

static void test_seq(void **state)
{
    json_t *m;
    gs_msg_type_t type;
    gs_perr_t err;

    m = parse_str("{\"v\":1,\"type\":\"status\",\"seq\":0}", &type, &err);
    assert_non_null(m);
    assert_int_equal(gs_msg_int(m, "seq", -1), 0);
    json_decref(m);
    expect_ok("{\"v\":1,\"type\":\"status\",\"seq\":9223372036854775807}");
    expect_fail("{\"v\":1,\"type\":\"status\",\"seq\":-1}", GS_PERR_BAD_VALUE,
                "message \"status\": field \"seq\" must be >= 0, got -1");
    expect_fail("{\"v\":1,\"type\":\"status\",\"seq\":\"3\"}", GS_PERR_WRONG_TYPE,
                "message \"status\": field \"seq\" must be an integer, got string");
    expect_fail("{\"v\":1,\"type\":\"status\",\"seq\":3.5}", GS_PERR_WRONG_TYPE, "got real");
}

static void test_unknown_fields_ignored(void **state)
{
    assert_int_equal(expect_ok("{\"v\":1,\"type\":\"heartbeat\",\"future\":{\"a\":[1,2,{}]},"
                               "\"x\":null,\"y\":-1.5e300,\"z\":\"\"}"),
                     GS_MSG_HEARTBEAT);
    assert_int_equal(expect_ok("{\"v\":1,\"type\":\"make_room\",\"device\":\"d\",\"bytes\":1,"
                               "\"priority\":\"high\",\"Device\":5}"),
                     GS_MSG_MAKE_ROOM);
    /* but the schema of every known field still holds */
    expect_fail("{\"v\":1,\"type\":\"make_room\",\"device\":\"d\",\"bytes\":1,\"extra\":1,"
                "\"seq\":-3}",
                GS_PERR_BAD_VALUE, NULL);
}

/* ------------------------------------------------------------------------ */
/* Frames                                                                   */

static void test_not_json(void **state)
{
    expect_fail("{", GS_PERR_NOT_JSON, "not JSON: ");
    expect_fail("{\"v\":1,\"type\":\"heartbeat\"", GS_PERR_NOT_JSON, " at line 1 column ");
    expect_fail("{\"v\":1,\n\"type\":heartbeat}", GS_PERR_NOT_JSON, "at line 2 column");
    expect_fail("hello", GS_PERR_NOT_JSON, "not JSON: ");
    expect_fail("   ", GS_PERR_NOT_JSON, "not JSON: ");
    expect_fail("{'v':1}", GS_PERR_NOT_JSON, NULL);
    expect_fail("{\"v\":1,\"type\":\"heartbeat\",}", GS_PERR_NOT_JSON, NULL);
    expect_fail("{\"v\":1,\"type\":\"heartbeat\"} {}", GS_PERR_NOT_JSON, NULL);
    expect_fail("{\"v\":1,\"type\":\"heartbeat\",\"v\":1}", GS_PERR_NOT_JSON, "duplicate");
    expect_fail("{\"v\":NaN,\"type\":\"heartbeat\"}", GS_PERR_NOT_JSON, NULL);
    /* numbers out of range are syntax errors in jansson, not crashes */
    expect_fail("{\"v\":1,\"type\":\"hello\",\"role\":\"hook\",\"pid\":99999999999999999999999}",
                GS_PERR_NOT_JSON, NULL);
    expect_fail("{\"v\":1,\"type\":\"hello\",\"role\":\"hook\",\"pid\":1e400}", GS_PERR_NOT_JSON,
                NULL);
    /* surrounding whitespace is fine */
    expect_ok(" \n{\"v\":1,\"type\":\"heartbeat\"}\r\n\t");
}

static void test_not_object(void **state)
{
    expect_fail("[{\"v\":1,\"type\":\"heartbeat\"}]", GS_PERR_NOT_OBJECT,
                "must be a JSON object, got array");
    expect_fail("42", GS_PERR_NOT_OBJECT, "got integer");
    expect_fail("4.5", GS_PERR_NOT_OBJECT, "got real");
    expect_fail("\"hello\"", GS_PERR_NOT_OBJECT, "got string");
    expect_fail("null", GS_PERR_NOT_OBJECT, "got null");
    expect_fail("true", GS_PERR_NOT_OBJECT, "got boolean");
    {
        gs_perr_t err;
        json_t *a = json_array();
        assert_int_equal(gs_msg_validate(a, &err), GS_MSG_COUNT);
        assert_int_equal(err.code, GS_PERR_NOT_OBJECT);
        assert_int_equal(gs_msg_validate(NULL, &err), GS_MSG_COUNT);
        assert_int_equal(err.code, GS_PERR_NOT_OBJECT);
        json_decref(a);
    }
}

static void test_frame_size(void **state)
{
    const size_t max = GS_PROTO_MAX_SIZE;
    const char *msg = "{\"v\":1,\"type\":\"heartbeat\"}";
    char *buf = malloc(max + 1);
    gs_perr_t err;
    gs_msg_type_t type;
    json_t *m;
    char want[100];

    assert_non_null(buf);
    /* a valid message padded to exactly the limit passes */
    memset(buf, ' ', max + 1);
    memcpy(buf, msg, strlen(msg));
    m = gs_msg_parse(buf, max, &type, &err);
    assert_non_null(m);
    assert_int_equal(type, GS_MSG_HEARTBEAT);
    json_decref(m);
    /* one byte more is refused */
    m = gs_msg_parse(buf, max + 1, &type, &err);
    assert_null(m);
    assert_int_equal(err.code, GS_PERR_TOO_LARGE);
    snprintf(want, sizeof(want), "frame of %zu bytes exceeds the %zu-byte limit", max + 1, max);
    assert_string_equal(err.text, want);
    /* ... before parsing: garbage of that size is "too large", not "not JSON" */
    memset(buf, 0xff, max + 1);
    m = gs_msg_parse(buf, max + 1, &type, &err);
    assert_null(m);
    assert_int_equal(err.code, GS_PERR_TOO_LARGE);
    free(buf);
    /* the size alone decides: the buffer is never read */
    m = gs_msg_parse(msg, 2000000, &type, &err);
    assert_null(m);
    assert_int_equal(err.code, GS_PERR_TOO_LARGE);
    assert_string_equal(err.text, "frame of 2000000 bytes exceeds the 1048576-byte limit");
    m = gs_msg_parse(msg, (size_t)-1, &type, &err);
    assert_null(m);
    assert_int_equal(err.code, GS_PERR_TOO_LARGE);
}

static void test_empty_frame(void **state)
{
    gs_perr_t err;
    gs_msg_type_t type = GS_MSG_HELLO;

    assert_null(gs_msg_parse("", 0, &type, &err));
    assert_int_equal(err.code, GS_PERR_EMPTY);
    assert_int_equal(type, GS_MSG_COUNT);
    assert_string_equal(err.text, "empty frame");
    assert_null(gs_msg_parse(NULL, 0, &type, &err));
    assert_int_equal(err.code, GS_PERR_EMPTY);
    assert_null(gs_msg_parse(NULL, 10, &type, &err));
    assert_int_equal(err.code, GS_PERR_EMPTY);
    /* NULL out-parameters are tolerated */
    assert_null(gs_msg_parse("", 0, NULL, NULL));
    assert_null(gs_msg_parse("{", 1, NULL, NULL));
}

static void test_embedded_nul(void **state)
{
    static const char raw_mid[] = "{\"v\":1,\0\"type\":\"heartbeat\"}";
    static const char raw_after[] = "{\"v\":1,\"type\":\"heartbeat\"}\0";
    static const char in_string[] = "{\"v\":1,\"type\":\"ok\",\"info\":\"a\0b\"}";
    gs_perr_t err;
    gs_msg_type_t type;

    assert_null(parse_exact(raw_mid, sizeof(raw_mid) - 1, &type, &err));
    assert_int_equal(err.code, GS_PERR_NOT_JSON);
    assert_text_sane(&err);
    assert_null(parse_exact(raw_after, sizeof(raw_after) - 1, &type, &err));
    assert_int_equal(err.code, GS_PERR_NOT_JSON);
    assert_null(parse_exact(in_string, sizeof(in_string) - 1, &type, &err));
    assert_int_equal(err.code, GS_PERR_NOT_JSON);
    assert_text_sane(&err);
    /* the escaped form too (jansson without JSON_ALLOW_NUL) */
    expect_fail("{\"v\":1,\"type\":\"ok\",\"info\":\"a\\u0000b\"}", GS_PERR_NOT_JSON, "NUL");
    expect_fail("{\"v\":1,\"type\":\"heart\\u0000beat\"}", GS_PERR_NOT_JSON, NULL);
    /* a frame that is not NUL-terminated at all */
    assert_int_equal(expect_ok("{\"v\":1,\"type\":\"heartbeat\"}"), GS_MSG_HEARTBEAT);
}

static void test_invalid_utf8(void **state)
{
    static const char *const bad[] = {
        "{\"v\":1,\"type\":\"ok\",\"info\":\"\xff\"}",
        "{\"v\":1,\"type\":\"ok\",\"info\":\"\xc3\"}",             /* truncated sequence */
        "{\"v\":1,\"type\":\"ok\",\"info\":\"\xc0\x80\"}",         /* overlong NUL */
        "{\"v\":1,\"type\":\"ok\",\"info\":\"\xed\xa0\x80\"}",     /* UTF-16 surrogate */
        "{\"v\":1,\"type\":\"ok\",\"info\":\"\xf4\x90\x80\x80\"}", /* > U+10FFFF */
        "{\"v\":1,\"type\":\"ok\",\"\xfe\":1}",                    /* in a key */
        "{\"v\":1,\"type\":\"ok\",\"info\":\"\\ud800\"}",          /* lone surrogate escape */
        "\xef\xbb\xbf{\"v\":1,\"type\":\"heartbeat\"}",            /* BOM */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_fail(bad[i], GS_PERR_NOT_JSON, "not JSON: ");
    /* valid multi-byte text is fine */
    expect_ok("{\"v\":1,\"type\":\"ok\",\"info\":\"\xe2\x82\xac \\u20ac \xf0\x9f\x98\x80\"}");
}

static void test_deep_nesting(void **state)
{
    const size_t depth = 100000;
    size_t n = 0;
    char *buf = malloc(2 * depth + 64);
    gs_perr_t err;
    gs_msg_type_t type;

    assert_non_null(buf);
    n += (size_t)sprintf(buf, "{\"v\":1,\"type\":\"heartbeat\",\"x\":");
    memset(buf + n, '[', depth);
    n += depth;
    memset(buf + n, ']', depth);
    n += depth;
    buf[n++] = '}';
    assert_null(parse_exact(buf, n, &type, &err));
    assert_int_equal(err.code, GS_PERR_NOT_JSON);
    assert_text_sane(&err);
    free(buf);
    /* moderate nesting in an ignored field is fine */
    expect_ok("{\"v\":1,\"type\":\"heartbeat\",\"x\":[[[[[[[[{\"a\":[[[]]]}]]]]]]]]}");
}

/* ------------------------------------------------------------------------ */
/* Encoding, error replies, readers                                         */

static void test_encode_refuses_invalid(void **state)
{
    gs_perr_t err;
    size_t size = 99;
    json_t *m;

    m = gs_msg_new(GS_MSG_GRANT);
    json_object_set_new(m, "device", json_string("GPU-0"));
    json_object_set_new(m, "grant_id", json_integer(0));
    json_object_set_new(m, "quantum_us", json_integer(1000));
    assert_null(gs_msg_encode(m, &size, &err));
    assert_int_equal(size, 0);
    assert_int_equal(err.code, GS_PERR_BAD_VALUE);
    assert_non_null(strstr(err.text, "grant_id"));
    json_object_del(m, "grant_id");
    assert_null(gs_msg_encode(m, &size, &err));
    assert_int_equal(err.code, GS_PERR_MISSING_FIELD);
    json_object_set_new(m, "grant_id", json_string("1"));
    assert_null(gs_msg_encode(m, &size, &err));
    assert_int_equal(err.code, GS_PERR_WRONG_TYPE);
    json_object_set_new(m, "grant_id", json_integer(1));
    json_object_set_new(m, "v", json_integer(2));
    assert_null(gs_msg_encode(m, &size, &err));
    assert_int_equal(err.code, GS_PERR_BAD_VERSION);
    json_object_set_new(m, "v", json_integer(1));
    json_object_set_new(m, "type", json_string("grnat"));
    assert_null(gs_msg_encode(m, &size, &err));
    assert_int_equal(err.code, GS_PERR_UNKNOWN_TYPE);
    json_object_set_new(m, "type", json_string("grant"));
    {
        char *s = gs_msg_encode(m, &size, &err);
        assert_non_null(s);
        assert_int_equal(size, strlen(s));
        assert_int_equal(err.code, GS_PERR_NONE);
        free(s);
    }
    json_decref(m);
    assert_null(gs_msg_encode(NULL, &size, &err));
    assert_int_equal(err.code, GS_PERR_NOT_OBJECT);
    m = json_array();
    assert_null(gs_msg_encode(m, NULL, NULL));
    json_decref(m);

    /* a message whose encoding exceeds the frame limit is refused too */
    {
        json_t *big = json_object();
        char key[16];
        char *val = malloc(GS_PROTO_MAX_STRING + 1);
        assert_non_null(val);
        memset(val, 'x', GS_PROTO_MAX_STRING);
        val[GS_PROTO_MAX_STRING] = '\0';
        for (int k = 0; k < 300; k++) {
            snprintf(key, sizeof(key), "k%d", k);
            json_object_set_new(big, key, json_string(val));
        }
        m = gs_msg_new(GS_MSG_STATUS_REPLY);
        json_object_set_new(m, "status", big);
        assert_null(gs_msg_encode(m, &size, &err));
        assert_int_equal(err.code, GS_PERR_TOO_LARGE);
        free(val);
        json_decref(m);
    }
}

static void test_error_reply(void **state)
{
    json_t *req, *rep, *back;
    gs_perr_t err;
    gs_msg_type_t type;
    char *wire;

    /* seq and type echoed */
    req = parse_str("{\"v\":1,\"type\":\"status\",\"seq\":77}", &type, &err);
    assert_non_null(req);
    rep = gs_msg_error_reply(req, "permission_denied", "not yours");
    assert_non_null(rep);
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    assert_int_equal(gs_msg_int(rep, "seq", -1), 77);
    assert_string_equal(gs_msg_str(rep, "request_type", ""), "status");
    assert_string_equal(gs_msg_str(rep, "code", ""), "permission_denied");
    assert_string_equal(gs_msg_str(rep, "message", ""), "not yours");
    wire = gs_msg_encode(rep, NULL, &err);
    assert_non_null(wire);
    back = parse_str(wire, &type, &err);
    assert_non_null(back);
    assert_int_equal(type, GS_MSG_ERROR);
    assert_true(json_equal(back, rep));
    free(wire);
    json_decref(back);
    json_decref(rep);
    json_decref(req);

    /* a request that failed validation, loaded with gs_msg_load */
    {
        const char *s = "{\"v\":1,\"type\":\"frob\",\"seq\":5}";
        req = gs_msg_load(s, strlen(s), &err);
        assert_non_null(req);
        assert_int_equal(err.code, GS_PERR_NONE);
        assert_int_equal(gs_msg_validate(req, &err), GS_MSG_COUNT);
        assert_int_equal(err.code, GS_PERR_UNKNOWN_TYPE);
        rep = gs_msg_error_reply(req, gs_perr_code_name(err.code), err.text);
        assert_int_equal(gs_msg_validate(rep, NULL), GS_MSG_ERROR);
        assert_int_equal(gs_msg_int(rep, "seq", -1), 5);
        assert_string_equal(gs_msg_str(rep, "request_type", ""), "frob");
        assert_string_equal(gs_msg_str(rep, "code", ""), "unknown_type");
        assert_string_equal(gs_msg_str(rep, "message", ""), "unknown message type \"frob\"");
        json_decref(rep);
        json_decref(req);
        assert_null(gs_msg_load("[1]", 3, &err));
        assert_int_equal(err.code, GS_PERR_NOT_OBJECT);
    }

    /* no request: nothing echoed */
    rep = gs_msg_error_reply(NULL, "bad_setting", "no such setting \"x\"");
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    assert_null(json_object_get(rep, "seq"));
    assert_null(json_object_get(rep, "request_type"));
    json_decref(rep);

    /* what would break the reply is not echoed */
    req = json_pack("{s:i,s:s,s:i}", "v", 1, "type", "", "seq", -4);
    rep = gs_msg_error_reply(req, "bad_value", "x");
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    assert_null(json_object_get(rep, "seq"));
    assert_null(json_object_get(rep, "request_type"));
    json_decref(rep);
    json_decref(req);
    req = json_pack("{s:f,s:i}", "seq", 3.0, "type", 4);
    rep = gs_msg_error_reply(req, "bad_value", "x");
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    assert_null(json_object_get(rep, "seq"));
    assert_null(json_object_get(rep, "request_type"));
    json_decref(rep);
    json_decref(req);
    req = json_integer(1); /* not even an object */
    rep = gs_msg_error_reply(req, "c", "m");
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    assert_int_equal(json_object_size(rep), 4);
    json_decref(rep);
    json_decref(req);

    /* NULL / empty / oversized / non-UTF-8 code and message still give a valid reply */
    rep = gs_msg_error_reply(NULL, NULL, NULL);
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    json_decref(rep);
    rep = gs_msg_error_reply(NULL, "", "");
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    json_decref(rep);
    rep = gs_msg_error_reply(NULL, "x\xff", "bad \xc3 utf8");
    assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
    assert_string_equal(gs_msg_str(rep, "message", ""), "bad ? utf8");
    json_decref(rep);
    {
        char *longmsg = malloc(3 * 2000 + 1);
        assert_non_null(longmsg);
        for (int k = 0; k < 2000; k++)
            memcpy(longmsg + 3 * k, "\xe2\x82\xac", 3);
        longmsg[3 * 2000] = '\0';
        rep = gs_msg_error_reply(NULL, "internal", longmsg);
        assert_int_equal(gs_msg_validate(rep, &err), GS_MSG_ERROR);
        assert_int_equal(strlen(gs_msg_str(rep, "message", "")), 4095); /* 1365 whole euros */
        json_decref(rep);
        free(longmsg);
    }
}

static void test_field_readers(void **state)
{
    json_t *m = json_pack("{s:s,s:i,s:f,s:b,s:n,s:{},s:[]}", "s", "str", "i", 12, "r", 2.5, "b", 1,
                          "n", "o", "a");
    json_t *arr = json_array();

    assert_string_equal(gs_msg_str(m, "s", NULL), "str");
    assert_null(gs_msg_str(m, "i", NULL));
    assert_string_equal(gs_msg_str(m, "absent", "d"), "d");
    assert_string_equal(gs_msg_str(m, "n", "d"), "d");
    assert_int_equal(gs_msg_int(m, "i", -1), 12);
    assert_int_equal(gs_msg_int(m, "r", -1), -1); /* a real is not an integer */
    assert_int_equal(gs_msg_int(m, "s", -1), -1);
    assert_int_equal(gs_msg_int(m, "b", -1), -1);
    assert_int_equal(gs_msg_int(m, "absent", -7), -7);
    assert_true(gs_msg_num(m, "r", 0) == 2.5);
    assert_true(gs_msg_num(m, "i", 0) == 12.0);
    assert_true(gs_msg_num(m, "s", -1) == -1.0);
    assert_true(gs_msg_num(m, "absent", 0.5) == 0.5);
    assert_int_equal(gs_msg_bool(m, "b", 0), 1);
    assert_int_equal(gs_msg_bool(m, "i", -1), -1);
    assert_int_equal(gs_msg_bool(m, "n", -1), -1);
    assert_int_equal(gs_msg_bool(m, "absent", 0), 0);
    json_object_set_new(m, "f", json_false());
    assert_int_equal(gs_msg_bool(m, "f", 1), 0);
    /* on anything that is not an object, or a NULL name */
    assert_string_equal(gs_msg_str(NULL, "s", "d"), "d");
    assert_string_equal(gs_msg_str(arr, "s", "d"), "d");
    assert_string_equal(gs_msg_str(m, NULL, "d"), "d");
    assert_int_equal(gs_msg_int(NULL, "i", 3), 3);
    assert_int_equal(gs_msg_int(arr, "i", 3), 3);
    assert_true(gs_msg_num(NULL, "r", 1.5) == 1.5);
    assert_int_equal(gs_msg_bool(NULL, "b", 2), 2);
    assert_int_equal(gs_msg_bool(arr, NULL, 2), 2);
    json_decref(arr);
    json_decref(m);
}

/* ------------------------------------------------------------------------ */
/* The specification's examples, and hostile input                          */

/* Every line inside a ```json block of doc/protocol.md is one valid message,
 * and every message type has at least one example. */
static void test_doc_examples(void **state)
{
    FILE *f = fopen(GS_PROTOCOL_DOC, "r");
    char line[4096];
    int in_json = 0, lines = 0, seen[GS_MSG_COUNT] = {0};

    if (!f)
        fail_msg("cannot open %s", GS_PROTOCOL_DOC);
    while (fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        gs_perr_t err;
        gs_msg_type_t type;
        json_t *m;

        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (strncmp(line, "```", 3) == 0) {
            in_json = !in_json && strcmp(line, "```json") == 0;
            continue;
        }
        if (!in_json || n == 0)
            continue;
        m = gs_msg_parse(line, n, &type, &err);
        if (!m)
            print_error("%s: example refused: %s\n  %s\n", GS_PROTOCOL_DOC, err.text, line);
        assert_non_null(m);
        seen[type] = 1;
        lines++;
        json_decref(m);
    }
    fclose(f);
    assert_false(in_json);
    for (int t = 0; t < GS_MSG_COUNT; t++) {
        if (!seen[t])
            print_error("%s has no example of \"%s\"\n", GS_PROTOCOL_DOC, all_type_names[t]);
        assert_true(seen[t]);
    }
    assert_true(lines >= GS_MSG_COUNT);
}

/* Mutate valid frames byte by byte and feed random bytes: every answer is
 * either a valid message or a clean error (run under ASan in CI). */
static void test_mutation_fuzz(void **state)
{
    unsigned long long rng = 0x9e3779b97f4a7c15ULL;
    char buf[2048];
    int accepted = 0, refused = 0;

    for (int iter = 0; iter < 20000; iter++) {
        gs_msg_type_t t = (gs_msg_type_t)(iter % GS_MSG_COUNT);
        json_t *m = build_valid(t, iter & 1);
        char *wire = gs_msg_encode(m, NULL, NULL);
        size_t n;
        gs_perr_t err;
        gs_msg_type_t type;
        json_t *back;

        assert_non_null(wire);
        n = strlen(wire);
        assert_true(n < sizeof(buf));
        memcpy(buf, wire, n);
        for (int k = 0; k < 1 + iter % 4 && n > 0; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if (iter % 10 == 9)
                buf[rng % n] = (char)(rng >> 32); /* random byte */
            else if (iter % 10 == 8 && n > 1)
                n = (size_t)(rng % n); /* truncate */
            else
                buf[rng % n] = "{}[]\",:0-1.e\\ntfu\x80"[(rng >> 24) % 19];
        }
        back = parse_exact(buf, n, &type, &err);
        assert_text_sane(&err);
        if (back) {
            assert_true(type < GS_MSG_COUNT);
            assert_int_equal(err.code, GS_PERR_NONE);
            assert_int_equal(gs_msg_validate(back, NULL), type);
            accepted++;
        } else {
            assert_int_equal(type, GS_MSG_COUNT);
            assert_true(err.code > GS_PERR_NONE && err.code < GS_PERR_COUNT);
            refused++;
        }
        json_decref(back);
        free(wire);
        json_decref(m);
    }
    assert_true(accepted > 0 && refused > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_names),
        cmocka_unit_test(test_perr_code_names),
        cmocka_unit_test(test_kind_names),
        cmocka_unit_test(test_schema_matches_spec),
        cmocka_unit_test(test_msg_new),
        cmocka_unit_test(test_roundtrip_every_type),
        cmocka_unit_test(test_roundtrip_readers),
        cmocka_unit_test(test_missing_required_fields),
        cmocka_unit_test(test_wrong_json_types),
        cmocka_unit_test(test_int_minimums),
        cmocka_unit_test(test_enum_values),
        cmocka_unit_test(test_string_limits),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_string_arrays),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_type_field),
        cmocka_unit_test(test_seq),
        cmocka_unit_test(test_unknown_fields_ignored),
        cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_not_object),
        cmocka_unit_test(test_frame_size),
        cmocka_unit_test(test_empty_frame),
        cmocka_unit_test(test_embedded_nul),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_encode_refuses_invalid),
        cmocka_unit_test(test_error_reply),
        cmocka_unit_test(test_field_readers),
        cmocka_unit_test(test_doc_examples),
        cmocka_unit_test(test_mutation_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
