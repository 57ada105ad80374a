/*
 * admin.c - see admin.h.
 */
#include "admin.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>

int gs_admin_is_admin(uid_t uid, gid_t admin_gid)
{
    if (uid == 0)
        return 1;
    if (admin_gid == (gid_t)-1)
        return 0;
    struct passwd *pw = getpwuid(uid);
    if (!pw)
        return 0;
    if (pw->pw_gid == admin_gid)
        return 1;
    int n = 64;
    gid_t *groups = malloc((size_t)n * sizeof *groups);
    if (!groups)
        return 0;
    if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0) {
        gid_t *more = realloc(groups, (size_t)n * sizeof *groups);
        if (!more) {
            free(groups);
            return 0;
        }
        groups = more;
        if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
            n = 0;
    }
    int member = 0;
    for (int i = 0; i < n; i++)
        member |= groups[i] == admin_gid;
    free(groups);
    return member;
}

int gs_admin_may_touch(uid_t uid, uid_t owner_uid, gid_t admin_gid)
{
    return uid == owner_uid || gs_admin_is_admin(uid, admin_gid);
}

int gs_admin_sender_may_touch(int has_creds, uid_t uid, int owner_known, uid_t owner_uid,
                              gid_t admin_gid)
{
    if (!has_creds)
        return 0;
    return !owner_known || gs_admin_may_touch(uid, owner_uid, admin_gid);
}

void gs_admin_account_name(uid_t uid, char *out, size_t outlen)
{
    struct passwd pw, *found = NULL;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found && found->pw_name[0])
        snprintf(out, outlen, "%s", found->pw_name);
    else
        snprintf(out, outlen, "uid %u", (unsigned)uid);
}
