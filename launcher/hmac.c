/*
 * hmac.c - Jupyter message signatures with libsodium (see hmac.h).
 */
#include "hmac.h"

#include <sodium.h>
#include <string.h>

int gs_hmac_scheme_parse(const char *name)
{
    if (name && strcmp(name, "hmac-sha256") == 0)
        return GS_HMAC_SHA256;
    if (name && strcmp(name, "hmac-sha512") == 0)
        return GS_HMAC_SHA512;
    return -1;
}

/* The raw digest into out (64 bytes room); returns its length. */
static size_t digest(gs_hmac_scheme_t scheme, const unsigned char *key, size_t keylen,
                     const void *const frames[], const size_t sizes[], size_t nframes,
                     unsigned char out[64])
{
    if (scheme == GS_HMAC_SHA512) {
        crypto_auth_hmacsha512_state st;
        crypto_auth_hmacsha512_init(&st, key, keylen);
        for (size_t i = 0; i < nframes; i++)
            crypto_auth_hmacsha512_update(&st, frames[i], sizes[i]);
        crypto_auth_hmacsha512_final(&st, out);
        sodium_memzero(&st, sizeof st);
        return crypto_auth_hmacsha512_BYTES;
    }
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, keylen);
    for (size_t i = 0; i < nframes; i++)
        crypto_auth_hmacsha256_update(&st, frames[i], sizes[i]);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof st);
    return crypto_auth_hmacsha256_BYTES;
}

int gs_hmac_verify(gs_hmac_scheme_t scheme, const unsigned char *key, size_t keylen,
                   const void *const frames[], const size_t sizes[], size_t nframes,
                   const char *sig, size_t siglen)
{
    if (keylen == 0)
        return 1;
    if (scheme != GS_HMAC_SHA256 && scheme != GS_HMAC_SHA512)
        return 0;
    unsigned char want[64], got[64];
    size_t n = digest(scheme, key, keylen, frames, sizes, nframes, want);
    size_t len = 0;
    /* Exactly 2n lowercase or uppercase hex digits, nothing else. */
    if (siglen != 2 * n || sodium_hex2bin(got, sizeof got, sig, siglen, NULL, &len, NULL) != 0 ||
        len != n)
        return 0;
    return sodium_memcmp(want, got, n) == 0;
}

int gs_hmac_sign(gs_hmac_scheme_t scheme, const unsigned char *key, size_t keylen,
                 const void *const frames[], const size_t sizes[], size_t nframes, char *hex,
                 size_t hexlen)
{
    if (scheme != GS_HMAC_SHA256 && scheme != GS_HMAC_SHA512)
        return -1;
    unsigned char d[64];
    size_t n = digest(scheme, key, keylen, frames, sizes, nframes, d);
    if (hexlen < 2 * n + 1)
        return -1;
    sodium_bin2hex(hex, hexlen, d, n);
    return 0;
}
