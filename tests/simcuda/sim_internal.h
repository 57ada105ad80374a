/*
 * sim_internal.h - types and functions shared by the simulated driver's
 * source files.  Nothing here is exported: the library is built with
 * -fvisibility=hidden and only SIM_EXPORT definitions (the CUDA entry points
 * declared by cuda.h, and the gpusim_* extras) are visible.
 *
 * cuda.h is included with __CUDA_API_VERSION_INTERNAL so that its
 * "#define cuMemAlloc cuMemAlloc_v2" mapping is undone and every ABI version
 * of every function (cuMemAlloc, cuMemAlloc_v2, cuMemcpyHtoD_v2_ptds, ...)
 * is declared with its real prototype: the compiler checks our definitions
 * against them, and -Wmissing-prototypes catches any export cuda.h lacks.
 */
#ifndef GPUSHARE_SIM_INTERNAL_H
#define GPUSHARE_SIM_INTERNAL_H

#define __CUDA_API_VERSION_INTERNAL        1
#define __CUDA_API_PUSH_VISIBILITY_DEFAULT 1
#include <cuda.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpusim.h"

#define SIM_EXPORT __attribute__((visibility("default")))

#define SIM_MAX_DEVICES    8
#define SIM_MAX_PROCS      128
#define SIM_ALLOC_ROUND    512ULL       /* capacity is counted in these units */
#define SIM_GRANULARITY    (2ULL << 20) /* VMM allocation granularity */
#define SIM_DRIVER_VERSION 13000
#define SIM_DEVICE_NAME    "gpushare simulated GPU"

/* ---- configuration (sim_env.c) ---------------------------------------- */

struct sim_config {
    char name[256];                 /* shm segment name, starts with '/' */
    int devices;                    /* GPUSHARE_SIM_DEVICES */
    unsigned long long memory;      /* GPUSHARE_SIM_MEMORY, bytes per device */
    unsigned concurrency;           /* GPUSHARE_SIM_CONCURRENCY */
    unsigned long long kernel_us;   /* GPUSHARE_SIM_KERNEL_US (per process) */
    char log_path[4096];            /* GPUSHARE_SIM_LOG, "" = none */
    unsigned long long host_memory; /* GPUSHARE_SIM_HOST_MEMORY, bytes; 0 = unlimited */
    int shared; /* GPUSHARE_SIM_SHARED=1: every user may attach (as /dev/nvidia* is 0666) */
    unsigned long long context_memory; /* GPUSHARE_SIM_CONTEXT_MEMORY, bytes; 0 = none */
};

/* Fills cfg from the environment; on a malformed variable prints one line
 * to stderr naming it and returns -1. */
int sim_config_load(struct sim_config *cfg);
/* The segment name from the environment (no validation of the others). */
void sim_config_segment_name(char *out, size_t len);
/* Parses "<digits>[K|M|G|T][B|iB]" (binary units); -1 if malformed. */
int sim_parse_size(const char *s, unsigned long long *out);

/* ---- the cross-process segment (sim_shared.c) ------------------------- */

enum sim_step { SIM_STEP_LOCK, SIM_STEP_CHECKPOINT, SIM_STEP_RESTORE, SIM_STEP_UNLOCK, SIM_STEPS };

