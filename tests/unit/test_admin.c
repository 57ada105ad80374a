/*
 * test_admin.c - who may act on a session (broker/admin.c): the owner,
 * root and the admin group; and a sender without credentials nobody's
 * (it used to be everybody's: over tcp:// the audit's mallory unregistered
 * alice's session).  admin.c is compiled in here: it is a part of the
 * broker program, not of a library.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>

#include "admin.c"

#define NO_GROUP ((gid_t)-1)

static void test_sender_without_credentials_touches_nothing(void **state)
{
    (void)state;
    /* has_creds 0: whatever uid the struct holds, and whoever owns it */
    assert_false(gs_admin_sender_may_touch(0, 0, 1, 1000, NO_GROUP));
    assert_false(gs_admin_sender_may_touch(0, 1000, 1, 1000, NO_GROUP));
    assert_false(gs_admin_sender_may_touch(0, 1000, 0, 0, NO_GROUP));
}

static void test_owner_root_and_others(void **state)
{
    (void)state;
    assert_true(gs_admin_sender_may_touch(1, 1000, 1, 1000, NO_GROUP));  /* the owner */
    assert_false(gs_admin_sender_may_touch(1, 1001, 1, 1000, NO_GROUP)); /* someone else */
    assert_true(gs_admin_sender_may_touch(1, 0, 1, 1000, NO_GROUP));     /* root */
    assert_true(gs_admin_sender_may_touch(1, 1001, 0, 0, NO_GROUP));     /* nobody's yet */
}

static void test_account_name(void **state)
{
    (void)state;
    char name[64];
    gs_admin_account_name(0, name, sizeof name);
    assert_string_equal(name, "root");
    gs_admin_account_name(4000000001u, name, sizeof name); /* no passwd entry */
    assert_string_equal(name, "uid 4000000001");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sender_without_credentials_touches_nothing),
        cmocka_unit_test(test_owner_root_and_others),
        cmocka_unit_test(test_account_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
