/*
 * hook_wrap.h - how every hand-written wrapper begins and ends (the
 * generated ones are hook_wrappers.c).
 *
 * A call made while the thread is already inside the hook (the driver
 * calling its own exported names, the hook's own threads) goes straight to
 * the real function, as does one while `pass` holds; otherwise the call
 * waits while the process is frozen for a checkpoint (hook_submit_unfrozen),
 * is counted and the thread's depth raised until HOOK_WRAP_LEAVE.  Declares
 * t_ (the thread's record) and real_ (the real function, typed).
 */
#ifndef GS_HOOK_WRAP_H
#define GS_HOOK_WRAP_H

#include "hook_init.h"
#include "hook_real.h"
#include "hook_submit.h"
#include "hook_thread.h"

#define HOOK_WRAP_ENTER_UNLESS(abi, args, pass)                                                    \
    struct hook_thr *t_ = hook_thread_self();                                                      \
    if (!t_->nest)                                                                                 \
        hook_init();                                                                               \
    __typeof__(&abi) real_ = HOOK_REAL_FN(abi);                                                    \
    if (!real_)                                                                                    \
        return CUDA_ERROR_NOT_FOUND;                                                               \
    if (t_->nest || (pass))                                                                        \
        return real_ args;                                                                         \
    hook_submit_unfrozen();                                                                        \
    hook_thread_count(t_, HOOK_IDX_##abi);                                                         \
    t_->nest++

#define HOOK_WRAP_ENTER(abi, args) HOOK_WRAP_ENTER_UNLESS(abi, args, 0)

#define HOOK_WRAP_LEAVE(r)                                                                         \
    do {                                                                                           \
        t_->nest--;                                                                                \
        return (r);                                                                                \
    } while (0)

#endif