struct sim_proc {
    int32_t pid;                        /* 0: free entry */
    int32_t state;                      /* CUprocessState */
    uint64_t start_time;                /* /proc/<pid>/stat starttime, detects pid reuse */
    int32_t restore_tid;                /* the control thread */
    int32_t restore_oom;                /* a restore ran out of GPU memory: no restore ever works
                                           again (the H100's driver 580: OPERATING_SYSTEM after it) */
    uint64_t resident[SIM_MAX_DEVICES]; /* bytes counted against capacity */
    uint64_t checkpointed[SIM_MAX_DEVICES]; /* bytes parked in host memory */
    uint64_t busy_ns[SIM_MAX_DEVICES];
    uint32_t slots_held[SIM_MAX_DEVICES];
    /* host memory charged to this process (sim_host.c): pinned memory it
     * made (cuMemHostAlloc, host cuMemCreate), and its checkpoint image */
    uint64_t host_pinned;
    uint64_t host_image;
    /* checkpoint mailbox: one request at a time per target */
    int32_t req_busy;
    int32_t req_caller;
    uint64_t req_caller_start;
    int32_t req_op; /* enum sim_step */
    uint32_t req_timeout_ms;
    uint64_t req_seq;
    uint64_t resp_seq;
    int32_t resp_result;
    /* restore: GPU pairs (CUcheckpointRestoreArgs.gpuPairs, old and new
     * UUID bytes), resolved by the target, which knows the machine */
    int32_t req_npairs;
    unsigned char req_pairs[SIM_MAX_DEVICES][2][16];
};

#define SIM_MAGIC 0x67707573696d3035ULL /* "gpusim05" */

/* An armed failure injection (gpusim_inject_failure): the next `count`
 * calls of `call` made by process `pid` (0: any) return `error`. */
#define SIM_INJECT_SLOTS 16
struct sim_inject {
    char call[48];
    int32_t pid;
    int32_t count;
    int32_t error;
    int32_t pad;
};

/* A condition variable for the segment, built on a futex.  glibc's
 * process-shared pthread_cond_t is not robust against waiters that die:
 * a later broadcast waits forever for them to leave (every sim process'
 * control thread is such a waiter when the process exits or is killed).
 * A futex has no such state: waiting reads the sequence under the segment
 * mutex, so a broadcast made after that (under the mutex) is not missed. */
struct sim_shm_cond {
    _Atomic uint32_t seq;
    uint32_t pad;
};

/* Device memory exported with a file descriptor: counted against capacity
 * once, here, while any process holds a handle to it (a bit per process
 * table entry), and given back when the last holder releases it or dies.
 * Host memory needs no entry: it is not counted, and the memfd's own
 * lifetime keeps the bytes. */
#define SIM_MAX_SHARES 256
struct sim_share {
    uint64_t id; /* 0: free entry */
    uint64_t bytes;
    int32_t dev;
    int32_t pad;
    uint64_t holders[SIM_MAX_PROCS / 64];
};

struct sim_segment {
    uint64_t magic;
    uint64_t layout_size; /* sizeof(struct sim_segment) of the creator */
    _Atomic uint32_t initialised;
    uint32_t device_count;
    uint32_t concurrency;
    uint32_t pad0;
    uint64_t capacity; /* per device */
    char name[256];
    pthread_mutex_t mutex;       /* robust, process-shared: guards all below */
    struct sim_shm_cond slot_cv; /* engine slots freed */
    struct sim_shm_cond ctl_cv;  /* checkpoint mailboxes changed */
    uint64_t used[SIM_MAX_DEVICES];
    uint64_t busy_ns[SIM_MAX_DEVICES];
    uint32_t slots_used[SIM_MAX_DEVICES];
    _Atomic uint32_t inject_armed; /* slots in use: lets calls skip the lock */
    uint32_t pad1;
    struct sim_inject inject[SIM_INJECT_SLOTS];
    uint64_t next_share_id;
    struct sim_share shares[SIM_MAX_SHARES];
    /* the host's memory for pinned memory and checkpoint images
     * (GPUSHARE_SIM_HOST_MEMORY; sim_host.c) */
    uint64_t host_limit; /* 0: unlimited */
    uint64_t host_used;
    uint64_t host_peak;
    uint32_t host_kills; /* processes the simulated OOM killer killed */
    int32_t host_last_killed;
    struct sim_proc procs[SIM_MAX_PROCS];
};

extern struct sim_segment *sim_seg;

/* Creates or attaches the segment named cfg->name (cuInit). */
CUresult sim_shared_open(const struct sim_config *cfg);
/* For processes that did not cuInit (a broker asking about others):
 * attaches the segment named by the environment if it exists; 0 or -1. */
int sim_shared_attach_existing(void);
void sim_shared_detach_if(const char *name);

