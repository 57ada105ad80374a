/*
 * socket_dir.h - prepare the directory and path of the broker's ipc socket.
 *
 * The directory's permissions are the broker's first line of defence: a
 * per-user broker's directory is 0700, the system service's is 0755 (0750
 * with a socket group, so only that group's members can reach the socket
 * at all).  No one but its owner may write to it (socket_trust.h): whoever
 * can could put their own socket in its place.
 */
#ifndef GS_SOCKET_DIR_H
#define GS_SOCKET_DIR_H

#include <stddef.h>
#include <sys/types.h>

/* Create the socket's parent directory if missing (mode as above; gid -1
 * keeps the group); refuse a directory, or a path to it, that someone else
 * could write to (gs_trust_path; the default per-user directory must be
 * this user's own, 0700), refuse when a live broker already answers on the
 * path, and remove a stale socket file left by a broker of this user that
 * died (never another user's).  Returns 0 or -1 with a message naming the
 * path in err. */
int gs_socket_dir_prepare(const char *path, int system, gid_t group, char *err, size_t errlen);

/* The mode of a socket the broker's clients connect to (connecting needs
 * write permission on it, which the umask, systemd's 0022, would deny to
 * all but the owner): a per-user broker's is its user's (0600); the system
 * service's is its socket group's (0660) with one, everyone's (0666)
 * without.  The same for every socket the broker serves (broker.sock,
 * pool.sock): whoever may ask for a session may fetch its host memory. */
mode_t gs_socket_mode(int system, gid_t group);

#endif
