/*
 * hook_init.c - libgpushare-hook.so's life: lazy initialisation and the
 * release at exit.
 *
 * The library runs inside programs that may never touch a GPU, so almost
 * nothing happens at load time: no thread, no CUDA call; only the first
 * process of a session asks the broker where it runs (hook_place.c, before
 * main, for programs that read the environment when they start).  The first
 * interposed call runs hook_init_once() (pthread_once), which reads the
 * environment and finds the real driver; the broker connection starts only
 * when the program creates a context (hook_client_touch).  The destructor
 * gives held grants back (reason exit) with a bounded wait, and never calls
 * CUDA: libcuda may already be finalised by then.
 */
#include "hook_init.h"

#include <pthread.h>

#include "hook_client.h"
#include "hook_config.h"
#include "hook_fork.h"
#include "hook_gate.h"
#include "hook_real.h"
#include "hook_thread.h"
#include "log.h"

_Atomic int hook_init_done;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void do_init(void)
{
    /* Anything the driver's constructors call back into goes straight
     * through while this thread initialises. */
    struct hook_thr *t = hook_thread_self();
    t->nest++;
    gs_log_init("gpushare-hook", GS_LOG_WARN);
    hook_config_read();
    hook_gate_init();
    hook_real_load();
    hook_fork_register();
    if (hook_cfg.disabled) {
        gs_debug("GPUSHARE_DISABLE is set: pure pass-through");
        atomic_store_explicit(&hook_gate_word.v, HOOK_GATE_UNGATED, memory_order_release);
    }
    atomic_store_explicit(&hook_init_done, 1, memory_order_release);
    t->nest--;
}

void hook_init_once(void)
{
    pthread_once(&init_once, do_init);
}

/* Runs after the program's own atexit handlers and destructors (the hook
 * is loaded first, so it is finalised last). */
__attribute__((destructor)) static void hook_fini(void)
{
    hook_client_stop();
}
