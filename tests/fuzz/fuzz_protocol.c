/*
 * fuzz_protocol.c - libFuzzer target: one frame from a peer, read the way
 * the broker, the hook and the launcher read it (common/protocol.c).
 *
 * The input is the frame's bytes, fed to gs_msg_parse.  What the programs
 * do next is checked as well:
 *   - a frame that parses encodes again (gs_msg_encode: our own check of
 *     what we send accepts what the parser accepted), and the encoding
 *     parses back to the same type and the same JSON;
 *   - a frame that does not parse gets the broker's error reply
 *     (broker/broker.c: gs_msg_load, then gs_msg_error_reply with the
 *     error's code and text), which must pass the schema whatever the
 *     frame held, and whose text is printable ASCII;
 *   - every field reader answers for every field of the type.
 * A broken property aborts, which libFuzzer reports as a crash.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const gs_perr_t *err)
{
    fprintf(stderr, "fuzz_protocol: %s (%s: %s)\n", what, gs_perr_code_name(err->code), err->text);
    abort();
}

static void check_text(const gs_perr_t *err)
{
    size_t n = strnlen(err->text, sizeof err->text);
    if (n == sizeof err->text)
        fail("error text is not NUL-terminated", err);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)err->text[i] < 0x20 || (unsigned char)err->text[i] > 0x7e)
            fail("error text is not printable ASCII", err);
}

static void round_trip(const json_t *msg, gs_msg_type_t type)
{
    gs_perr_t err;
    size_t len;
    char *text = gs_msg_encode(msg, &len, &err);
    if (!text) {
        /* Reals may print longer than they were written ("0.1" gives 19
         * digits): only the size limit may refuse what parsed. */
        if (err.code != GS_PERR_TOO_LARGE)
            fail("a parsed message does not encode", &err);
        return;
    }
    gs_msg_type_t again;
    json_t *back = gs_msg_parse(text, len, &again, &err);
    if (!back)
        fail("an encoded message does not parse", &err);
    if (again != type || !json_equal((json_t *)msg, back))
        fail("an encoded message parses to something else", &err);
    json_decref(back);
    free(text);

    for (size_t i = 0; i < gs_msg_field_count(type); i++) {
        const gs_field_spec_t *f = gs_msg_field_info(type, i);
        if (!f || !gs_field_kind_name(f->kind))
            fail("schema introspection", &err);
        (void)gs_msg_str(msg, f->name, NULL);
        (void)gs_msg_int(msg, f->name, 0);
        (void)gs_msg_num(msg, f->name, 0);
        (void)gs_msg_bool(msg, f->name, 0);
        if (f->ident) {
            const char *id = gs_msg_str(msg, f->name, NULL);
            if (id && !gs_proto_id_valid(id, strlen(id)))
                fail("an id field passed the schema but is no valid id", &err);
        }
    }
}

/* What the broker sends back for a frame it refused. */
static void error_reply(const uint8_t *data, size_t size, const gs_perr_t *why)
{
    gs_perr_t err;
    check_text(why);
    json_t *req = gs_msg_load(data, size, &err);
    if (req && gs_msg_validate(req, &err) != GS_MSG_COUNT)
        fail("gs_msg_validate accepts what gs_msg_parse refused", &err);
    json_t *reply = gs_msg_error_reply(req, gs_perr_code_name(why->code), why->text);
    if (!reply)
        fail("no error reply", why);
    size_t len;
    char *text = gs_msg_encode(reply, &len, &err);
    if (!text)
        fail("the error reply breaks the protocol", &err);
    free(text);
    json_decref(reply);
    json_decref(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gs_perr_t err;
    gs_msg_type_t type;
    json_t *msg = gs_msg_parse(data, size, &type, &err);
    if (msg) {
        if (type == GS_MSG_COUNT || err.code != GS_PERR_NONE)
            fail("parsed, yet with an error", &err);
        round_trip(msg, type);
        json_decref(msg);
    } else {
        if (type != GS_MSG_COUNT || err.code == GS_PERR_NONE)
            fail("refused, yet with no error", &err);
        error_reply(data, size, &err);
    }
    return 0;
}
