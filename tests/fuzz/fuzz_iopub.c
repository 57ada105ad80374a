/*
 * fuzz_iopub.c - libFuzzer target: a multipart IOPub message of a Jupyter
 * kernel, as the launcher's cell watcher classifies it (launcher/iopub.c,
 * launcher/hmac.c).
 *
 * The input's first byte picks how the message is checked; the rest are
 * its frames, separated by '\n' (each frame is a separate allocation of
 * exactly its size, so that reading past one is caught):
 *   bit 0  the scheme: hmac-sha256 (0) or hmac-sha512 (1)
 *   bit 1  no key (1): Jupyter's "messages are not signed"
 *   bit 2  sign (1): the harness replaces the frame after "<IDS|MSG>" with
 *          the right signature of the four frames after it, so that
 *          inputs also reach the code behind the signature check
 * With a fixed key.  A printable digit makes a readable corpus file: "4"
 * is sha256 and signed, "0" sha256 with whatever signature the input has.
 * Checked: a signed status message is never BAD_SIGNATURE; a message that
 * was not signed here counts as a cell event only when its signature
 * frame is the right one; the msg_id returned is the parent's and fits.
 */
#include <ctype.h>
#include <jansson.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmac.h"
#include "iopub.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAMES 16
#define DELIM      "<IDS|MSG>"

static const unsigned char key[] = "8c1d3f5e-0a7b-4c2e-9d6f-1b3a5c7e9f00";

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_iopub: %s\n", what);
    abort();
}

/* As gpushare-launch does before it reads a message. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    if (sodium_init() < 0)
        fail("sodium_init");
    return 0;
}

/* The index of the delimiter frame, or n. */
static size_t delimiter(void *const frames[], const size_t sizes[], size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (sizes[i] == strlen(DELIM) && !memcmp(frames[i], DELIM, sizes[i]))
            return i;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    gs_hmac_scheme_t scheme = (data[0] & 1) ? GS_HMAC_SHA512 : GS_HMAC_SHA256;
    size_t key_len = (data[0] & 2) ? 0 : sizeof key - 1;
    int sign = (data[0] & 4) != 0;
    data++;
    size--;

    void *frames[MAX_FRAMES];
    size_t sizes[MAX_FRAMES], n = 0, start = 0;
    for (size_t i = 0; i <= size && n < MAX_FRAMES; i++) {
        if (i < size && data[i] != '\n')
            continue;
        sizes[n] = i - start;
        frames[n] = malloc(sizes[n] ? sizes[n] : 1);
        if (!frames[n])
            abort();
        memcpy(frames[n], data + start, sizes[n]);
        n++;
        start = i + 1;
    }

    size_t d = delimiter(frames, sizes, n);
    int has_body = d < n && n - d >= 6;
    char want[129] = "";
    if (has_body) {
        const void *body[4] = {frames[d + 2], frames[d + 3], frames[d + 4], frames[d + 5]};
        if (gs_hmac_sign(scheme, key, key_len, body, sizes + d + 2, 4, want, sizeof want) != 0)
            fail("gs_hmac_sign refused a known scheme");
        if (sign) {
            free(frames[d + 1]);
            sizes[d + 1] = strlen(want);
            frames[d + 1] = malloc(sizes[d + 1]);
            if (!frames[d + 1])
                abort();
            memcpy(frames[d + 1], want, sizes[d + 1]);
        }
    }

    gs_iopub_auth_t auth = {scheme, key, key_len};
    char *msg_id = malloc(GS_IOPUB_MSG_ID_MAX);
    if (!msg_id)
        abort();
    gs_iopub_event_t ev = gs_iopub_classify(&auth, (const void *const *)frames, sizes, n, msg_id);
    if (!has_body && ev != GS_IOPUB_MALFORMED)
        fail("a message without its frames was not MALFORMED");
    if (sign && ev == GS_IOPUB_BAD_SIGNATURE)
        fail("a correctly signed message was refused");
    if (ev == GS_IOPUB_CELL_BUSY || ev == GS_IOPUB_CELL_IDLE) {
        if (!memchr(msg_id, '\0', GS_IOPUB_MSG_ID_MAX) || !msg_id[0])
            fail("the msg_id is empty or does not fit");
        json_t *parent = json_loadb(frames[d + 3], sizes[d + 3], 0, NULL);
        const char *id = json_string_value(json_object_get(parent, "msg_id"));
        if (!id || strcmp(id, msg_id) != 0)
            fail("the msg_id is not the parent's");
        json_decref(parent);
        if (key_len && !sign) {
            /* Accepted unsigned by the harness: the input's own signature
             * frame must be the right one, in either case. */
            const char *sig = frames[d + 1];
            int same = sizes[d + 1] == strlen(want);
            for (size_t i = 0; same && i < sizes[d + 1]; i++)
                same = tolower((unsigned char)sig[i]) == want[i];
            if (!same)
                fail("a cell event was accepted with a wrong signature");
        }
    }
    free(msg_id);
    for (size_t i = 0; i < n; i++)
        free(frames[i]);
    return 0;
}
