/*
 * proc_alive.h - is a process the broker knows of still there, and still
 * the same process (not its pid reused)?  For pids from the socket's
 * credentials, or vouched for by them: the broker's liveness checks and
 * parking (which processes it parks, which still hold host memory).
 */
#ifndef GS_PROC_ALIVE_H
#define GS_PROC_ALIVE_H

/* When pid started (/proc/PID/stat's starttime, clock ticks since boot);
 * 0 when it does not exist, is a zombie, or cannot be read. */
unsigned long long gs_proc_start(long pid);

/* 0 when pid is gone, a zombie, or (start != 0) another process that got
 * the same pid; 1 when it exists or the broker cannot tell (no /proc, no
 * permission), so that doubt never ends anything. */
int gs_proc_alive(long pid, unsigned long long start);

#endif
