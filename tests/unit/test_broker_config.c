/*
 * test_broker_config.c - the configuration file's syntax both ways: what
 * `gpushare set --persist` writes into the broker's state file reads back
 * as the same values, and the file is replaced whole or not at all.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "broker_config.h"
#include "unit_fixture.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    return unit_fixture_tmpdir(dir, sizeof dir, "config");
}

static int teardown(void **state)
{
    (void)state;
    return unit_fixture_rmtree(dir);
}

/* v written as text and read back by the file's own reader. */
static json_t *round_trip(json_t *v)
{
    char text[512], err[200];
    assert_int_equal(gs_config_value_text(v, text, sizeof text, err, sizeof err), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/rt.conf", dir);
    gs_config_t cfg = {{0}, NULL, 0};
    assert_int_equal(gs_config_put(&cfg, "k", text, err, sizeof err), 0);
    assert_int_equal(gs_config_write(path, &cfg, NULL, err, sizeof err), 0);
    gs_config_free(&cfg);
    assert_int_equal(gs_config_load(path, 0, &cfg, err, sizeof err), 0);
    const gs_config_entry_t *e = gs_config_get(&cfg, "k");
    assert_non_null(e);
    json_t *back = gs_config_value_json(e->value);
    gs_config_free(&cfg);
    return back;
}

static void test_values_read_back_the_same(void **state)
{
    (void)state;
    json_t *values[] = {
        json_integer(-42), json_real(7.25),      json_real(0.1),           json_true(),
        json_false(),      json_string("burst"), json_string(" padded  "), json_string("\"q\""),
        json_string("a=b")};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        json_t *back = round_trip(values[i]);
        char *want = json_dumps(values[i], JSON_ENCODE_ANY);
        char *got = json_dumps(back, JSON_ENCODE_ANY);
        assert_string_equal(got, want);
        free(want);
        free(got);
        json_decref(back);
        json_decref(values[i]);
    }
}

static void test_values_a_file_cannot_hold_are_refused(void **state)
{
    (void)state;
    char text[64], err[200];
    json_t *bad[] = {json_string("a#b"), json_string("two\nlines"),
                     json_string("42"),  json_string("true"),
                     json_null(),        json_object()};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        assert_int_equal(gs_config_value_text(bad[i], text, sizeof text, err, sizeof err), -1);
        assert_true(err[0] != 0);
        json_decref(bad[i]);
    }
    json_t *longer =
        json_string("0123456789012345678901234567890123456789012345678901234567890123");
    assert_int_equal(gs_config_value_text(longer, text, sizeof text, err, sizeof err), -1);
    assert_non_null(strstr(err, "too long"));
    json_decref(longer);
}

static void test_put_replaces_and_write_keeps_order(void **state)
{
    (void)state;
    char path[128], err[200];
    snprintf(path, sizeof path, "%s/state", dir);
    gs_config_t cfg = {{0}, NULL, 0};
    assert_int_equal(gs_config_put(&cfg, "tq", "4", err, sizeof err), 0);
    assert_int_equal(gs_config_put(&cfg, "policy", "burst", err, sizeof err), 0);
    assert_int_equal(gs_config_put(&cfg, "tq", "5", err, sizeof err), 0);
    assert_int_equal(gs_config_put(&cfg, "bad key", "1", err, sizeof err), -1);
    assert_int_equal(cfg.count, 2);
    assert_int_equal(gs_config_write(path, &cfg, "# header\n", err, sizeof err), 0);
    gs_config_free(&cfg);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char text[256] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    assert_string_equal(text, "# header\ntq = 5\npolicy = burst\n");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
}

