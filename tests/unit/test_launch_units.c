/*
 * test_launch_units.c - the launcher's pure parts: connection file errors
 * name the file and the field, where argv names the file, kernel ids from
 * file names, Jupyter signatures (RFC 4231 vectors, forged and truncated
 * ones), IOPub messages to cell events, and a kernel's notebook from a
 * notebook server's runtime file and sessions API, or a command line.
 */
#include <unistd.h>

#include "connection_file.h"
#include "hmac.h"
#include "iopub.h"
#include "nb_server.h"
#include "unit_fixture.h"

static char dir[64];

static const char *write_file(const char *name, const char *text)
{
    static char path[128];
    unit_fixture_write_file(path, sizeof path, dir, name, text);
    return path;
}

#define GOOD                                                                                       \
    "{\"shell_port\": 1, \"iopub_port\": 5555, \"stdin_port\": 3, \"control_port\": 4,"            \
    " \"hb_port\": 5, \"ip\": \"127.0.0.1\", \"key\": \"s3cret-key\", \"transport\": \"tcp\","     \
    " \"signature_scheme\": \"hmac-sha256\", \"kernel_name\": \"shared-gpu\"}"

static void test_conn_good(void **state)
{
    (void)state;
    gs_conn_info_t c;
    char err[512] = "";
    const char *p = write_file("kernel-abc.json", GOOD);
    assert_int_equal(gs_conn_read(p, &c, err, sizeof err), 0);
    assert_string_equal(c.transport, "tcp");
    assert_string_equal(c.ip, "127.0.0.1");
    assert_int_equal(c.iopub_port, 5555);
    assert_string_equal(c.scheme, "hmac-sha256");
    assert_int_equal(c.key_len, strlen("s3cret-key"));
    assert_memory_equal(c.key, "s3cret-key", c.key_len);
    char ep[256];
    assert_int_equal(gs_conn_iopub_endpoint(&c, ep, sizeof ep), 0);
    assert_string_equal(ep, "tcp://127.0.0.1:5555");
    gs_conn_clear(&c);
    assert_int_equal(c.key_len, 0);
    assert_int_equal(c.key[0], 0);
}

static void test_conn_ipc_and_wildcard(void **state)
{
    (void)state;
    gs_conn_info_t c;
    char err[512], ep[256];
    const char *p = write_file("k.json", "{\"transport\":\"ipc\",\"ip\":\"/run/k/kernel\","
                                         "\"iopub_port\":2,\"key\":\"\"}");
    assert_int_equal(gs_conn_read(p, &c, err, sizeof err), 0);
    assert_int_equal(c.key_len, 0);
    assert_string_equal(c.scheme, "hmac-sha256"); /* the default */
    assert_int_equal(gs_conn_iopub_endpoint(&c, ep, sizeof ep), 0);
    assert_string_equal(ep, "ipc:///run/k/kernel-2");
    p = write_file("k.json", "{\"ip\":\"0.0.0.0\",\"iopub_port\":7,\"key\":\"k\"}");
    assert_int_equal(gs_conn_read(p, &c, err, sizeof err), 0);
    assert_int_equal(gs_conn_iopub_endpoint(&c, ep, sizeof ep), 0);
    assert_string_equal(ep, "tcp://127.0.0.1:7");
}

