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
 * SUBMIT wrappers pass the gate (hook_submit_enter: one atomic load when
 * the process holds its grants) around the real call.  The other classes
 * only count calls today; the burst statistics (SYNC: a burst ends) and
 * memory accounting (ALLOC/FREE) of later issues go where the comments say.
 */
#include "hook_internal.h"

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
        struct hook_thr *t_ = hook_self();                                                         \
        if (__builtin_expect(t_->nest != 0, 0))                                                    \
            HOOK_NESTED_CALL(abi, args);                                                           \
        hook_count(t_, HOOK_IDX_##abi);                                                            \
        t_->nest = 1;                                                                              \
        hook_submit_enter(t_, (stream), pt);                                                       \
        void *real_ = hook_real[HOOK_IDX_##abi];                                                   \
        CUresult r_ = real_ ? ((__typeof__(&abi))real_)args : CUDA_ERROR_NOT_FOUND;                \
        hook_submit_leave(t_);                                                                     \
        t_->nest = 0;                                                                              \
        return r_;                                                                                 \
    }

/* `after` is where later issues hook in: bursts (SYNC), memory (ALLOC/FREE). */
#define WRAP_PLAIN(abi, params, args, after)                                                       \
    HOOK_EXPORT CUresult abi params                                                                \
    {                                                                                              \
        struct hook_thr *t_ = hook_self();                                                         \
        if (__builtin_expect(t_->nest != 0, 0))                                                    \
            HOOK_NESTED_CALL(abi, args);                                                           \
        hook_ready();                                                                              \
        void *real_ = hook_real[HOOK_IDX_##abi];                                                   \
        if (!real_)                                                                                \
            return CUDA_ERROR_NOT_FOUND;                                                           \
        hook_count(t_, HOOK_IDX_##abi);                                                            \
        t_->nest = 1;                                                                              \
        CUresult r_ = ((__typeof__(&abi))real_)args;                                               \
        after;                                                                                     \
        t_->nest = 0;                                                                              \
        return r_;                                                                                 \
    }

#define WRAP_SYNC(abi, pt, stream, params, args)    WRAP_PLAIN(abi, params, args, (void)0)
#define WRAP_ALLOC(abi, pt, stream, params, args)   WRAP_PLAIN(abi, params, args, (void)0)
#define WRAP_FREE(abi, pt, stream, params, args)    WRAP_PLAIN(abi, params, args, (void)0)
#define WRAP_RESOLVE(abi, pt, stream, params, args) /* hook_resolve.c */
#define WRAP_OTHER(abi, pt, stream, params, args)   /* hook_ctx.c, hook_capture.c */

#define HOOK_FN(cls, abi, base, pt, stream, params, args)                                          \
    WRAP_##cls(abi, HOOK_PTV_##pt, stream, params, args)
#include "hook_table.def"