static void test_write_fails_whole(void **state)
{
    (void)state;
    char path[128], err[200];
    gs_config_t cfg = {{0}, NULL, 0};
    assert_int_equal(gs_config_put(&cfg, "tq", "4", err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/no-such-dir/state", dir);
    assert_int_equal(gs_config_write(path, &cfg, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no-such-dir/state"));
    /* Over an existing file: replaced by rename, and no temporary file is
     * left behind. */
    snprintf(path, sizeof path, "%s/keep", dir);
    assert_int_equal(gs_config_write(path, &cfg, NULL, err, sizeof err), 0);
    assert_int_equal(gs_config_put(&cfg, "policy", "burst", err, sizeof err), 0);
    assert_int_equal(gs_config_write(path, &cfg, NULL, err, sizeof err), 0);
    gs_config_free(&cfg);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | grep -c keep) -eq 1", dir);
    assert_int_equal(system(cmd), 0);
}

/* A file of the given text at dir/name; its path into path. */
static void write_file(char *path, size_t len, const char *name, const char *text)
{
    unit_fixture_write_file(path, len, dir, name, text);
}

/* Found by tests/fuzz/fuzz_config: a value that is not UTF-8 made no JSON
 * value (NULL; the broker then opened an event log named "?"), and neither
 * did "nan" or "inf" (jansson holds finite numbers only). */
static void test_every_value_is_json(void **state)
{
    (void)state;
    char path[128], err[200];
    gs_config_t cfg;
    write_file(path, sizeof path, "latin1.conf", "policy = burst\nevent_log = /var/log/caf\xe9\n");
    assert_int_equal(gs_config_load(path, 0, &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "latin1.conf:2: the value of event_log is not UTF-8 text"));
    assert_null(cfg.entries);
    /* A comment may hold any bytes: only the value becomes JSON. */
    write_file(path, sizeof path, "comment.conf", "policy = burst # caf\xe9\n");
    assert_int_equal(gs_config_load(path, 0, &cfg, err, sizeof err), 0);
    gs_config_free(&cfg);
    const char *words[] = {"nan", "inf", "-Infinity", "NAN(1)"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        json_t *v = gs_config_value_json(words[i]);
        assert_true(json_is_string(v));
        assert_string_equal(json_string_value(v), words[i]);
        json_decref(v);
    }
}

/* Found by tests/fuzz/fuzz_config: `set --persist` rewrites the state file
 * with the entries it does not change as they were read, unquoted, so a
 * quoted value lost its blanks or its own quotes. */
static void test_rewrite_keeps_quoted_values(void **state)
{
    (void)state;
    char path[128], err[200];
    gs_config_t cfg, again;
    write_file(path, sizeof path, "quoted.state",
               "a = \" padded \"\nb = \"\"q\"\"\nc = plain\nd = \"\n");
    assert_int_equal(gs_config_load(path, 0, &cfg, err, sizeof err), 0);
    assert_string_equal(gs_config_get(&cfg, "a")->value, " padded ");
    assert_string_equal(gs_config_get(&cfg, "b")->value, "\"q\"");
    assert_string_equal(gs_config_get(&cfg, "d")->value, "\"");
    assert_int_equal(gs_config_put(&cfg, "c", "other", err, sizeof err), 0);
    assert_int_equal(gs_config_write(path, &cfg, NULL, err, sizeof err), 0);
    assert_int_equal(gs_config_load(path, 0, &again, err, sizeof err), 0);
    assert_int_equal(again.count, cfg.count);
    for (size_t i = 0; i < cfg.count; i++) {
        assert_string_equal(again.entries[i].key, cfg.entries[i].key);
        assert_string_equal(again.entries[i].value, cfg.entries[i].value);
    }
    gs_config_free(&cfg);
    gs_config_free(&again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_read_back_the_same),
        cmocka_unit_test(test_values_a_file_cannot_hold_are_refused),
        cmocka_unit_test(test_put_replaces_and_write_keeps_order),
        cmocka_unit_test(test_write_fails_whole),
        cmocka_unit_test(test_every_value_is_json),
        cmocka_unit_test(test_rewrite_keeps_quoted_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