void sim_shm_lock(void);
void sim_shm_unlock(void);
/* Waits on a segment condvar; abs_ns (CLOCK_MONOTONIC) 0 = no timeout.
 * Returns 0, or ETIMEDOUT. */
int sim_shm_wait(struct sim_shm_cond *cv, uint64_t abs_ns);
void sim_shm_broadcast(struct sim_shm_cond *cv);

/* All below: segment mutex held. */
int sim_proc_register_locked(void); /* index or -1 */
struct sim_proc *sim_proc_self_locked(void);
struct sim_proc *sim_proc_find_locked(pid_t pid);
void sim_reclaim_dead_locked(void);
int sim_pid_alive(pid_t pid, uint64_t start_time);
uint64_t sim_pid_start_time(pid_t pid);

CUresult sim_capacity_reserve(int dev, uint64_t bytes);
void sim_capacity_release(int dev, uint64_t bytes);
/* Shared device memory (segment mutex held).  export: a new entry held by
 * this process, its bytes moved from this process' resident count (they
 * stay counted once); join: hold entry `id`, or re-create it (counting
 * the bytes again, or CUDA_ERROR_OUT_OF_MEMORY) if every holder is gone;
 * leave: stop holding it, giving the bytes back with the last holder. */
CUresult sim_share_export_locked(int dev, uint64_t bytes, uint64_t *id);
CUresult sim_share_join_locked(uint64_t id, int dev, uint64_t bytes);
void sim_share_leave_locked(uint64_t id);
void sim_slot_acquire(int dev);
void sim_slot_release(int dev, uint64_t busy_ns);
void sim_proc_unregister(void);

/* ---- host memory (sim_host.c) ---------------------------------------- */

/* Pinned host memory made by this process: counted against the host's
 * memory (GPUSHARE_SIM_HOST_MEMORY), CUDA_ERROR_OUT_OF_MEMORY beyond it. */
CUresult sim_host_charge(uint64_t bytes);
void sim_host_uncharge(uint64_t bytes);
/* The checkpoint image of process p (segment mutex held): charged, or -1
 * when it does not fit (the caller is then killed: sim_host_oom_kill). */
int sim_host_image_charge_locked(struct sim_proc *p, uint64_t bytes);
void sim_host_image_release_locked(struct sim_proc *p);
/* A process gone: its charges dropped (segment mutex held). */
void sim_host_proc_gone_locked(const struct sim_proc *p);
/* The simulated OOM killer: this process, whose checkpoint image of
 * `bytes` did not fit, says so and dies of SIGKILL.  Call without locks. */
_Noreturn void sim_host_oom_kill(uint64_t bytes, uint64_t used, uint64_t limit);

/* ---- failure injection (sim_inject.c) --------------------------------- */

/* If a failure of `call` is armed for this process, consumes one and
 * returns its error; else CUDA_SUCCESS.  Entry points call it before they
 * change anything.  The _locked form: segment mutex held. */
CUresult sim_inject_take(const char *call);
CUresult sim_inject_take_locked(const char *call);
/* The segment for callers that need not have called cuInit (the
 * checkpoint calls, the gpusim_inject_* exports): ours after cuInit, else
 * the one named by the environment.  1 if there is one. */
int sim_have_segment(void);

/* ---- process-local state (sim_state.c) -------------------------------- */

struct sim_ctx;
struct sim_stream;
struct sim_event;
struct sim_capture;

/* Handle registry: every handle given to the application is looked up here
 * before use, so stale or foreign handles give CUDA_ERROR_INVALID_HANDLE
 * rather than a crash. */
enum sim_htype {
    SIM_H_CTX = 1,
    SIM_H_STREAM,
    SIM_H_EVENT,
    SIM_H_MODULE,
    SIM_H_FUNC,
    SIM_H_LIBRARY,
    SIM_H_GRAPH,
    SIM_H_EXEC,
    SIM_H_PHYS,
    SIM_H_POOL,
    SIM_H_ALLOC /* keyed by base address */
};

