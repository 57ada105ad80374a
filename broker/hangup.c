/*
 * hangup.c - see hangup.h.
 */
#include "hangup.h"

#include <unistd.h>

static int started_on_tty[3];

void gs_hangup_init(void)
{
    for (int fd = 0; fd < 3; fd++)
        started_on_tty[fd] = isatty(fd);
}

int gs_hangup_terminal_gone(void)
{
    int had = 0;
    for (int fd = 0; fd < 3; fd++) {
        if (!started_on_tty[fd])
            continue;
        had = 1;
        if (isatty(fd))
            return 0; /* still there: someone sent SIGHUP on purpose */
    }
    return had;
}
