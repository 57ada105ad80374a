/*
 * test_common.c - the small shared helpers: the broker-address rule and
 * whether to trust a broker's socket, byte counts, LD_PRELOAD composition,
 * peer credentials, display text made safe for a terminal.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "endpoint.h"
#include "peer.h"
#include "preload.h"
#include "size.h"
#include "socket_trust.h"
#include "text_safe.h"
#include "unit_fixture.h"

static void test_endpoint_normalise(void **state)
{
    (void)state;
    char out[256], err[256];
    assert_int_equal(gs_endpoint_normalise("/run/x.sock", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///run/x.sock");
    assert_int_equal(gs_endpoint_normalise("ipc:///a/b", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///a/b");
    /* tcp:// carries no credentials, which every permission check needs */
    assert_int_equal(
        gs_endpoint_normalise("tcp://127.0.0.1:5555", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "tcp:// is not supported"));
    assert_non_null(strstr(err, "unix socket credentials"));
    assert_int_equal(gs_endpoint_normalise("", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "empty"));
    assert_int_equal(gs_endpoint_normalise(NULL, out, sizeof out, err, sizeof err), -1);
    assert_int_equal(gs_endpoint_normalise("udp://x", out, sizeof out, err, sizeof err), -1);
    assert_non_null(strstr(err, "only ipc:// is supported"));
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
    char out[256], err[256], note[600];
    unsetenv("GPUSHARE_BROKER");
    setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
    assert_int_equal(gs_endpoint_for_broker(0, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///run/user/1234/gpushare/broker.sock");
    assert_int_equal(gs_endpoint_for_broker(1, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc://" GS_SYSTEM_SOCKET);
    /* A client falls back to the system socket when no per-user one exists. */
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, note, sizeof note, err, sizeof err),
                     0);
    assert_string_equal(out, "ipc://" GS_SYSTEM_SOCKET);
    assert_string_equal(note, "");
    setenv("GPUSHARE_BROKER", "/elsewhere/b.sock", 1);
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, note, sizeof note, err, sizeof err),
                     0);
    assert_string_equal(out, "ipc:///elsewhere/b.sock");
    assert_int_equal(gs_endpoint_for_broker(1, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ipc:///elsewhere/b.sock");
    setenv("GPUSHARE_BROKER", "bogus://", 1);
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, note, sizeof note, err, sizeof err),
                     -1);
    unsetenv("GPUSHARE_BROKER");
    unsetenv("XDG_RUNTIME_DIR");
    assert_int_equal(gs_endpoint_for_broker(0, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "ipc:///tmp/gpushare-"));
    assert_string_equal(gs_endpoint_ipc_path("ipc:///a"), "/a");
    assert_null(gs_endpoint_ipc_path("tcp://x:1"));
}

/* ---- trusting the broker's socket ------------------------------------------- */

/* A fresh private directory (mode 0700) of this test. */
static void private_dir(char *dir, size_t len)
{
    assert_int_equal(unit_fixture_tmpdir(dir, len, "trust"), 0);
}

/* A unix socket bound at path; listening unless listen_too is 0. */
static int bound_socket(const char *path, int listen_too)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    if (listen_too)
        assert_int_equal(listen(fd, 4), 0);
    return fd;
}

/* The per-user socket in a directory someone else could have made, or
 * that anyone may write to, is passed over for the system socket, and the
 * client is told why (a stranger's ROUTER there once blocked a user's
 * program for good). */
static void test_user_socket_dir_must_be_private(void **state)
{
    (void)state;
    char xdg[64], dir[96], sock[128], out[256], note[600], err[256];
    private_dir(xdg, sizeof xdg);
    snprintf(dir, sizeof dir, "%s/gpushare", xdg);
    snprintf(sock, sizeof sock, "%s/broker.sock", dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    int fd = bound_socket(sock, 1);
    unsetenv("GPUSHARE_BROKER");
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    assert_true(gs_endpoint_is_user_socket(sock));
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, note, sizeof note, err, sizeof err),
                     0);
    assert_string_equal(gs_endpoint_ipc_path(out), sock);
    assert_string_equal(note, "");

    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, note, sizeof note, err, sizeof err),
                     0);
    assert_string_equal(out, "ipc://" GS_SYSTEM_SOCKET);
    assert_non_null(strstr(note, "ignoring"));
    assert_non_null(strstr(note, "writable by others (mode 0777)"));

    assert_int_equal(chmod(dir, 0750), 0); /* not writable by others, but not private either */
    assert_int_equal(gs_endpoint_for_client(out, sizeof out, note, sizeof note, err, sizeof err),
                     0);
    assert_string_equal(out, "ipc://" GS_SYSTEM_SOCKET);
    assert_non_null(strstr(note, "must be yours with mode 0700"));
    /* The same socket named explicitly only needs a safe path. */
    assert_int_equal(gs_trust_path(sock, 0, err, sizeof err), 0);
    assert_int_equal(gs_trust_path(sock, 1, err, sizeof err), -1);

    close(fd);
    unlink(sock);
    rmdir(dir);
    rmdir(xdg);
    unsetenv("XDG_RUNTIME_DIR");
}

