/*
 * hook_resolve.c - the two ways a program obtains entry points at run time:
 * dlsym and cuGetProcAddress.  (The third, ELF binding, needs nothing: the
 * hook is preloaded and exports the ABI names.)
 *
 * Both substitute by identity: the real resolver runs first, and only when
 * it returns exactly the real libcuda address of one of the table's ABI
 * names is that replaced by the hook's wrapper of the same ABI name.  So the
 * version the caller asked for (cudaVersion), the per-thread-default-stream
 * flag (_ptsz/_ptds) and failures are the driver's answer, unchanged.  When
 * asked for "cuGetProcAddress" itself the real one returns itself, and the
 * program gets the hook's wrapper of that variant: PyTorch's CUDA 13 runtime
 * resolves everything through the pointer it gets that way.
 *
 * dlsym(RTLD_NEXT, ...) is relative to the caller.  For names the hook does
 * not interpose the real dlsym is reached by a tail call, so it sees the
 * caller's return address and answers exactly as without the hook.  For the
 * table's names the answer must be post-processed, so the hook finds
 * the caller's object with __builtin_return_address(0) and dladdr1
 * (RTLD_DL_LINKMAP), then walks the link map after it and takes the first
 * object that defines the name (dlopen RTLD_NOLOAD of each, dlsym, dladdr1
 * to check where the symbol lives).  That is the load order, which for
 * objects loaded at start-up is the global search order RTLD_NEXT uses;
 * only public glibc interfaces are involved.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "hook_cuda.h"
#include "hook_init.h"
#include "hook_real.h"
#include "hook_table.h"
#include "hook_thread.h"
#include "hook_wrap.h"
#include "log.h"

/* The hook's own definition of every table entry (hook_wrappers.c,
 * hook_ctx.c, hook_capture_wrap.c, hook_mem_wrap.c and this file). */
static void *const wrapper[HOOK_N] = {
#define HOOK_FN(cls, abi, base, pt, stream, params, args) (void *)&abi,
#include "hook_table.def"
};

/* p is what the real resolver returned for `name`; the hook's wrapper when p
 * is the real address of an ABI variant of that name. */
static void *substitute(const char *name, void *p, int want_pt)
{
    if (!p || !name)
        return p;
    size_t first, n = hook_table_find_base(name, &first);
    if (n == 0) {
        int idx = hook_table_find_abi(name); /* asked by ABI name: look at its base's variants */
        if (idx < 0)
            return p;
        n = hook_table_find_base(hook_table[idx].base, &first);
    }
    const int *by_base = hook_table_by_base();
    int match = -1;
    for (size_t i = first; i < first + n; i++) {
        int idx = by_base[i];
        if (hook_real[idx] != p)
            continue;
        /* Two ABI names at one address: prefer the one whose stream
         * semantics the caller asked for. */
        if (match < 0 || hook_table[idx].per_thread == want_pt)
            match = idx;
    }
    if (match < 0) {
        gs_debug("%s resolved to %p, which is no variant the hook knows: passed through", name, p);
        return p;
    }
    return wrapper[match];
}

/* ---- cuGetProcAddress --------------------------------------------------- */

static int flags_pt(cuuint64_t flags)
{
    return (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) &&
           !(flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM);
}

/* Both ABIs: the real resolver's answer, with the hook's wrapper in place
 * of the real function. */
#define GET_PROC_ADDRESS(abi, args)                                                                \
    HOOK_WRAP_ENTER(abi, args);                                                                    \
    CUresult r = real_ args;                                                                       \
    if (r == CUDA_SUCCESS && pfn && *pfn)                                                          \
        *pfn = substitute(symbol, *pfn, flags_pt(flags));                                          \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    GET_PROC_ADDRESS(cuGetProcAddress_v2, (symbol, pfn, cudaVersion, flags, symbolStatus));
}

HOOK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
    GET_PROC_ADDRESS(cuGetProcAddress, (symbol, pfn, cudaVersion, flags));
}

/* ---- dlsym -------------------------------------------------------------- */

HOOK_NO_SANITIZE static int maybe_ours(const char *name)
{
    return name && name[0] == 'c' && name[1] == 'u' && hook_table_find_abi(name) >= 0;
}

/* A failed lookup leaves an error for dlerror(); the hook's own successful
 * dl calls would have cleared it, so make one that fails the same way. */