struct sim_hentry {
    uintptr_t key;
    int type;
    void *val;
    struct sim_hentry *next;
};

#define SIM_HBUCKETS 4096
struct sim_hmap {
    struct sim_hentry *b[SIM_HBUCKETS];
};

int sim_hmap_put(struct sim_hmap *m, uintptr_t key, int type, void *val);
void *sim_hmap_get(const struct sim_hmap *m, uintptr_t key, int type);
void *sim_hmap_del(struct sim_hmap *m, uintptr_t key, int type);
/* Calls fn for every entry of `type` (fn must not modify the map). */
void sim_hmap_each(const struct sim_hmap *m, int type, void (*fn)(void *val, void *arg), void *arg);

struct sim_global {
    atomic_int initialised;
    pid_t pid;
    int proc_idx;
    int detached; /* destructor ran: no more segment updates */
    struct sim_config cfg;
    int log_fd;
    pthread_mutex_t mu; /* guards everything process-local below */
    pthread_cond_t cv;  /* broadcast on any change of work/gate state */
    int gate_closed;
    int active_calls;
    uint64_t pending_ops;
    struct sim_hmap handles;
    struct sim_hmap allocs;
    struct sim_ctx *primary[SIM_MAX_DEVICES];
    struct sim_ctx *ctxs;
    struct sim_capture *captures;
    struct sim_resv *resvs;
    struct sim_phys *phys;
    int managed_count;
    pthread_t ctl_thread;
    _Atomic unsigned long long proc_busy_ns[SIM_MAX_DEVICES];
    int visible[SIM_MAX_DEVICES]; /* CUDA_VISIBLE_DEVICES: ordinal -> device */
    int nvisible;
};

extern struct sim_global sim_g;

void sim_lock(void);
void sim_unlock(void);
void sim_broadcast(void);
void sim_cond_wait(void);
/* Timed wait on sim_g.cv until abs_ns (CLOCK_MONOTONIC); ETIMEDOUT or 0. */
int sim_cond_timedwait(uint64_t abs_ns);
uint64_t sim_now_ns(void);

/* ---- the API gate (sim_gate.c) ---------------------------------------- */

/* Every gated entry point: NOT_INITIALIZED before cuInit, then waits while
 * the checkpoint lock holds the gate closed. */
CUresult sim_enter(void);
void sim_leave(void);
#define SIM_GATED(expr)                                                                            \
    do {                                                                                           \
        CUresult sim_e_ = sim_enter();                                                             \
        if (sim_e_ != CUDA_SUCCESS)                                                                \
            return sim_e_;                                                                         \
        CUresult sim_r_ = (expr);                                                                  \
        sim_leave();                                                                               \
        return sim_r_;                                                                             \
    } while (0)
