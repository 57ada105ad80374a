/*
 * test_conn_caps.c - how connections to a shared socket are shared out
 * (broker/conn_caps.h): one user never holds the room of the others, the
 * users never hold root's, and the numbers the documentation gives
 * (doc/security.md) are the ones the code makes.
 */
#include "unit_fixture.h"

#include "conn_caps.h"

static void the_broker_socket_under_a_low_open_file_limit(void **state)
{
    (void)state;
    /* 256 descriptors leave 128 for connections (conn_guard.c): with 256
     * per uid asked, one user could take them all (issue 34). */
    gs_conn_caps_t c = gs_conn_caps_make(128, 256);
    assert_int_equal(c.total, 128);
    assert_int_equal(c.reserved, 16);
    assert_int_equal(c.per_uid, 28); /* a quarter of the users' 112 */
    assert_int_equal(c.per_trusted, 256);
}

static void the_setting_applies_where_it_is_the_smaller(void **state)
{
    (void)state;
    /* LimitNOFILE=524288: the users' room is far larger than 256. */
    gs_conn_caps_t c = gs_conn_caps_make(524288 - 1536, 256);
    assert_int_equal(c.per_uid, 256);
    assert_int_equal(c.reserved, (524288 - 1536) / 8);
    /* The pool socket: 64 slots, 8 per uid. */
    c = gs_conn_caps_make(64, 8);
    assert_int_equal(c.reserved, 8);
    assert_int_equal(c.per_uid, 8);
}

static void tiny_rooms_still_admit_someone(void **state)
{
    (void)state;
    gs_conn_caps_t c = gs_conn_caps_make(1, 5);
    assert_int_equal(c.reserved, 0);
    assert_int_equal(c.per_uid, 1);
    assert_int_equal(gs_conn_caps_admit(&c, 0, 0, 0, 0), GS_CONN_ADMIT);
    c = gs_conn_caps_make(3, 0);
    assert_int_equal(c.reserved, 1);
    assert_int_equal(c.per_uid, 1);
    assert_int_equal(gs_conn_caps_admit(&c, 0, 0, 0, 0), GS_CONN_ADMIT);
    assert_int_equal(gs_conn_caps_admit(&c, 0, 0, 2, 2), GS_CONN_OVER_USERS);
    assert_int_equal(gs_conn_caps_admit(&c, 1, 0, 2, 2), GS_CONN_ADMIT);
}

/* Users connect one after another, each as much as it may, as a hostile
 * user would: what is left for the next user and for root. */
static void one_user_at_its_cap_leaves_the_others_room(void **state)
{
    (void)state;
    gs_conn_caps_t c = gs_conn_caps_make(128, 256);
    int users = 0, all = 0;
    int mallory = 0;
    while (gs_conn_caps_admit(&c, 0, mallory, users, all) == GS_CONN_ADMIT)
        mallory++, users++, all++;
    assert_int_equal(mallory, 28);
    assert_int_equal(gs_conn_caps_admit(&c, 0, mallory, users, all), GS_CONN_OVER_UID);
    /* alice, bob and eve still get in; so does root. */
    assert_int_equal(gs_conn_caps_admit(&c, 0, 0, users, all), GS_CONN_ADMIT);
    assert_int_equal(gs_conn_caps_admit(&c, 1, 0, users, all), GS_CONN_ADMIT);
}

static void users_together_never_take_roots_reserve(void **state)
{
    (void)state;
    gs_conn_caps_t c = gs_conn_caps_make(128, 256);
    int users = 0, all = 0, filled = 0;
    for (int u = 0; u < 10; u++) { /* ten hostile users, in turn */
        int mine = 0;
        while (gs_conn_caps_admit(&c, 0, mine, users, all) == GS_CONN_ADMIT)
            mine++, users++, all++;
        if (users == c.total - c.reserved && !filled) {
            filled = u + 1;
            assert_int_equal(gs_conn_caps_admit(&c, 0, 0, users, all), GS_CONN_OVER_USERS);
        }
    }
    assert_int_equal(filled, 4); /* it takes four users at their caps */
    assert_int_equal(users, 112);
    /* root has its sixteen (and the broker's own account shares them) */
    int root = 0;
    while (gs_conn_caps_admit(&c, 1, root, users, all) == GS_CONN_ADMIT)
        root++, all++;
    assert_int_equal(root, 16);
    assert_int_equal(gs_conn_caps_admit(&c, 1, root, users, all), GS_CONN_FULL);
}

static void the_trusted_are_capped_by_the_setting_alone(void **state)
{
    (void)state;
    /* max_connections_per_uid still caps root (and a per-user broker's
     * own user)... */
    gs_conn_caps_t c = gs_conn_caps_make(128, 3);
    assert_int_equal(c.per_trusted, 3);
    assert_int_equal(gs_conn_caps_admit(&c, 1, 3, 0, 3), GS_CONN_OVER_UID);
    assert_int_equal(gs_conn_caps_admit(&c, 0, 0, 0, 3), GS_CONN_ADMIT);
    /* ...but not the users' share: 1000 connections of a per-user broker's
     * user, under a limit that leaves users 768 each (doc/load-test.md). */
    c = gs_conn_caps_make(5048 - 1536, 4096);
    assert_int_equal(c.per_uid, 768);
    assert_int_equal(gs_conn_caps_admit(&c, 1, 999, 0, 999), GS_CONN_ADMIT);
    assert_int_equal(gs_conn_caps_admit(&c, 0, 999, 0, 999), GS_CONN_OVER_UID);
}

static void who_is_trusted(void **state)
{
    (void)state;
    assert_true(gs_conn_caps_trusted(0, 999));
    assert_true(gs_conn_caps_trusted(999, 999)); /* the broker's own account */
    assert_false(gs_conn_caps_trusted(1000, 999));
    assert_false(gs_conn_caps_trusted(1000, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_broker_socket_under_a_low_open_file_limit),
        cmocka_unit_test(the_setting_applies_where_it_is_the_smaller),
        cmocka_unit_test(tiny_rooms_still_admit_someone),
        cmocka_unit_test(one_user_at_its_cap_leaves_the_others_room),
        cmocka_unit_test(users_together_never_take_roots_reserve),
        cmocka_unit_test(the_trusted_are_capped_by_the_setting_alone),
        cmocka_unit_test(who_is_trusted),
    };
    return cmocka_run_group_tests_name("conn_caps", tests, NULL, NULL);
}