/* Each bad file gives an error naming the file and the field. */
static void test_conn_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"ip\":\"127.0.0.1\",\"key\":\"k\"}", "field \"iopub_port\" is missing"},
        {"{\"ip\":\"127.0.0.1\",\"key\":\"k\",\"iopub_port\":\"5\"}",
         "field \"iopub_port\" is not an integer"},
        {"{\"ip\":\"127.0.0.1\",\"key\":\"k\",\"iopub_port\":70000}",
         "field \"iopub_port\" is not a port number"},
        {"{\"key\":\"k\",\"iopub_port\":5}", "field \"ip\" is missing"},
        {"{\"ip\":5,\"key\":\"k\",\"iopub_port\":5}", "field \"ip\" is not a string"},
        {"{\"ip\":\"h\",\"iopub_port\":5}", "field \"key\" is missing"},
        {"{\"ip\":\"h\",\"key\":null,\"iopub_port\":5}", "field \"key\" is not a string"},
        {"{\"ip\":\"h\",\"key\":\"k\",\"iopub_port\":5,\"transport\":\"udp\"}",
         "field \"transport\" is neither"},
        {"{\"ip\":\"h\",\"key\":\"k\",\"iopub_port\":5,\"signature_scheme\":\"hmac-md5\"}",
         "field \"signature_scheme\" is not supported"},
        {"{\"ip\":\"h\",\"key\":\"k\",", "is not valid JSON"},
        {"[1,2]", "does not hold a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gs_conn_info_t c;
        char err[512] = "";
        const char *p = write_file("kernel-bad.json", cases[i].text);
        assert_int_equal(gs_conn_read(p, &c, err, sizeof err), -1);
        if (!strstr(err, cases[i].want) || !strstr(err, p))
            fail_msg("case %zu: \"%s\" does not say \"%s\" and the file", i, err, cases[i].want);
        assert_null(strstr(err, "s3cret")); /* never the key */
    }
    gs_conn_info_t c;
    char err[512];
    char missing[160];
    snprintf(missing, sizeof missing, "%s/kernel-none.json", dir);
    assert_int_equal(gs_conn_read(missing, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot read connection file"));
    assert_non_null(strstr(err, missing));
    assert_non_null(strstr(err, "No such file"));
}

static void test_conn_file_from_argv(void **state)
{
    (void)state;
    char *a1[] = {"python3", "-m", "ipykernel_launcher", "-f", "/r/kernel-1.json", NULL};
    assert_string_equal(gs_conn_file_from_argv(a1), "/r/kernel-1.json");
    char *a2[] = {"python3", "-m", "ipykernel_launcher", "--f=/r/kernel-2.json", NULL};
    assert_string_equal(gs_conn_file_from_argv(a2), "/r/kernel-2.json");
    char *a3[] = {"k", "-f=/a.json", "--IPKernelApp.connection_file", "/b.json", NULL};
    assert_string_equal(gs_conn_file_from_argv(a3), "/b.json"); /* the last one wins */
    char *a4[] = {"k", "--foo", "x", "-fast", "y", "-f", NULL};
    assert_null(gs_conn_file_from_argv(a4));
    char *a5[] = {"k", "--connection-file=/c.json", NULL};
    assert_string_equal(gs_conn_file_from_argv(a5), "/c.json");
}

static void test_kernel_id_from_path(void **state)
{
    (void)state;
    char id[160];
    assert_int_equal(
        gs_conn_kernel_id_from_path("/run/jupyter/kernel-5b1c3e0a-8d2f-4c4e.json", id, sizeof id),
        0);
    assert_string_equal(id, "5b1c3e0a-8d2f-4c4e");
    assert_int_equal(gs_conn_kernel_id_from_path("/tmp/tmpab_12x.json", id, sizeof id), 0);
    assert_string_equal(id, "tmpab_12x");
    assert_int_equal(gs_conn_kernel_id_from_path("kernel-.json", id, sizeof id), 0);
    assert_string_equal(id, "kernel-"); /* no id after the prefix: the name is the id */
    assert_int_equal(gs_conn_kernel_id_from_path("/x/kernel-a b.json", id, sizeof id), -1);
    assert_int_equal(gs_conn_kernel_id_from_path("/x/.json", id, sizeof id), -1);
    assert_int_equal(gs_conn_valid_kernel_id("abc-1.2_3"), 1);
    assert_int_equal(gs_conn_valid_kernel_id(""), 0);
    assert_int_equal(gs_conn_valid_kernel_id("a/b"), 0);
}

static void test_nb_server_file(void **state)
{
    (void)state;
    gs_nb_server_t s;
    char err[200], req[1024];
    /* notebook 6's nbserver-PID.json, listening everywhere */
    const char *nb6 = "{\"base_url\": \"/user/alice\", \"hostname\": \"0.0.0.0\", "
                      "\"notebook_dir\": \"/home/alice\", \"password\": false, \"pid\": 42, "
                      "\"port\": 8888, \"secure\": false, \"sock\": \"\", \"token\": \"t0k\", "
                      "\"url\": \"http://localhost:8888/user/alice/\"}";
    assert_int_equal(gs_nb_server_parse(nb6, strlen(nb6), &s, err, sizeof err), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(s.port, 8888);
    assert_string_equal(s.base_url, "/user/alice/");
    assert_int_equal(s.secure, 0);
    assert_true(gs_nb_sessions_request(&s, req, sizeof req) > 0);
    assert_string_equal(req, "GET /user/alice/api/sessions HTTP/1.0\r\nHost: 127.0.0.1:8888\r\n"
                             "Accept: application/json\r\nAuthorization: token t0k\r\n\r\n");
    /* a unix socket instead of a port; IPv6 */
    const char *sock = "{\"sock\": \"/run/user/1/nb.sock\", \"base_url\": \"/\", \"token\": \"\"}";
    assert_int_equal(gs_nb_server_parse(sock, strlen(sock), &s, err, sizeof err), 0);
    assert_string_equal(s.sock, "/run/user/1/nb.sock");
    const char *v6 = "{\"hostname\": \"::\", \"port\": 9, \"token\": \"x\"}";
    assert_int_equal(gs_nb_server_parse(v6, strlen(v6), &s, err, sizeof err), 0);
    assert_true(gs_nb_sessions_request(&s, req, sizeof req) > 0);
    assert_non_null(strstr(req, "Host: [::1]:9\r\n"));
    /* what cannot be used */
    const char *bad[] = {"[]", "{\"hostname\": \"localhost\"}",
                         "{\"port\": 1, \"token\": \"a\\r\\nX: y\"}",
                         "{\"port\": 1, \"base_url\": \"x y\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(gs_nb_server_parse(bad[i], strlen(bad[i]), &s, err, sizeof err), -1);
}

static void test_nb_sessions_answer(void **state)
{
    (void)state;
    char path[256], err[200];
    const char *ok =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
        "[{\"id\": \"s1\", \"path\": \"a.ipynb\", \"kernel\": {\"id\": \"k1\"}},"
        " {\"id\": \"s2\", \"path\": \"work/train.ipynb\", \"kernel\": {\"id\": \"k2\"}}]";
    assert_int_equal(gs_nb_sessions_find(ok, strlen(ok), "k2", path, sizeof path, err, sizeof err),
                     1);
    assert_string_equal(path, "work/train.ipynb");
    assert_int_equal(gs_nb_sessions_find(ok, strlen(ok), "k3", path, sizeof path, err, sizeof err),
                     0);
    assert_int_equal(gs_nb_sessions_find(ok, strlen(ok), "k2", path, 8, err, sizeof err), -2);
    const char *old = "HTTP/1.0 200 OK\r\n\r\n"
                      "[{\"notebook\": {\"path\": \"old.ipynb\"}, \"kernel\": {\"id\": \"k\"}}]";
    assert_int_equal(gs_nb_sessions_find(old, strlen(old), "k", path, sizeof path, err, sizeof err),
                     1);
    assert_string_equal(path, "old.ipynb");
    const char *forged = "HTTP/1.0 200 OK\r\n\r\n"
                         "[{\"path\": \"a\\nb.ipynb\", \"kernel\": {\"id\": \"k\"}}]";
    assert_int_equal(
        gs_nb_sessions_find(forged, strlen(forged), "k", path, sizeof path, err, sizeof err), -2);
    const char *denied = "HTTP/1.1 403 Forbidden\r\n\r\n{}";
    assert_int_equal(
        gs_nb_sessions_find(denied, strlen(denied), "k", path, sizeof path, err, sizeof err), -1);
    assert_non_null(strstr(err, "403"));
    const char *junk[] = {"", "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\n\r\n{\"a\": 1}",
                          "SSH-2.0"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++)
        assert_int_equal(
            gs_nb_sessions_find(junk[i], strlen(junk[i]), "k", path, sizeof path, err, sizeof err),
            -1);
}

static int cmdline(const char *args, size_t len, char *out)
{
    return gs_nb_from_cmdline(args, len, out, 256);
}

static void test_nb_from_cmdline(void **state)
{
    (void)state;
    char nb[256];
#define ARGS(s) s, sizeof s /* with the last NUL, as /proc/PID/cmdline */
    assert_int_equal(cmdline(ARGS("/usr/bin/python3\0-m\0nbconvert\0--execute\0"
                                  "--to\0notebook\0train.ipynb\0--output\0out.ipynb"),
                             nb),
                     1);
    assert_string_equal(nb, "train.ipynb");
    assert_int_equal(
        cmdline(ARGS("/usr/bin/python3\0/usr/local/bin/papermill\0in.ipynb\0out.ipynb"), nb), 1);
    assert_string_equal(nb, "in.ipynb");
    /* ambiguous, or none */
    assert_int_equal(cmdline(ARGS("jupyter-nbconvert\0--execute\0a.ipynb\0b.ipynb"), nb), 0);
    assert_int_equal(cmdline(ARGS("python3\0run.py"), nb), 0);
    assert_int_equal(cmdline(ARGS("train.ipynb"), nb), 0); /* argv[0] is the program */
    assert_int_equal(cmdline("x\0cut.ipynb", 9, nb), 0);   /* cut short: not NUL-terminated */
#undef ARGS
}

/* RFC 4231 test case 2, split over two "frames". */
static void test_hmac_vectors(void **state)
{
    (void)state;
    const void *frames[] = {"what do ya want ", "for nothing?"};
    size_t sizes[] = {16, 12};
    const unsigned char *key = (const unsigned char *)"Jefe";
    char hex[129];
    assert_int_equal(gs_hmac_sign(GS_HMAC_SHA256, key, 4, frames, sizes, 2, hex, sizeof hex), 0);
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA256, key, 4, frames, sizes, 2, hex, 64), 1);
    assert_int_equal(gs_hmac_sign(GS_HMAC_SHA512, key, 4, frames, sizes, 2, hex, sizeof hex), 0);
    assert_string_equal(hex, "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554"
                             "9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737");
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA512, key, 4, frames, sizes, 2, hex, 128), 1);
    /* Wrong key, one flipped digit, truncated, padded, not hex. */
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA512, (const unsigned char *)"Jeff", 4, frames, sizes,
                                    2, hex, 128),
                     0);
    hex[5] = hex[5] == '0' ? '1' : '0';
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA512, key, 4, frames, sizes, 2, hex, 128), 0);
    assert_int_equal(gs_hmac_sign(GS_HMAC_SHA256, key, 4, frames, sizes, 2, hex, sizeof hex), 0);
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA256, key, 4, frames, sizes, 2, hex, 63), 0);
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA256, key, 4, frames, sizes, 2, "", 0), 0);
    char bad[65];
    memset(bad, 'z', 64);
    bad[64] = 0;
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA256, key, 4, frames, sizes, 2, bad, 64), 0);
    /* An empty key: messages are not signed, anything goes. */
    assert_int_equal(gs_hmac_verify(GS_HMAC_SHA256, key, 0, frames, sizes, 2, "", 0), 1);
    assert_int_equal(gs_hmac_scheme_parse("hmac-sha256"), GS_HMAC_SHA256);
    assert_int_equal(gs_hmac_scheme_parse("hmac-sha1"), -1);
}

