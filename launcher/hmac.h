/*
 * hmac.h - the signature of a Jupyter message.
 *
 * Jupyter signs a message with HMAC over its header, parent_header,
 * metadata and content frames, in that order, and sends the lowercase hex
 * digest as the frame before them; an empty key means messages are not
 * signed.  The watcher acts only on messages that carry the right
 * signature: anyone on the machine can connect to a tcp IOPub port, but
 * only the holder of the key can make the watcher tell the broker that a
 * cell started or ended.  libsodium does the HMAC and the constant-time
 * comparison.
 */
#ifndef GS_HMAC_H
#define GS_HMAC_H

#include <stddef.h>

typedef enum { GS_HMAC_SHA256 = 0, GS_HMAC_SHA512 } gs_hmac_scheme_t;

/* The scheme named "hmac-sha256" or "hmac-sha512"; -1 for any other name. */
int gs_hmac_scheme_parse(const char *name);

/* 1 when sig (siglen bytes of hex) is the signature of the nframes frames
 * (normally 4) under key, else 0.  With an empty key every message is
 * accepted (Jupyter's "no signing"). */
int gs_hmac_verify(gs_hmac_scheme_t scheme, const unsigned char *key, size_t keylen,
                   const void *const frames[], const size_t sizes[], size_t nframes,
                   const char *sig, size_t siglen);

/* The lowercase hex signature of the frames into hex (at least 129 bytes);
 * for tests and tools.  Returns 0, or -1 for a bad scheme. */
int gs_hmac_sign(gs_hmac_scheme_t scheme, const unsigned char *key, size_t keylen,
                 const void *const frames[], const size_t sizes[], size_t nframes, char *hex,
                 size_t hexlen);

#endif
