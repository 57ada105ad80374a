/*
 * text_safe.h - display text from other users made harmless for a
 * terminal: names, notebook paths and user claims reach `gpushare status`,
 * `gpushare top`, wait lines and logs, and a newline or an escape sequence
 * in them would forge rows or recolour the screen (issue 34, item 7).
 *
 * The broker cleans such text where it arrives, and every program that
 * shows it cleans it again before printing (defence in depth: a broker of
 * an older version, an event log written by one).
 */
#ifndef GS_TEXT_SAFE_H
#define GS_TEXT_SAFE_H

#include <stddef.h>

/* Copies src into dst (size bytes, always terminated when size > 0) with
 * every control character replaced by '?': C0 (0x00-0x1f, tab and newline
 * included), DEL (0x7f), C1 (U+0080-U+009F, whose one-byte forms some
 * terminals obey) and every byte that is not part of valid UTF-8 (so the
 * result is always valid UTF-8, and valid JSON text).  Other characters
 * are kept; a cut falls on a character boundary.  Returns the number of
 * replacements (0: src was clean and whole). */
size_t gs_text_safe(char *dst, size_t size, const char *src);

/* 1 when gs_text_safe would change nothing in s (apart from cutting). */
int gs_text_is_safe(const char *s);

#endif