/* An IOPub message as ipykernel sends it; sig NULL: signed with key. */
typedef struct {
    const void *frames[8];
    size_t sizes[8];
    char sig[129];
} msg_t;

static const unsigned char KEY[] = "s3cret-key";

static void make(msg_t *m, const char *header, const char *parent, const char *content,
                 const char *forged_sig)
{
    static const char *topic = "kernel.abc.status", *delim = "<IDS|MSG>", *meta = "{}";
    const char *body[4] = {header, parent, meta, content};
    m->sig[0] = 0;
    m->frames[0] = topic;
    m->frames[1] = delim;
    m->frames[2] = m->sig;
    for (int i = 0; i < 4; i++)
        m->frames[3 + i] = body[i];
    for (int i = 0; i < 7; i++)
        m->sizes[i] = strlen(m->frames[i] ? m->frames[i] : "");
    if (forged_sig)
        snprintf(m->sig, sizeof m->sig, "%s", forged_sig);
    else
        gs_hmac_sign(GS_HMAC_SHA256, KEY, sizeof KEY - 1, m->frames + 3, m->sizes + 3, 4, m->sig,
                     sizeof m->sig);
    m->sizes[2] = strlen(m->sig);
}

#define STATUS_HDR  "{\"msg_id\":\"s1\",\"msg_type\":\"status\",\"session\":\"x\"}"
#define EXEC_PARENT "{\"msg_id\":\"run-42\",\"msg_type\":\"execute_request\"}"

