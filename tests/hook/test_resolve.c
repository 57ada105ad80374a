/*
 * test_resolve.c - every way a program obtains a driver entry point yields
 * the hook's wrapper of exactly the ABI variant the driver would have given,
 * and a lookup the driver fails is not substituted.
 *
 * Runs with the hook preloaded on the simulated driver (see Makefile.am),
 * GPUSHARE_DISABLE=1 (no broker: resolution does not depend on the gate).
 * The list of interposed ABI names is read from libhook/hook_table.def, so
 * every entry is checked on every path:
 *   ELF binding (this program calls cuLaunchKernel, cuMemcpyHtoD (= _v2) and,
 *   from test_resolve_ptds.c compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM,
 *   the _ptsz/_ptds names), dlsym on dlopen("libcuda.so.1"), dlsym
 *   RTLD_DEFAULT, dlsym RTLD_NEXT from another library (libgsnext, which
 *   defines a cuLaunchKernel of its own that RTLD_NEXT must skip),
 *   cuGetProcAddress and cuGetProcAddress_v2 for every base name, version
 *   and stream flag, compared with what the real resolver returns, and the
 *   runtime's pattern: look up "cuGetProcAddress" itself, then everything
 *   through the pointer obtained.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "gpusim.h"
#include "test_resolve.h"

#define MAX_NAMES 512

static char *names[MAX_NAMES];
static int nnames;
static char hook_path[4096];
static void *libcuda;
static CUcontext ctx;
static CUfunction fn;

static long long (*hook_calls)(const char *);
static void *(*hook_real)(const char *);

/* ---- helpers ------------------------------------------------------------ */

static void load_table(void)
{
    FILE *f = fopen(HOOK_TABLE_DEF, "r");
    if (!f) {
        perror(HOOK_TABLE_DEF);
        exit(1);
    }
    char line[1024];
    while (fgets(line, sizeof line, f) && nnames < MAX_NAMES) {
        char *p = strstr(line, "HOOK_FN(");
        if (!p || strstr(line, "HOOK_FN(class"))
            continue;
        p = strchr(p, ',');
        if (!p)
            continue;
        p++;
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, ", ");
        names[nnames++] = strndup(p, n);
    }
    fclose(f);
}

/* Is p the hook's definition of `abi`? */
static int is_hook_fn(void *p, const char *abi)
{
    Dl_info di;
    if (!p || !dladdr(p, &di) || !di.dli_fname || !di.dli_sname)
        return 0;
    return strcmp(di.dli_fname, hook_path) == 0 && strcmp(di.dli_sname, abi) == 0 &&
           di.dli_saddr == p;
}

static const char *sym_name(void *p)
{
    Dl_info di;
    if (p && dladdr(p, &di) && di.dli_sname && di.dli_saddr == p)
        return di.dli_sname;
    return NULL;
}