#define SIM_NEED_INIT()                                                                            \
    do {                                                                                           \
        if (!atomic_load(&sim_g.initialised))                                                      \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

/* Blocks (sim_g.mu held) until pred(arg); the calling API thread does not
 * count as active meanwhile, so a checkpoint lock can proceed, and it
 * returns only once the gate is open again. */
void sim_wait_locked(int (*pred)(void *), void *arg);

/* ---- devices (sim_api_device.c) --------------------------------------- */

/* ---- visible devices (sim_visible.c) ---------------------------------- */

#define SIM_UUID_STRLEN 41 /* "GPU-" + 36 + NUL */
/* A device (ordinal) this process sees (CUDA_VISIBLE_DEVICES lists it). */
int sim_dev_valid(CUdevice d);
/* The machine's index of device d, or -1; the device (ordinal) of this
 * process that is machine device `phys`, or -1. */
int sim_dev_phys(CUdevice d);
CUdevice sim_dev_of_phys(int phys);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi writes it. */
void sim_uuid_string(const CUuuid *u, char out[SIM_UUID_STRLEN]);
/* Fills vis[] (ordinal -> device) from a CUDA_VISIBLE_DEVICES value
 * (NULL: unset) for ndev devices whose UUID strings are given; returns
 * how many are visible. */
int sim_visible_parse(const char *spec, int ndev, const char uuids[][SIM_UUID_STRLEN], int *vis);
/* The UUID of machine device `phys`, visible or not. */
void sim_device_uuid(int phys, CUuuid *uuid);

/* ---- contexts (sim_context.c) ----------------------------------------- */

struct sim_ctx {
    int dev;
    unsigned flags;
    int is_primary;
    int retain; /* primary: retain count */
    int active;
    int destroyed;
    uint64_t charged; /* the device memory the context itself takes (context_memory) */
    struct sim_stream *default_stream;
    struct sim_stream *streams; /* user streams of this context */
    struct sim_ctx *next;
};

struct sim_ctx *sim_ctx_current(void); /* validated top of this thread's stack */
/* Current context or CUDA_ERROR_INVALID_CONTEXT (sim_g.mu held). */
CUresult sim_ctx_get(struct sim_ctx **out);
struct sim_ctx *sim_ctx_new_locked(int dev, unsigned flags, int primary);
int sim_ctx_valid_locked(const struct sim_ctx *c);

/* ---- log (sim_log.c) -------------------------------------------------- */

void sim_log_open(const char *path, int shared);
void sim_log_op(int dev, const char *op, const char *name, const void *stream, uint64_t start_ns,
                uint64_t end_ns, long long bytes);

/* ---- execution engine (sim_engine.c) ---------------------------------- */

enum sim_op_type {
    SIM_OP_KERNEL,
    SIM_OP_COPY,
    SIM_OP_SET,
    SIM_OP_HOSTFN,
    SIM_OP_CALLBACK,
    SIM_OP_EVENT,
    SIM_OP_WAIT_EVENT,
    SIM_OP_WAIT_STREAM,
    SIM_OP_FREE,
    SIM_OP_GRAPH,
    SIM_OP_NOP
};

struct sim_graph_exec;
struct sim_alloc;

struct sim_op {
    struct sim_op *next;
    int type;
    union {
        struct {
            char *name;
            uint64_t dur_ns;
        } kernel;
        struct {
            char *dst;
            const char *src;
            size_t width, height, depth;
            size_t dpitch, spitch; /* bytes between rows */
            size_t dslice, sslice; /* bytes between slices */
            const char *kind;      /* "HtoD", ... for the log */
        } copy;
        struct {
            char *dst;
            uint32_t value;
            int elsize;
            size_t width; /* elements per row */
            size_t height;
            size_t pitch;
        } set;
        struct {
            CUhostFn fn;
            void *arg;
        } hostfn;
        struct {
            CUstreamCallback fn;
            void *arg;
            CUstream handle;
        } callback;
        struct {
            struct sim_event *ev;
            uint64_t gen;
        } event;
        struct {
            struct sim_stream *s;
            uint64_t seq;
        } wait_stream;
        struct {
            struct sim_alloc *a;
        } free;
        struct {
            struct sim_graph_exec *exec;
        } graph;
    } u;
};

struct sim_stream {
    struct sim_ctx *ctx;
    unsigned flags;
    int priority;
    int is_default;
    uint64_t id;
    struct sim_op *head, *tail;
    uint64_t enq_seq, done_seq;
    uint64_t dep_default_seq;
    int worker_running;
    int destroyed;
    int refs;
    pthread_cond_t wake;
    struct sim_capture *capture;
    struct sim_stream *next;
};

struct sim_event {
    unsigned flags;
    int refs;
    uint64_t record_gen, done_gen;
    uint64_t time_ns;
    uint64_t capture_id; /* recorded into this (still active) capture */
};

struct sim_op *sim_op_new(int type);
void sim_op_free_locked(struct sim_op *op);                  /* drops refs, frees */
struct sim_op *sim_op_clone_locked(const struct sim_op *op); /* NULL on OOM */

struct sim_stream *sim_stream_new_locked(struct sim_ctx *ctx, unsigned flags, int priority,
                                         int is_default);
void sim_stream_destroy_locked(struct sim_stream *s);
void sim_stream_unref_locked(struct sim_stream *s);
/* Resolves a CUstream handle (NULL/LEGACY/PER_THREAD: the current
 * context's default stream). per_thread: called through a _ptsz/_ptds
 * entry point (same mapping; kept for the record). sim_g.mu held. */
CUresult sim_stream_resolve(CUstream h, int per_thread, struct sim_stream **out);
/* Queues op (or records it into the stream's capture); takes ownership. */
CUresult sim_submit_locked(struct sim_stream *s, struct sim_op *op);
/* Synchronous operation on stream s: submit and wait for completion. */
CUresult sim_submit_sync_locked(struct sim_stream *s, struct sim_op *op);
int sim_stream_idle(const struct sim_stream *s);
CUresult sim_stream_sync_locked(struct sim_stream *s);
CUresult sim_ctx_sync_locked(struct sim_ctx *c);
void sim_wait_all_idle_locked(void); /* every stream of the process */
void sim_event_unref_locked(struct sim_event *e);
/* Runs one op (in a worker, sim_g.mu NOT held). */
void sim_exec_op(struct sim_stream *s, struct sim_op *op);
void sim_run_kernel(int dev, const char *name, uint64_t dur_ns, const void *stream);

extern __thread unsigned long long sim_t_next_kernel_us;
extern __thread int sim_t_next_kernel_set;
extern __thread int sim_t_per_thread; /* last stream lookup came via _ptsz/_ptds */
uint64_t sim_take_kernel_ns(void);

/* ---- memory (sim_memory.c, sim_vmm.c) --------------------------------- */

enum sim_alloc_kind { SIM_MEM_DEVICE = 1, SIM_MEM_MANAGED, SIM_MEM_HOST };

struct sim_alloc {
    uintptr_t base;
    size_t size;           /* as requested */
    size_t map_size;       /* page-rounded mapping */
    uint64_t accounted;    /* bytes counted against capacity (0 for host) */
    uint64_t host_charged; /* pinned host memory: bytes charged to the host (sim_host.c) */
    int dev;
    int kind;
    int from_pool;   /* stream-ordered (cuMemAllocAsync): not legacy-IPC capable */
    uint64_t id;     /* process-unique (BUFFER_ID) */
    int fd;          /* memfd backing it once cuIpcGetMemHandle made it shareable, or -1 */
    int ipc_opens;   /* opened from another process (cuIpcOpenMemHandle): references */
    int32_t ipc_pid; /* opened: the exporter's pid, start time and buffer id */
    uint64_t ipc_start;
    uint64_t ipc_id;
    struct sim_ctx *ctx;
    void *saved; /* contents while checkpointed */
};

/* Physical memory of the VMM API (cuMemCreate, or imported): a memfd, so
 * every mapping of it (in this or another process) shares the bytes. */
enum sim_loc { SIM_LOC_DEVICE = 1, SIM_LOC_HOST };

struct sim_phys {
    int fd; /* memfd holding the contents; -1 while checkpointed */
    size_t size;
    int loc;                         /* SIM_LOC_DEVICE, or SIM_LOC_HOST (host NUMA / host) */
    CUmemLocationType loc_type;      /* as created, for the properties */
    int dev;                         /* device ordinal, or the host NUMA node */
    unsigned long long handle_types; /* requestedHandleTypes */
    uint64_t id;                     /* process-unique (MEMORY_BLOCK_ID) */
    uint64_t accounted;              /* bytes this process counts against capacity */
    uint64_t host_charged;           /* host memory it made: bytes charged to the host */
    uint64_t share_id;               /* device memory exported or imported: its sim_share */
    int refs;                        /* handle references: create/import/retain - release */
    int maps;
    void *saved;
    struct sim_phys *next;
};

/* One cuMemMap.  The host mapping's protection is the union of the
 * accesses granted to any location (the simulator's devices and host are
 * one address space); the per-location grants are kept for
 * cuMemGetAccess and for the copy checks. */
struct sim_mapping {
    uintptr_t va;
    size_t size;
    size_t offset;
    int prot;
    uint8_t access[SIM_MAX_DEVICES]; /* CUmemAccess_flags of each device */
    uint8_t host_access;             /* of the host (host memory only) */
    struct sim_phys *phys;
    struct sim_mapping *next;
};

struct sim_resv {
    uintptr_t base;
    size_t size;
    struct sim_mapping *maps;
    struct sim_resv *next;
};

/* A memfd for `size` bytes of physical memory plus the trailing page
 * that describes it to an importer (SIM_SHARE_HDR); -1 on failure. */
#define SIM_SHARE_HDR 4096
int sim_vmm_memfd(size_t size, int loc);
/* Handle registry of physical memory (sim_g.mu held). */
struct sim_phys *sim_phys_get_locked(CUmemGenericAllocationHandle h);
int sim_phys_add_locked(struct sim_phys *ph);

/* The reservation holding p, and the mapping there (NULL: unmapped). */
struct sim_resv *sim_vmm_resv_locked(uintptr_t p, struct sim_mapping **map);
/* May device `dev` read (or write) [p, p + len)?  CUDA_SUCCESS when no byte
 * of it is in a VMM reservation or all are mapped with that access;
 * CUDA_ERROR_INVALID_VALUE for unmapped bytes of a reservation,
 * CUDA_ERROR_ILLEGAL_ADDRESS for mapped bytes without the access. */
CUresult sim_vmm_check_access_locked(uintptr_t p, size_t len, int dev, int write);

/* Process-unique ids of allocations (BUFFER_ID, MEMORY_BLOCK_ID). */
uint64_t sim_new_id(void);
CUresult sim_mem_alloc_locked(struct sim_ctx *ctx, size_t size, int kind, int low32,
                              CUdeviceptr *out);
CUresult sim_mem_free_locked(CUdeviceptr p, int kind);
void sim_mem_release_locked(struct sim_alloc *a);   /* unmaps, uncounts, frees */
struct sim_alloc *sim_mem_find_locked(uintptr_t p); /* containing allocation */
void sim_mem_free_ctx_locked(struct sim_ctx *ctx);

/* Shared with another process by legacy IPC: exported or opened. */
int sim_mem_is_ipc(const struct sim_alloc *a);

/* Checkpoint support: park/unpark every device allocation (sim_g.mu held). */
CUresult sim_mem_checkpoint_locked(uint64_t out_bytes[SIM_MAX_DEVICES]);
void sim_mem_restore_locked(void);
CUresult sim_vmm_checkpoint_locked(uint64_t out_bytes[SIM_MAX_DEVICES]);
CUresult sim_vmm_restore_locked(void);

/* ---- modules (sim_module.c) ------------------------------------------- */

struct sim_func;
struct sim_module {
    struct sim_func *funcs;
    int is_library;
};
struct sim_func {
    char *name;
    struct sim_module *mod;
    struct sim_func *next;
};

/* ---- graphs (sim_graph.c) --------------------------------------------- */

struct sim_graph {
    struct sim_op **nodes;
    size_t n, cap;
};

struct sim_graph_exec {
    struct sim_op **nodes;
    size_t n;
    int refs;
};

struct sim_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    int invalidated;
    struct sim_stream *origin;
    struct sim_graph *graph;
    struct sim_capture *next;
};

CUresult sim_graph_append_locked(struct sim_graph *g, struct sim_op *op);
struct sim_capture *sim_capture_find_locked(uint64_t id);
void sim_capture_invalidate_locked(struct sim_capture *c);
void sim_capture_abort_locked(struct sim_capture *c); /* origin stream destroyed */
void sim_graph_exec_unref_locked(struct sim_graph_exec *e);
void sim_graph_run(struct sim_stream *s, struct sim_graph_exec *e);

/* ---- checkpoint (sim_checkpoint.c) ------------------------------------ */

int sim_ctl_start(void);

/* ---- small helpers ---------------------------------------------------- */

static inline uint64_t sim_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

#endif
