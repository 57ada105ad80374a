/*
 * real_driver_check.c - the hook against a real NVIDIA driver: a manual
 * check, not built or run by make check (CI has no GPU).  On a GPU machine:
 *
 *   cc -I$CUDA/include tests/hook/real_driver_check.c -o rdc -ldl
 *   cd libhook && LD_PRELOAD=$PWD/.libs/libgpushare-hook.so GPUSHARE_DISABLE=1 ../rdc
 *
 * (run from a directory holding hook_table.def).  It checks dlsym on the
 * libcuda handle for every ABI name of the table, compares, for every base
 * name x CUDA version x stream flag, what the hook's cuGetProcAddress_v2
 * hands out with what the driver's returns (the wrapper of exactly the
 * variant the driver chose), then resolves cuGetProcAddress through itself
 * as the CUDA 13 runtime does and launches a PTX kernel through that.
 * Seen on an H200, driver 580 (CUDA 13.0): 223/223 dlsym substitutions,
 * 1395/1395 cuGetProcAddress results substituted, 0 wrong.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

static char *names[512];
static int nnames;

static const char *symname(void *p, const char **file)
{
    Dl_info di;
    if (p && dladdr(p, &di)) {
        *file = di.dli_fname;
        return di.dli_saddr == p ? di.dli_sname : NULL;
    }
    *file = "";
    return NULL;
}

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry k() { ret; }\n";

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    FILE *f = fopen("hook_table.def", "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "HOOK_FN(");
        if (!p || strstr(line, "HOOK_FN(class"))
            continue;
        p = strchr(p, ',') + 2;
        names[nnames++] = strndup(p, strcspn(p, ", "));
    }
    void *(*hreal)(const char *) = dlsym(RTLD_DEFAULT, "gpushare_hook_real");
    long long (*hcalls)(const char *) = dlsym(RTLD_DEFAULT, "gpushare_hook_calls");
    if (!hreal) {
        printf("hook not preloaded\n");
        return 1;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    gpa2_fn hook_gpa = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    gpa2_fn real_gpa = (gpa2_fn)hreal("cuGetProcAddress_v2");
    const char *file;
    const char *sn = symname((void *)hook_gpa, &file);
    printf("dlsym(libcuda, cuGetProcAddress_v2) -> %s in %s\n", sn, file);
    CUresult (*init)(unsigned) = dlsym(lib, "cuInit");
    printf("cuInit: %d\n", init(0));
    int driver = 0;
    CUresult (*dv)(int *) = dlsym(lib, "cuDriverGetVersion");
    dv(&driver);
    printf("driver version %d\n", driver);

    /* dlsym on the handle */
    int dl_sub = 0, dl_missing = 0, dl_bad = 0;
    for (int i = 0; i < nnames; i++) {
        void *p = dlsym(lib, names[i]);
        const char *n = symname(p, &file);
        if (!hreal(names[i])) {
            dl_missing++;
            if (p)
                dl_bad++;
        } else if (n && strcmp(n, names[i]) == 0 && strstr(file, "gpushare"))
            dl_sub++;
        else
            dl_bad++;
    }
    printf("dlsym: %d substituted, %d absent from this driver, %d wrong\n", dl_sub, dl_missing,
           dl_bad);

    /* cuGetProcAddress: identity */
    static const int versions[] = {11030, 12000, 12050, 12080, 13000};
    static const cuuint64_t flagsets[] = {0, 1, 2};
    int same_addr = 0, subst = 0, passed = 0, failed = 0, bad = 0;
    for (int i = 0; i < nnames; i++) {
        char b[128];
        snprintf(b, sizeof b, "%s", names[i]);
        size_t n = strlen(b);
        if (n > 5 && (!strcmp(b + n - 5, "_ptsz") || !strcmp(b + n - 5, "_ptds")))
            b[n -= 5] = 0;
        char *v = strrchr(b, '_');
        if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9')
            *v = 0;
        if (i > 0 && strncmp(names[i - 1], b, strlen(b)) == 0 &&
            (names[i - 1][strlen(b)] == 0 || names[i - 1][strlen(b)] == '_'))
            continue; /* same base as the previous */
        for (size_t vi = 0; vi < 5; vi++)
            for (size_t fi = 0; fi < 3; fi++) {
                void *h = NULL, *r = NULL;
                CUdriverProcAddressQueryResult sh, sr;
                CUresult rh = hook_gpa(b, &h, versions[vi], flagsets[fi], &sh);
                CUresult rr = real_gpa(b, &r, versions[vi], flagsets[fi], &sr);
                if (rh != rr) {
                    bad++;
                    continue;
                }
                if (rr != CUDA_SUCCESS) {
                    failed++;
                    continue;
                }
                const char *rfile, *hfile;
                const char *rn = symname(r, &rfile);
                const char *hn = symname(h, &hfile);
                if (rn && hreal(rn) == r) {
                    same_addr++;
                    if (hn && !strcmp(hn, rn) && strstr(hfile, "gpushare"))
                        subst++;
                    else
                        bad++;
                } else {
                    passed++; /* includes success with a NULL pointer (version too old) */
                    if (h != r) {
                        bad++;
                        printf("  %s v%d f%d: driver %p (%s in %s), hook %p\n", b, versions[vi],
                               (int)flagsets[fi], r, rn ? rn : "?", rfile, h);
                    }
                }
            }
    }
    printf("cuGetProcAddress_v2: %d results are exported ABI addresses (%d substituted), %d "
           "passed through, %d lookups failed alike, %d wrong\n",
           same_addr, subst, passed, failed, bad);

    /* The runtime's pattern, then a real launch through it */
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    hook_gpa("cuGetProcAddress", &p, 13000, 0, &st);
    sn = symname(p, &file);
    printf("cuGetProcAddress(\"cuGetProcAddress\") -> %s in %s\n", sn, file);
    gpa2_fn gpa = (gpa2_fn)p;
    CUresult (*devget)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*setcur)(CUcontext);
    CUresult (*modload)(CUmodule *, const void *);
    CUresult (*getfn)(CUfunction *, CUmodule, const char *);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*sync)(void);
    gpa("cuDeviceGet", (void **)&devget, 13000, 0, &st);
    gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 13000, 0, &st);
    gpa("cuCtxSetCurrent", (void **)&setcur, 13000, 0, &st);
    gpa("cuModuleLoadData", (void **)&modload, 13000, 0, &st);
    gpa("cuModuleGetFunction", (void **)&getfn, 13000, 0, &st);
    gpa("cuLaunchKernel", (void **)&launch, 13000, 2, &st);
    gpa("cuCtxSynchronize", (void **)&sync, 12000, 0, &st); /* 13000 gives the _v2(ctx) ABI */
    printf("cuLaunchKernel (ptds) -> %s\n", symname((void *)launch, &file));
    CUdevice d;
    CUcontext c;
    CUmodule m;
    CUfunction k;
    CUresult r = devget(&d, 0);
    if (!r)
        r = retain(&c, d);
    if (!r)
        r = setcur(c);
    if (!r)
        r = modload(&m, ptx);
    if (!r)
        r = getfn(&k, m, "k");
    printf("setup: %d\n", r);
    int nl = 0;
    for (int i = 0; i < 1000 && !r; i++, nl++)
        r = launch(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    printf("launches done: %d, last result %d\n", nl, r);
    if (!r)
        r = sync();
    printf("1000 launches: %d; hook counted cuLaunchKernel_ptsz=%lld cuCtxSynchronize=%lld\n", r,
           hcalls("cuLaunchKernel_ptsz"), hcalls("cuCtxSynchronize"));
    return 0;
}