static const char *sym_file(void *p)
{
    Dl_info di;
    if (p && dladdr(p, &di) && di.dli_fname)
        return di.dli_fname;
    return "";
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

static void launch_through(void *p, const char *abi)
{
    long long before = hook_calls(abi);
    CUresult r = ((launch_fn)p)(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    assert_int_equal(r, CUDA_SUCCESS);
    assert_int_equal(hook_calls(abi), before + 1);
}

/* ---- setup -------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    char seg[64];
    snprintf(seg, sizeof seg, "/gpushare-hooktest-%d", (int)getpid());
    setenv("GPUSHARE_SIM_NAME", seg, 1);
    load_table();
    if (nnames < 100) {
        fprintf(stderr, "read only %d names from %s\n", nnames, HOOK_TABLE_DEF);
        return -1;
    }
    hook_calls = (long long (*)(const char *))dlsym(RTLD_DEFAULT, "gpushare_hook_calls");
    hook_real = (void *(*)(const char *))dlsym(RTLD_DEFAULT, "gpushare_hook_real");
    if (!hook_calls || !hook_real) {
        fprintf(stderr, "the hook is not preloaded\n");
        return -1;
    }
    snprintf(hook_path, sizeof hook_path, "%s", sym_file((void *)hook_calls));
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    CUdevice dev;
    CUmodule mod;
    if (!libcuda || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != 0 ||
        cuModuleLoadData(&mod, "image") != CUDA_SUCCESS ||
        cuModuleGetFunction(&fn, mod, "resolve_test") != CUDA_SUCCESS)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gpusim_reset(NULL);
    return 0;
}

/* ---- ELF binding -------------------------------------------------------- */

static void test_elf_binding(void **state)
{
    (void)state;
    assert_true(is_hook_fn((void *)&cuLaunchKernel, "cuLaunchKernel"));
    assert_true(is_hook_fn((void *)&cuMemcpyHtoD, "cuMemcpyHtoD_v2"));
    assert_true(is_hook_fn((void *)&cuGetProcAddress, "cuGetProcAddress_v2"));
    launch_through((void *)&cuLaunchKernel, "cuLaunchKernel");

    long long before = hook_calls("cuMemcpyHtoD_v2");
    CUdeviceptr d;
    char buf[64] = "hello";
    assert_int_equal(cuMemAlloc(&d, sizeof buf), CUDA_SUCCESS);
    assert_int_equal(cuMemcpyHtoD(d, buf, sizeof buf), CUDA_SUCCESS);
    assert_int_equal(hook_calls("cuMemcpyHtoD_v2"), before + 1);
    assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
}

static void test_elf_binding_per_thread(void **state)
{
    (void)state;
    void *launch = ptds_launch_kernel_addr();
    assert_true(is_hook_fn(launch, "cuLaunchKernel_ptsz"));
    assert_true(is_hook_fn(ptds_memcpy_htod_addr(), "cuMemcpyHtoD_v2_ptds"));
    launch_through(launch, "cuLaunchKernel_ptsz");
}

/* ---- dlsym -------------------------------------------------------------- */

/* For every ABI name: the hook's wrapper when the driver has it, NULL (and
 * a dlerror) when it does not. */
static void check_dlsym_all(void *(*lookup)(const char *), const char *how)
{
    int substituted = 0;
    for (int i = 0; i < nnames; i++) {
        dlerror();
        void *p = lookup(names[i]);
        const char *err = dlerror();
        if (hook_real(names[i])) {
            if (!is_hook_fn(p, names[i]))
                fail_msg("%s(%s) = %p (%s in %s), expected the hook's wrapper", how, names[i], p,
                         sym_name(p), sym_file(p));
            if (err)
                fail_msg("%s(%s) succeeded but left dlerror \"%s\"", how, names[i], err);
            substituted++;
        } else {
            if (p)
                fail_msg("%s(%s) = %p (%s), expected NULL: the driver lacks it", how, names[i], p,
                         sym_file(p));
            if (!err)
                fail_msg("%s(%s) failed without a dlerror", how, names[i]);
        }
    }
    assert_true(substituted > 50);
}

static void *lookup_handle(const char *n)
{
    return dlsym(libcuda, n);
}

static void *lookup_default(const char *n)
{
    return dlsym(RTLD_DEFAULT, n);
}

static void test_dlsym_libcuda_handle(void **state)
{
    (void)state;
    check_dlsym_all(lookup_handle, "dlsym(libcuda)");
    launch_through(dlsym(libcuda, "cuLaunchKernel"), "cuLaunchKernel");
    launch_through(dlsym(libcuda, "cuLaunchKernel_ptsz"), "cuLaunchKernel_ptsz");
    /* the same file under another name is the same handle */
    void *h = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        assert_true(is_hook_fn(dlsym(h, "cuLaunchKernel"), "cuLaunchKernel"));
        dlclose(h);
    }
}

static void test_dlsym_default(void **state)
{
    (void)state;
    check_dlsym_all(lookup_default, "dlsym(RTLD_DEFAULT)");
    launch_through(dlsym(RTLD_DEFAULT, "cuLaunchKernel"), "cuLaunchKernel");
}

static void test_dlsym_next_from_library(void **state)
{
    (void)state;
    /* libgsnext defines cuLaunchKernel itself; RTLD_NEXT from it must find
     * the next definition (libcuda's, handed out as the hook's wrapper),
     * not its own, as the real dlsym called from the hook would. */
    void *own = gsnext_own_launch();
    void *p = gsnext_lookup_next("cuLaunchKernel");
    assert_ptr_not_equal(p, own);
    assert_true(is_hook_fn(p, "cuLaunchKernel"));
    launch_through(p, "cuLaunchKernel");
    check_dlsym_all(gsnext_lookup_next, "dlsym(RTLD_NEXT) from libgsnext");
    /* a name nobody after libgsnext defines */
    dlerror();
    assert_null(gsnext_lookup_next("gsnext_no_such_symbol"));
    assert_non_null(dlerror());
    /* ordinary symbols after it: libc's, also one that libgsnext defines too */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(libc);
    assert_ptr_equal(gsnext_lookup_next("strlen"), dlsym(libc, "strlen"));
    void *rel = gsnext_lookup_next("gnu_get_libc_release");
    assert_ptr_equal(rel, dlsym(libc, "gnu_get_libc_release"));
    assert_string_not_equal(((const char *(*)(void))rel)(), "gsnext");
    dlclose(libc);
}

static void test_dlsym_next_from_program(void **state)
{
    (void)state;
    /* after the program comes the preloaded hook itself */
    assert_true(is_hook_fn(dlsym(RTLD_NEXT, "cuLaunchKernel"), "cuLaunchKernel"));
}

static void test_dlsym_failures(void **state)
{
    (void)state;
    dlerror();
    assert_null(dlsym(libcuda, "cuNoSuchFunction"));
    assert_non_null(dlerror());
    assert_null(dlsym(RTLD_DEFAULT, "cuNoSuchFunction"));
    assert_non_null(dlerror());
    /* other symbols are untouched */
    assert_ptr_equal(dlsym(libcuda, "gpusim_is_simulated"), (void *)&gpusim_is_simulated);
    void *version = dlsym(libcuda, "cuDriverGetVersion");
    assert_non_null(version);
    assert_string_not_equal(sym_file(version), hook_path);
    /* cuInit is the hook's: placement comes before the driver starts */
    assert_true(is_hook_fn(dlsym(libcuda, "cuInit"), "cuInit"));
}

/* ---- cuGetProcAddress --------------------------------------------------- */

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);