/* Who may own the directories on the way: root, the user, and the
 * service account named by GPUSHARE_BROKER_USER. */
static void test_trusted_uids(void **state)
{
    (void)state;
    unsetenv("GPUSHARE_BROKER_USER");
    assert_true(gs_trust_uid(0));
    assert_true(gs_trust_uid(getuid()));
    uid_t other = getuid() == 4242 ? 4243 : 4242;
    assert_false(gs_trust_uid(other));
    char n[16];
    snprintf(n, sizeof n, "%u", (unsigned)other);
    setenv("GPUSHARE_BROKER_USER", n, 1);
    assert_true(gs_trust_uid(other));
    setenv("GPUSHARE_BROKER_USER", "no-such-user-here", 1);
    assert_false(gs_trust_uid(other));
    unsetenv("GPUSHARE_BROKER_USER");

    gs_peer_t p = {.valid = 1, .uid = other, .gid = 0, .pid = 7};
    char err[300];
    assert_int_equal(gs_trust_peer(&p, "ipc:///x", err, sizeof err), -1);
    assert_non_null(strstr(err, "refusing the broker at ipc:///x: it runs as uid"));
    p.uid = getuid();
    assert_int_equal(gs_trust_peer(&p, "ipc:///x", err, sizeof err), 0);
    p.valid = 0;
    assert_int_equal(gs_trust_peer(&p, "ipc:///x", err, sizeof err), -1);
    assert_non_null(strstr(err, "no credentials"));
}

/* The directories on the way: writable by others only when sticky, and
 * then the entry below must be trusted. */
static void test_trust_path(void **state)
{
    (void)state;
    char dir[64], sub[96], sock[128], err[400];
    private_dir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(sock, sizeof sock, "%s/b.sock", sub);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(gs_trust_path(sock, 0, err, sizeof err), 0); /* no socket yet: fine */
    /* an ancestor anyone may write to */
    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(gs_trust_path(sock, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, dir));
    assert_non_null(strstr(err, "writable by others (mode 0777)"));
    /* sticky, like /tmp: fine while what is below it is ours */
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(gs_trust_path(sock, 0, err, sizeof err), 0);
    assert_int_equal(chmod(dir, 0700), 0);
    /* a relative path is checked from the working directory */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(sub), 0);
    assert_int_equal(gs_trust_path("b.sock", 0, err, sizeof err), 0);
    assert_int_equal(chmod(sub, 0777), 0);
    assert_int_equal(gs_trust_path("b.sock", 0, err, sizeof err), -1);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(chmod(sub, 0755), 0);
    /* a symlink to an unsafe directory is judged by where it leads */
    char link[96], open_dir[96];
    snprintf(open_dir, sizeof open_dir, "%s/open", dir);
    assert_int_equal(mkdir(open_dir, 0777), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(symlink(open_dir, link), 0);
    char via[128];
    snprintf(via, sizeof via, "%s/b.sock", link);
    assert_int_equal(gs_trust_path(via, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "writable by others"));
    unlink(link);
    rmdir(open_dir);
    rmdir(sub);
    rmdir(dir);
}

/* connect(2) before libzmq, so that the client can say what is wrong
 * instead of waiting for a welcome that cannot come. */
