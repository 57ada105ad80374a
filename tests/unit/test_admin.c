/*
 * test_admin.c - who may act on a session (broker/admin.c): the owner,
 * root and the admin group; and a sender without credentials nobody's
 * (it used to be everybody's: over tcp:// the audit's mallory unregistered
 * alice's session).  Names belong to their user (sessions.c: the ids of
 * (uid, name) pairs never meet), and the log lines one user's messages
 * cause are limited per uid (log_limit.c).  These files are compiled in
 * here: they are parts of the broker program, not of a library.
 */
#include "unit_fixture.h"
#include <unistd.h>

#include "admin.c"
#include "log_limit.c"
#include "sessions.h"

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

/* Alice's "train" and mallory's are two sessions; the broker's own user
 * keeps names as ids; a name that looks like another user's id cannot
 * become that id. */
static void test_session_names_belong_to_their_user(void **state)
{
    (void)state;
    gs_sessions_t *t = gs_sessions_new(0);
    char id[GS_SESSION_ID_MAX];
    assert_int_equal(gs_sessions_key(t, 0, "train", id, sizeof id), 0);
    assert_string_equal(id, "train");
    assert_int_equal(gs_sessions_key(t, 1001, "train", id, sizeof id), 0);
    assert_string_equal(id, "train@1001");
    assert_int_equal(gs_sessions_key(t, 0, "train@1001", id, sizeof id), 0);
    assert_string_equal(id, "train@1001@0");
    assert_int_equal(gs_sessions_key(t, 1002, "train@1001", id, sizeof id), 0);
    assert_string_equal(id, "train@1001@1002");
    assert_int_equal(gs_sessions_key(t, 0, "a@b", id, sizeof id), 0);
    assert_string_equal(id, "a@b");
    gs_session_t *mallory = gs_sessions_create_named(t, 1002, "train");
    assert_non_null(mallory);
    assert_null(gs_sessions_named(t, 1001, "train"));
    gs_session_t *alice = gs_sessions_create_named(t, 1001, "train");
    assert_non_null(alice);
    assert_ptr_not_equal(alice, mallory);
    assert_ptr_equal(gs_sessions_named(t, 1001, "train"), alice);
    assert_string_equal(alice->name, "train");
    assert_string_equal(alice->id, "train@1001");
    /* The longest name fits with any uid. */
    char longest[GS_SESSION_NAME_MAX];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    assert_non_null(gs_sessions_create_named(t, 4294967294u, longest));
    gs_sessions_destroy(&t);
}

/* A burst, then a steady rate; what is held back is counted and said with
 * the next line; one uid's storm leaves another's lines alone. */
static void test_log_lines_are_limited_per_uid(void **state)
{
    (void)state;
    gs_log_limit_t *l = gs_log_limit_new(3, 2.0);
    unsigned long held = 99;
    int64_t t = 1000000;
    for (int i = 0; i < 3; i++)
        assert_true(gs_log_limit_allow(l, 1002, t, &held));
    assert_int_equal(held, 0);
    for (int i = 0; i < 1000; i++)
        assert_false(gs_log_limit_allow(l, 1002, t, NULL));
    assert_true(gs_log_limit_allow(l, 1001, t, &held));          /* alice: her own bucket */
    assert_true(gs_log_limit_allow(l, 1002, t + 500000, &held)); /* half a second: one more */
    assert_int_equal(held, 1000);
    assert_false(gs_log_limit_allow(l, 1002, t + 500000, &held));
    /* More uids than the table holds: still bounded, and each gets its burst. */
    for (uid_t u = 2000; u < 2000 + 2 * GS_LOG_LIMIT_UIDS; u++)
        assert_true(gs_log_limit_allow(l, u, t + 600000, NULL));
    gs_log_limit_destroy(&l);
    assert_null(l);
    assert_null(gs_log_limit_new(0, 1.0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sender_without_credentials_touches_nothing),
        cmocka_unit_test(test_owner_root_and_others),
        cmocka_unit_test(test_account_name),
        cmocka_unit_test(test_session_names_belong_to_their_user),
        cmocka_unit_test(test_log_lines_are_limited_per_uid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
