/*
 * hangup.h - tell the terminal's hangup from `kill -HUP`.
 *
 * SIGHUP reloads the configuration (systemctl reload sends it).  A broker
 * started in a terminal gets SIGHUP too when that terminal closes, and
 * must stop then, like any program of that terminal, instead of going on
 * without it.  The kernel marks a hung-up terminal's descriptors before
 * it sends the signal (isatty() then fails), so the two are told apart by
 * whether the terminal the broker started on is still there.
 */
#ifndef GS_HANGUP_H
#define GS_HANGUP_H

/* Notes which of stdin, stdout and stderr are terminals; call at start. */
void gs_hangup_init(void);

/* 1 when the broker started on a terminal and none of those descriptors
 * is one any longer: the SIGHUP is its hangup. */
int gs_hangup_terminal_gone(void);

#endif
