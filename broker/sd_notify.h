/*
 * sd_notify.h - systemd's Type=notify readiness protocol, without libsystemd.
 */
#ifndef GS_SD_NOTIFY_H
#define GS_SD_NOTIFY_H

/* Send state (e.g. "READY=1") to $NOTIFY_SOCKET; a no-op outside systemd.
 * Returns 1 when sent, 0 when there is no NOTIFY_SOCKET, -1 on error. */
int gs_sd_notify(const char *state);

#endif