static void test_probe(void **state)
{
    (void)state;
    char dir[64], sock[128], err[400];
    private_dir(dir, sizeof dir);
    snprintf(sock, sizeof sock, "%s/b.sock", dir);
    assert_int_equal(gs_trust_probe(sock, 0, err, sizeof err), GS_PROBE_ABSENT);
    assert_non_null(strstr(err, "no broker is running at ipc://"));
    assert_non_null(strstr(err, "no socket file"));
    /* a broker killed with -9 leaves its socket file behind */
    int fd = bound_socket(sock, 0);
    close(fd);
    assert_int_equal(gs_trust_probe(sock, 0, err, sizeof err), GS_PROBE_STALE);
    assert_non_null(strstr(err, "broker not running (stale socket "));
    assert_non_null(strstr(err, sock));
    unlink(sock);
    fd = bound_socket(sock, 1);
    assert_int_equal(gs_trust_probe(sock, 0, err, sizeof err), GS_PROBE_OK);
    /* the same live socket in a directory anyone may write to */
    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(gs_trust_probe(sock, 0, err, sizeof err), GS_PROBE_UNTRUSTED);
    assert_non_null(strstr(err, "refusing the broker socket"));
    assert_int_equal(chmod(dir, 0700), 0);
    close(fd);
    unlink(sock);
    /* not a socket at all */
    FILE *f = fopen(sock, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(gs_trust_probe(sock, 0, err, sizeof err), GS_PROBE_UNTRUSTED);
    assert_non_null(strstr(err, "is not a socket"));
    unlink(sock);
    rmdir(dir);
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
    /* A peer in a pid namespace the broker cannot see: pid 0, but its uid
     * is still known and still decides what it may touch. */
    assert_int_equal(gs_peer_parse("a:1000:100:0", &p), 0);
    assert_true(p.valid);
    assert_int_equal(p.uid, 1000);
    assert_int_equal(p.pid, 0);
    const char *bad[] = {"",        "localhost", "127.0.0.1",         "a:1:2",
                         "a:1:2:x", "a:1::3",    "a:99999999999:1:1", NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(gs_peer_parse(bad[i], &p), -1);
        assert_false(p.valid);
    }
    assert_int_equal(gs_peer_parse(NULL, &p), -1);
}

/* Names and paths from other users: control characters (C0, DEL, C1) and
 * bytes that are not UTF-8 become '?', other characters stay, cuts fall
 * on character boundaries (issue 34, item 7). */
static void test_text_safe(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(gs_text_safe(out, sizeof out, "train.ipynb"), 0);
    assert_string_equal(out, "train.ipynb");
    assert_true(gs_text_is_safe("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    assert_int_equal(gs_text_safe(out, sizeof out, "caf\xc3\xa9"), 0);
    assert_string_equal(out, "caf\xc3\xa9"); /* UTF-8 is kept */
    /* A forged row and a colour: newline and ESC replaced. */
    assert_int_equal(gs_text_safe(out, sizeof out, "a\nroot  GPU 0\x1b[31mred"), 2);
    assert_string_equal(out, "a?root  GPU 0?[31mred");
    assert_false(gs_text_is_safe("a\nb"));
    /* Tab, CR, DEL, BEL; C1 CSI (U+009B) in its UTF-8 form and raw. */
    assert_int_equal(gs_text_safe(out, sizeof out,
                                  "\t\r\x7f\x07|\xc2\x9b"
                                  "2J|\x9b"),
                     6);
    assert_string_equal(out, "????|?2J|?");
    assert_false(gs_text_is_safe("\xc2\x85"));
    assert_true(gs_text_is_safe("\xc2\xa0")); /* U+00A0 is printable */
    /* Not UTF-8: overlong, surrogate, truncated, past U+10FFFF. */
    assert_int_equal(
        gs_text_safe(out, sizeof out, "\xc0\xaf|\xed\xa0\x80|\xe2\x82|\xf4\x90\x80\x80"), 11);
    assert_string_equal(out, "??|???|??|????");
    /* Cut on a boundary: a 3-byte character that does not fit is left out. */
    assert_int_equal(gs_text_safe(out, 5, "ab\xe2\x82\xac"), 0);
    assert_string_equal(out, "ab");
    assert_int_equal(gs_text_safe(out, 6, "ab\xe2\x82\xac"), 0);
    assert_string_equal(out, "ab\xe2\x82\xac");
    assert_int_equal(gs_text_safe(out, 1, "abc"), 0);
    assert_string_equal(out, "");
    assert_int_equal(gs_text_safe(out, sizeof out, NULL), 0);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_normalise),
        cmocka_unit_test(test_endpoint_defaults),
        cmocka_unit_test(test_size_parse),
        cmocka_unit_test(test_preload_value),
        cmocka_unit_test(test_peer_parse),
        cmocka_unit_test(test_user_socket_dir_must_be_private),
        cmocka_unit_test(test_trusted_uids),
        cmocka_unit_test(test_trust_path),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_text_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