static void *not_found(hook_dlsym_fn real, const char *name)
{
    void *h = hook_real_libcuda();
    if (!h || real(h, name))
        (void)dlvsym(RTLD_DEFAULT, name, "GPUSHARE_NOT_FOUND");
    return NULL;
}

/* What the real dlsym found for an ABI name of the table. */
static void *substitute_dl(hook_dlsym_fn real, const char *name, void *p)
{
    if (!p)
        return p;
    int idx = hook_table_find_abi(name);
    hook_init();
    if (p == wrapper[idx] && !hook_real[idx])
        return not_found(real, name); /* only the hook's own export: libcuda lacks it */
    if (p == hook_real[idx])
        return wrapper[idx];
    return p;
}

static void *dlsym_next(hook_dlsym_fn real, const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return real(RTLD_NEXT, name); /* unknown caller: relative to the hook */
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        if (!l->l_name || !l->l_name[0])
            continue;
        void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue;
        void *p = real(h, name);
        dlclose(h);
        struct link_map *where = NULL;
        Dl_info pi;
        if (p && dladdr1(p, &pi, (void **)&where, RTLD_DL_LINKMAP) && where == l) {
            (void)dlerror(); /* the misses on the way are not the caller's errors */
            return p;
        }
    }
    (void)dlvsym(RTLD_DEFAULT, name, "GPUSHARE_RTLD_NEXT_NOT_FOUND"); /* for dlerror() */
    return NULL;
}

/* The dlsym the program calls.  Names the hook does not interpose go
 * straight to the real dlsym by a jump, not a call: glibc's dlsym takes the
 * caller for RTLD_NEXT from its own return address, which a jump leaves
 * pointing at our caller.  So every other RTLD_NEXT lookup in the process
 * (sanitizers, malloc interposers, profilers) keeps exact glibc semantics
 * and costs nothing.  A compiler may not turn a C call into a jump (it does
 * not in sanitizer builds), hence the few lines of assembly: dlsym asks
 * hook_resolve_dlsym_route() where to go and jumps there with its
 * arguments and return address untouched. */
void *hook_resolve_dlsym_ours(void *handle, const char *name);
void *hook_resolve_dlsym_route(void *handle, const char *name);

__attribute__((noinline)) void *hook_resolve_dlsym_ours(void *handle, const char *name)
{
    hook_dlsym_fn real = hook_real_dlsym();
    /* reached by a jump from dlsym: our return address is the caller's */
    void *p = handle == RTLD_NEXT ? dlsym_next(real, __builtin_return_address(0), name)
                                  : real(handle, name);
    return substitute_dl(real, name, p);
}

HOOK_NO_SANITIZE void *hook_resolve_dlsym_route(void *handle, const char *name)
{
    (void)handle;
    hook_dlsym_fn real = hook_real_dlsym();
    if (!real || !maybe_ours(name))
        return (void *)real;
    return (void *)hook_resolve_dlsym_ours;
}

#if defined(__CET__)
#define HOOK_ENDBR "endbr64\n"
#else
#define HOOK_ENDBR ""
#endif

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n" HOOK_ENDBR "    push %rdi\n"
        "    push %rsi\n"
        "    sub $8, %rsp\n" /* 16-byte alignment for the call */
        "    call hook_resolve_dlsym_route\n"
        "    add $8, %rsp\n"
        "    pop %rsi\n"
        "    pop %rdi\n"
        "    test %rax, %rax\n"
        "    jz 1f\n"
        "    jmp *%rax\n"
        "1:  ret\n" /* no real dlsym at all: NULL */
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "    stp x29, x30, [sp, #-32]!\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    bl hook_resolve_dlsym_route\n"
        "    mov x16, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n"
        "    cbz x16, 1f\n"
        "    br x16\n"
        "1:  mov x0, #0\n"
        "    ret\n"
        ".size dlsym, .-dlsym\n");
#else
/* Elsewhere: C, relying on the compiler's sibling-call optimisation. */
HOOK_EXPORT __attribute__((optimize("optimize-sibling-calls"))) void *dlsym(void *handle,
                                                                            const char *name)
{
    hook_dlsym_fn f = (hook_dlsym_fn)hook_resolve_dlsym_route(handle, name);
    return f ? f(handle, name) : NULL;
}
#endif
