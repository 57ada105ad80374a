/*
 * text_safe.c - see text_safe.h.
 */
#include "text_safe.h"

#include <string.h>

/* The length of the valid UTF-8 character at s (1 to 4), or 0 when the
 * bytes there are not one (overlong forms, surrogates and values past
 * U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned min, cp;
    if ((c & 0xe0) == 0xc0) {
        n = 2, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0; /* (also stops at the terminating NUL) */
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* 1 for a character to replace: C0, DEL, C1. */
static int is_control(const unsigned char *s, size_t n)
{
    if (n == 1)
        return s[0] < 0x20 || s[0] == 0x7f;
    return n == 2 && s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f;
}

size_t gs_text_safe(char *dst, size_t size, const char *src)
{
    size_t replaced = 0, out = 0;
    const unsigned char *s = (const unsigned char *)(src ? src : "");
    while (*s) {
        size_t n = utf8_len(s);
        int bad = n == 0 || is_control(s, n);
        size_t emit = bad ? 1 : n;
        if (size == 0 || out + emit >= size)
            break; /* cut here: never inside a character */
        if (bad)
            dst[out++] = '?';
        else
            memcpy(dst + out, s, n), out += n;
        replaced += (size_t)bad;
        s += n ? n : 1; /* an invalid byte is replaced alone */
    }
    if (size > 0)
        dst[out] = '\0';
    return replaced;
}

int gs_text_is_safe(const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        size_t n = utf8_len(p);
        if (n == 0 || is_control(p, n))
            return 0;
        p += n;
    }
    return 1;
}