static const int versions[] = {2000, 3020, 4000, 7000, 10000, 11030, 11060, 12000, 12050, 13000};
static const cuuint64_t flagsets[] = {CU_GET_PROC_ADDRESS_DEFAULT,
                                      CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
/* names the hook does not interpose: must come back untouched */
static const char *const others[] = {"cuInit",       "cuDeviceGet",   "cuStreamGetCaptureInfo",
                                     "cuMemGetInfo", "cuEventRecord", "cuNoSuchFunction"};

/* The base names: those of the table (ABI name without _ptsz/_ptds/_vN). */
static int base_of(const char *abi, char *out, size_t len)
{
    snprintf(out, len, "%s", abi);
    size_t n = strlen(out);
    if (n > 5 && (strcmp(out + n - 5, "_ptsz") == 0 || strcmp(out + n - 5, "_ptds") == 0))
        out[n -= 5] = 0;
    char *v = strrchr(out, '_');
    if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9')
        *v = 0;
    return 0;
}

/* Hook result h against real result r for the same query. */
static int driver_gave_hook; /* the driver's own table points into the hook */

static void compare(const char *how, const char *sym, int ver, cuuint64_t flags, CUresult rh,
                    CUresult rr, void *h, void *r, int *subst)
{
    if (rh != rr)
        fail_msg("%s(%s, %d, %llu): hook %d, driver %d", how, sym, ver, (unsigned long long)flags,
                 rh, rr);
    if (rr != CUDA_SUCCESS) {
        if (h)
            fail_msg("%s(%s, %d): failed but pfn = %p", how, sym, ver, h);
        return;
    }
    const char *real_name = sym_name(r);
    if (real_name && strcmp(sym_file(r), hook_path) == 0) {
        /* A driver whose own table points at the (interposed) exported
         * names hands out the hook's wrapper itself: must pass unchanged. */
        if (h != r || !is_hook_fn(h, real_name))
            fail_msg("%s(%s, %d): driver gave the hook's %s, hook changed it to %p", how, sym, ver,
                     real_name, h);
        driver_gave_hook++;
        (*subst)++;
    } else if (real_name && hook_real(real_name) == r) {
        if (!is_hook_fn(h, real_name))
            fail_msg("%s(%s, %d, %llu): driver gave %s, hook gave %p (%s in %s)", how, sym, ver,
                     (unsigned long long)flags, real_name, h, sym_name(h), sym_file(h));
        (*subst)++;
    } else if (h != r)
        fail_msg("%s(%s, %d): driver gave %p (%s), not interposed, but the hook changed it", how,
                 sym, ver, r, real_name);
}

static void check_procaddr(int legacy_abi)
{
    gpa2_fn real2 = (gpa2_fn)hook_real("cuGetProcAddress_v2");
    gpa1_fn real1 = (gpa1_fn)hook_real("cuGetProcAddress");
    assert_non_null(real2);
    assert_non_null(real1);
    int subst = 0;
    driver_gave_hook = 0;
    for (int i = 0; i < nnames + (int)(sizeof others / sizeof others[0]); i++) {
        char sym[128];
        if (i < nnames)
            base_of(names[i], sym, sizeof sym);
        else
            snprintf(sym, sizeof sym, "%s", others[i - nnames]);
        for (size_t v = 0; v < sizeof versions / sizeof versions[0]; v++)
            for (size_t f = 0; f < sizeof flagsets / sizeof flagsets[0]; f++) {
                void *h = (void *)1, *r = (void *)1;
                CUresult rh, rr;
                if (legacy_abi) {
                    rh = cuGetProcAddress_legacy(sym, &h, versions[v], flagsets[f]);
                    rr = real1(sym, &r, versions[v], flagsets[f]);
                    compare("cuGetProcAddress", sym, versions[v], flagsets[f], rh, rr, h, r,
                            &subst);
                } else {
                    CUdriverProcAddressQueryResult sh = -1, sr = -1;
                    rh = cuGetProcAddress(sym, &h, versions[v], flagsets[f], &sh);
                    rr = real2(sym, &r, versions[v], flagsets[f], &sr);
                    compare("cuGetProcAddress_v2", sym, versions[v], flagsets[f], rh, rr, h, r,
                            &subst);
                    if (sh != sr)
                        fail_msg("cuGetProcAddress_v2(%s, %d): status %d, driver %d", sym,
                                 versions[v], (int)sh, (int)sr);
                }
            }
    }
    if (driver_gave_hook)
        print_message("note: the simulated driver's cuGetProcAddress returned the hook's own "
                      "wrappers %d times (it is not linked with -Wl,-Bsymbolic), so those "
                      "lookups did not exercise substitution by identity\n",
                      driver_gave_hook);
    assert_true(subst > 100);
}

static void test_procaddr_v2_every_variant(void **state)
{
    (void)state;
    check_procaddr(0);
}

static void test_procaddr_legacy_every_variant(void **state)
{
    (void)state;
    check_procaddr(1);
}

static void test_procaddr_stream_flags(void **state)
{
    (void)state;
    void *p;
    CUdriverProcAddressQueryResult st;
    assert_int_equal(cuGetProcAddress("cuLaunchKernel", &p, 13000,
                                      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                     CUDA_SUCCESS);
    assert_true(is_hook_fn(p, "cuLaunchKernel_ptsz"));
    launch_through(p, "cuLaunchKernel_ptsz");
    assert_int_equal(
        cuGetProcAddress("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
        CUDA_SUCCESS);
    assert_true(is_hook_fn(p, "cuLaunchKernel"));
    assert_int_equal(cuGetProcAddress("cuMemcpyHtoD", &p, 13000,
                                      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                     CUDA_SUCCESS);
    assert_true(is_hook_fn(p, "cuMemcpyHtoD_v2_ptds"));
    assert_int_equal(cuGetProcAddress("cuMemcpyHtoD", &p, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
                     CUDA_SUCCESS);
    assert_true(is_hook_fn(p, "cuMemcpyHtoD"));
}

static void test_procaddr_self_lookup(void **state)
{
    (void)state;
    /* The CUDA 13 runtime: ask for cuGetProcAddress, then use only that. */
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    assert_int_equal(cuGetProcAddress("cuGetProcAddress", &p, 13000, 0, &st), CUDA_SUCCESS);
    assert_true(is_hook_fn(p, "cuGetProcAddress_v2"));
    gpa2_fn gpa = (gpa2_fn)p;
    void *q = NULL;
    assert_int_equal(gpa("cuGetProcAddress", &q, 13000, 0, &st), CUDA_SUCCESS);
    assert_ptr_equal(q, p);
    void *launch = NULL;
    assert_int_equal(
        gpa("cuLaunchKernel", &launch, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
        CUDA_SUCCESS);
    assert_true(is_hook_fn(launch, "cuLaunchKernel_ptsz"));
    launch_through(launch, "cuLaunchKernel_ptsz");
    long long before = hook_calls("cuGetProcAddress_v2");
    assert_int_equal(gpa("cuLaunchKernel", &launch, 13000, 0, &st), CUDA_SUCCESS);
    assert_int_equal(hook_calls("cuGetProcAddress_v2"), before + 1);

    /* An older runtime gets the 4-argument ABI, and the same through it. */
    assert_int_equal(cuGetProcAddress("cuGetProcAddress", &p, 11030, 0, &st), CUDA_SUCCESS);
    assert_true(is_hook_fn(p, "cuGetProcAddress"));
    gpa1_fn gpa1 = (gpa1_fn)p;
    assert_int_equal(gpa1("cuGetProcAddress", &q, 11030, 0), CUDA_SUCCESS);
    assert_ptr_equal(q, p);
    assert_int_equal(gpa1("cuLaunchKernel", &launch, 11030, 0), CUDA_SUCCESS);
    assert_true(is_hook_fn(launch, "cuLaunchKernel"));
    launch_through(launch, "cuLaunchKernel");
}

static void test_procaddr_failures(void **state)
{
    (void)state;
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st = -1;
    assert_int_equal(cuGetProcAddress("cuNoSuchFunction", &p, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    p = (void *)1;
    assert_int_equal(cuGetProcAddress("cuLaunchKernelEx", &p, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_null(p);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elf_binding),
        cmocka_unit_test(test_elf_binding_per_thread),
        cmocka_unit_test(test_dlsym_libcuda_handle),
        cmocka_unit_test(test_dlsym_default),
        cmocka_unit_test(test_dlsym_next_from_library),
        cmocka_unit_test(test_dlsym_next_from_program),
        cmocka_unit_test(test_dlsym_failures),
        cmocka_unit_test(test_procaddr_v2_every_variant),
        cmocka_unit_test(test_procaddr_legacy_every_variant),
        cmocka_unit_test(test_procaddr_stream_flags),
        cmocka_unit_test(test_procaddr_self_lookup),
        cmocka_unit_test(test_procaddr_failures),
    };
    return cmocka_run_group_tests_name("hook_resolve", tests, setup, teardown);
}
