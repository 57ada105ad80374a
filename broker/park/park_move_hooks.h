/*
 * park_move_hooks.h - the broker's say in moving a parked session to
 * another GPU (park_move.c), a type of the public interface (park.h) that
 * parking's state (park_state.h) holds too: so it stands alone.
 */
#ifndef GS_PARK_MOVE_HOOKS_H
#define GS_PARK_MOVE_HOOKS_H

/* allowed(arg, session, gpu): may the session run there (placed by the
 * broker, and its user allowed the GPU); moved(arg, session, from, to):
 * it runs there now.  Without hooks nothing is moved. */
typedef struct {
    int (*allowed)(void *arg, const char *session, int gpu);
    void (*moved)(void *arg, const char *session, int from, int to);
    void *arg;
} gs_park_move_hooks_t;

#endif