static void test_iopub_cells(void **state)
{
    (void)state;
    gs_iopub_auth_t auth = {GS_HMAC_SHA256, KEY, sizeof KEY - 1};
    msg_t m;
    char id[GS_IOPUB_MSG_ID_MAX] = "";
    make(&m, STATUS_HDR, EXEC_PARENT, "{\"execution_state\":\"busy\"}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_CELL_BUSY);
    assert_string_equal(id, "run-42");
    make(&m, STATUS_HDR, EXEC_PARENT, "{\"execution_state\":\"idle\"}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_CELL_IDLE);
    /* Not a cell: another request's status, "starting", output, no parent. */
    make(&m, STATUS_HDR, "{\"msg_id\":\"k1\",\"msg_type\":\"kernel_info_request\"}",
         "{\"execution_state\":\"busy\"}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_IGNORE);
    make(&m, STATUS_HDR, "{}", "{\"execution_state\":\"starting\"}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_IGNORE);
    make(&m, "{\"msg_id\":\"o\",\"msg_type\":\"stream\"}", EXEC_PARENT,
         "{\"name\":\"stdout\",\"text\":\"hi\"}", "not-even-checked");
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_IGNORE);
}

static void test_iopub_forged_and_malformed(void **state)
{
    (void)state;
    gs_iopub_auth_t auth = {GS_HMAC_SHA256, KEY, sizeof KEY - 1};
    msg_t m;
    char id[GS_IOPUB_MSG_ID_MAX];
    /* Signed with another key. */
    make(&m, STATUS_HDR, EXEC_PARENT, "{\"execution_state\":\"idle\"}", NULL);
    gs_iopub_auth_t other = {GS_HMAC_SHA256, (const unsigned char *)"guess", 5};
    assert_int_equal(gs_iopub_classify(&other, m.frames, m.sizes, 7, id), GS_IOPUB_BAD_SIGNATURE);
    /* Signed content, then the content changed. */
    m.frames[6] = "{\"execution_state\":\"busy\"}";
    m.sizes[6] = strlen(m.frames[6]);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_BAD_SIGNATURE);
    /* No signature at all. */
    make(&m, STATUS_HDR, EXEC_PARENT, "{\"execution_state\":\"idle\"}", "");
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_BAD_SIGNATURE);
    /* ...which is right when the key is empty. */
    gs_iopub_auth_t none = {GS_HMAC_SHA256, KEY, 0};
    assert_int_equal(gs_iopub_classify(&none, m.frames, m.sizes, 7, id), GS_IOPUB_CELL_IDLE);
    /* No delimiter, too few frames, bad JSON. */
    make(&m, STATUS_HDR, EXEC_PARENT, "{\"execution_state\":\"idle\"}", NULL);
    m.frames[1] = "<IDS|MSH>";
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_MALFORMED);
    make(&m, STATUS_HDR, EXEC_PARENT, "{\"execution_state\":\"idle\"}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 6, id), GS_IOPUB_MALFORMED);
    make(&m, "{\"msg_type\":", EXEC_PARENT, "{}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_MALFORMED);
    make(&m, STATUS_HDR, "[]", "{\"execution_state\":\"idle\"}", NULL);
    assert_int_equal(gs_iopub_classify(&auth, m.frames, m.sizes, 7, id), GS_IOPUB_MALFORMED);
}

static int setup(void **state)
{
    (void)state;
    return unit_fixture_tmpdir(dir, sizeof dir, "launch-units");
}

static int teardown(void **state)
{
    (void)state;
    return unit_fixture_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conn_good),
        cmocka_unit_test(test_conn_ipc_and_wildcard),
        cmocka_unit_test(test_conn_errors),
        cmocka_unit_test(test_conn_file_from_argv),
        cmocka_unit_test(test_kernel_id_from_path),
        cmocka_unit_test(test_nb_server_file),
        cmocka_unit_test(test_nb_sessions_answer),
        cmocka_unit_test(test_nb_from_cmdline),
        cmocka_unit_test(test_hmac_vectors),
        cmocka_unit_test(test_iopub_cells),
        cmocka_unit_test(test_iopub_forged_and_malformed),
    };
    return cmocka_run_group_tests_name("launcher", tests, setup, teardown);
}
