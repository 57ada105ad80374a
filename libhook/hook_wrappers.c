/*
 * hook_wrappers.c - the exported wrappers of every SUBMIT, SYNC, ALLOC and
 * FREE entry point, generated from hook_table.def.
 *
 * Each wrapper is a definition of the ABI name cuda.h declares (under
 * __CUDA_API_VERSION_INTERNAL), so its parameter list is checked against
 * the real prototype.  A call made while the thread is already inside the
 * hook (the driver calling its own exported functions, or the hook's own
 * threads) goes straight to the driver.
 *
 * SUBMIT wrappers pass the gate (hook_submit.h: one atomic load when
 * the process holds its grants) around the real call, and keep the burst
 * flag up to date (hook_burst.c).  Every other wrapper first waits while
 * the process is frozen for a checkpoint (hook_submit_unfrozen: its driver
 * calls would block where the hook cannot ask for the GPU), and the LOAD
 * wrappers (modules, libraries) do nothing else.  SYNC wrappers only count calls: bursts
 * are measured by the monitor's own events, not by the program's
 * synchronisations.  The accounted ALLOC/FREE entry points and legacy IPC
 * (emulated for the swap tier's memory) are written out in hook_mem_wrap.c;
 * the rest (arrays) only count calls.
 */
#include "hook_init.h"
#include "hook_real.h"
#include "hook_submit.h"
#include "hook_thread.h"

#define HOOK_CONFIG_STREAM(cfg)    ((cfg) ? (cfg)->hStream : NULL)
#define HOOK_MULTI_STREAM(list, n) ((list) && (n) ? (list)[0].hStream : NULL)
#define HOOK_PTV_PT                1
#define HOOK_PTV_LG                0

#define HOOK_NESTED_CALL(abi, args)                                                                \
    do {                                                                                           \
        void *r0_ = hook_real_get(HOOK_IDX_##abi);                                                 \
        return r0_ ? ((__typeof__(&abi))r0_)args : CUDA_ERROR_NOT_FOUND;                           \
    } while (0)

#define WRAP_SUBMIT(abi, pt, stream, params, args)                                                 \
    HOOK_EXPORT CUresult abi params                                                                \
    {                                                                                              \
        struct hook_thr *t_ = hook_thread_self();                                                  \
        if (__builtin_expect(t_->nest != 0, 0))                                                    \
            HOOK_NESTED_CALL(abi, args);                                                           \
        t_->nest = 1;                                                                              \
        if (__builtin_expect(hook_submit_enter(t_, (stream), pt) != HOOK_GATE_PASS, 1))            \
            hook_thread_count(t_, HOOK_IDX_##abi);                                                 \
        void *real_ = hook_real[HOOK_IDX_##abi];                                                   \
        CUresult r_ = real_ ? ((__typeof__(&abi))real_)args : CUDA_ERROR_NOT_FOUND;                \
        hook_submit_leave(t_);                                                                     \
        t_->nest = 0;                                                                              \
        return r_;                                                                                 \
    }

#define WRAP_PLAIN(abi, params, args, after)                                                       \
    HOOK_EXPORT CUresult abi params                                                                \
    {                                                                                              \
        struct hook_thr *t_ = hook_thread_self();                                                  \
        if (__builtin_expect(t_->nest != 0, 0))                                                    \
            HOOK_NESTED_CALL(abi, args);                                                           \
        hook_init();                                                                               \
        void *real_ = hook_real[HOOK_IDX_##abi];                                                   \
        if (!real_)                                                                                \
            return CUDA_ERROR_NOT_FOUND;                                                           \
        hook_submit_unfrozen();                                                                    \
        hook_thread_count(t_, HOOK_IDX_##abi);                                                     \
        t_->nest = 1;                                                                              \
        CUresult r_ = ((__typeof__(&abi))real_)args;                                               \
        after;                                                                                     \
        t_->nest = 0;                                                                              \
        return r_;                                                                                 \
    }

/* The memory entry points hook_mem_wrap.c defines itself (accounting, limit,
 * managed mode, make_room); the generator skips them.  HOOK_OWN(abi) is 1
 * for the names listed here, 0 for any other (the "~, 1" makes a second
 * macro argument appear only for them). */
#define HOOK_OWN_cuIpcOpenMemHandle           ~, 1
#define HOOK_OWN_cuIpcOpenMemHandle_v2        ~, 1
#define HOOK_OWN_cuIpcCloseMemHandle          ~, 1
#define HOOK_OWN_cuMemAlloc                   ~, 1
#define HOOK_OWN_cuMemAlloc_v2                ~, 1
#define HOOK_OWN_cuMemAllocAsync              ~, 1
#define HOOK_OWN_cuMemAllocAsync_ptsz         ~, 1
#define HOOK_OWN_cuMemAllocFromPoolAsync      ~, 1
#define HOOK_OWN_cuMemAllocFromPoolAsync_ptsz ~, 1
#define HOOK_OWN_cuMemAllocManaged            ~, 1
#define HOOK_OWN_cuMemAllocPitch              ~, 1
#define HOOK_OWN_cuMemAllocPitch_v2           ~, 1
#define HOOK_OWN_cuMemCreate                  ~, 1
#define HOOK_OWN_cuMemMap                     ~, 1
#define HOOK_OWN_cuMemFree                    ~, 1
#define HOOK_OWN_cuMemFree_v2                 ~, 1
#define HOOK_OWN_cuMemFreeAsync               ~, 1
#define HOOK_OWN_cuMemFreeAsync_ptsz          ~, 1
#define HOOK_OWN_cuMemRelease                 ~, 1
#define HOOK_OWN_cuMemUnmap                   ~, 1
#define HOOK_SECOND_(a, b, ...)               b
#define HOOK_SECOND(...)                      HOOK_SECOND_(__VA_ARGS__)
#define HOOK_OWN(abi)                         HOOK_SECOND(HOOK_OWN_##abi, 0, ~)
#define HOOK_CAT_(a, b)                       a##b
#define HOOK_CAT(a, b)                        HOOK_CAT_(a, b)
#define HOOK_UNLESS_0(...)                    __VA_ARGS__
#define HOOK_UNLESS_1(...)
#define WRAP_MEM(abi, params, args)                                                                \
    HOOK_CAT(HOOK_UNLESS_, HOOK_OWN(abi))(WRAP_PLAIN(abi, params, args, (void)0))

#define WRAP_SYNC(abi, pt, stream, params, args)    WRAP_PLAIN(abi, params, args, (void)0)
#define WRAP_LOAD(abi, pt, stream, params, args)    WRAP_PLAIN(abi, params, args, (void)0)
#define WRAP_ALLOC(abi, pt, stream, params, args)   WRAP_MEM(abi, params, args)
#define WRAP_FREE(abi, pt, stream, params, args)    WRAP_MEM(abi, params, args)
#define WRAP_RESOLVE(abi, pt, stream, params, args) /* hook_resolve.c */
#define WRAP_OTHER(abi, pt, stream, params, args)   /* hook_ctx.c, hook_capture_wrap.c */

#define HOOK_FN(cls, abi, base, pt, stream, params, args)                                          \
    WRAP_##cls(abi, HOOK_PTV_##pt, stream, params, args)
#include "hook_table.def"
