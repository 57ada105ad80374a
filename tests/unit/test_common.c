/*
 * test_common.c - the small shared helpers: the broker-address rule, byte
 * counts, LD_PRELOAD composition.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "peer.h"
#include "preload.h"
#include "size.h"

static void test_endpoint_normalise(void **state)
{
    (void)state;
    char out[256], err[256];
    assert_int_equal(gs_endpoint_normalise("/run/x.sock", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///run/x.sock");
    assert_int_equal(gs_endpoint_normalise("ipc:///a/b", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///a/b");
    assert_int_equal(
        gs_endpoint_normalise("tcp://127.0.0.1:5555", out, sizeof out, err, sizeof err), 0);
    assert_int_equal(gs_endpoint_normalise("", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "empty"));
    assert_int_equal(gs_endpoint_normalise(NULL, out, sizeof out, err, sizeof err), -1);
    assert_int_equal(gs_endpoint_normalise("udp://x", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "only ipc:// and tcp://"));
    assert_int_equal(gs_endpoint_normalise("ipc://", out, sizeof out, err, sizeof err), -1);
    char longpath[200];
    memset(longpath, 'x', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    assert_int_equal(gs_endpoint_normalise(longpath, out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "too long"));
    assert_int_equal(gs_endpoint_normalise("/tmp/a", out, 8, err, sizeof err), -1);
}

static void test_endpoint_defaults(void **state)
{
    (void)state;
    char out[256], err[256];
    unsetenv("GPUSHARE_BROKER");
    setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
    assert_int_equal(gs_endpoint_for_broker(0, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///run/user/1234/gpushare/broker.sock");
    assert_int_equal(gs_endpoint_for_broker(1, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc://" GS_SYSTEM_SOCKET);
    /* A client falls back to the system socket when no per-user one exists. */
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc://" GS_SYSTEM_SOCKET);
    setenv("GPUSHARE_BROKER", "/elsewhere/b.sock", 1);
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///elsewhere/b.sock");
    assert_int_equal(gs_endpoint_for_broker(1, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///elsewhere/b.sock");
    setenv("GPUSHARE_BROKER", "bogus://", 1);
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, err, sizeof err), -1);
    unsetenv("GPUSHARE_BROKER");
    unsetenv("XDG_RUNTIME_DIR");
    assert_int_equal(gs_endpoint_for_broker(0, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "ipc:///tmp/gpushare-"));
    assert_string_equal(gs_endpoint_ipc_path("ipc:///a"), "/a");
    assert_null(gs_endpoint_ipc_path("tcp://x:1"));
}

static void test_size_parse(void **state)
{
    (void)state;
    uint64_t b;
    assert_int_equal(gs_size_parse("512", &b), 0);
    assert_int_equal(b, 512);
    assert_int_equal(gs_size_parse("64K", &b), 0);
    assert_int_equal(b, 65536);
    assert_int_equal(gs_size_parse("16G", &b), 0);
    assert_int_equal(b, 16ULL << 30);
    assert_int_equal(gs_size_parse("16Gi", &b), 0);
    assert_int_equal(b, 16ULL << 30);
    assert_int_equal(gs_size_parse("2MB", &b), 0);
    assert_int_equal(b, 2ULL << 20);
    assert_int_equal(gs_size_parse("1.5t", &b), 0);
    assert_int_equal(b, 3ULL << 39);
    const char *bad[] = {"", "-1", "+1", "G", "12X", "1 G", "1e400", "99999999999T", NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(gs_size_parse(bad[i], &b), -1);
    assert_int_equal(gs_size_parse(NULL, &b), -1);
}

static void test_preload_value(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(gs_preload_value("/h.so", NULL, out, sizeof out), 0);
    assert_string_equal(out, "/h.so");
    assert_int_equal(gs_preload_value("/h.so", "/a.so /b.so", out, sizeof out), 0);
    assert_string_equal(out, "/h.so:/a.so:/b.so");
    assert_int_equal(gs_preload_value("/h.so", "/h.so:/a.so::", out, sizeof out), 0);
    assert_string_equal(out, "/h.so:/a.so");
    assert_int_equal(gs_preload_value("/h.so", "", out, sizeof out), 0);
    assert_string_equal(out, "/h.so");
    assert_int_equal(gs_preload_value("/h.so", "/very/long/library.so", out, 10), -1);
}

static void test_peer_parse(void **state)
{
    (void)state;
    gs_peer_t p;
    assert_int_equal(gs_peer_parse("localhost:1000:100:4122", &p), 0);
    assert_true(p.valid);
    assert_int_equal(p.uid, 1000);
    assert_int_equal(p.gid, 100);
    assert_int_equal(p.pid, 4122);
    assert_int_equal(gs_peer_parse("::1:0:0:7", &p), 0);
    assert_int_equal(p.pid, 7);
    const char *bad[] = {"",       "localhost", "127.0.0.1",         "a:1:2", "a:1:2:x",
                         "a:1::3", "a:1:2:0",   "a:99999999999:1:1", NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(gs_peer_parse(bad[i], &p), -1);
        assert_false(p.valid);
    }
    assert_int_equal(gs_peer_parse(NULL, &p), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_normalise), cmocka_unit_test(test_endpoint_defaults),
        cmocka_unit_test(test_size_parse),         cmocka_unit_test(test_preload_value),
        cmocka_unit_test(test_peer_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
