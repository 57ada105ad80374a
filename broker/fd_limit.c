/*
 * fd_limit.c - see fd_limit.h.
 */
#include "fd_limit.h"

#include <limits.h>
#include <sys/resource.h>

#include "log.h"

long gs_fd_limit_raise(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < GS_FD_LIMIT_WANTED) {
        struct rlimit more = {GS_FD_LIMIT_WANTED, GS_FD_LIMIT_WANTED};
        if (setrlimit(RLIMIT_NOFILE, &more) == 0) /* only with CAP_SYS_RESOURCE */
            rl = more;
    }
    if (rl.rlim_cur != rl.rlim_max) {
        struct rlimit raised = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            rl.rlim_cur = rl.rlim_max;
        else
            gs_warn("cannot raise the open-file limit from %llu to %llu",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)LONG_MAX)
        return LONG_MAX;
    gs_info("open-file limit: %llu", (unsigned long long)rl.rlim_cur);
    return (long)rl.rlim_cur;
}
