/*
 * simtest.h - helpers shared by the simulator's cmocka tests: a fresh
 * simulated machine per test, child processes talking over pipes (children
 * never use cmocka's asserts: REQUIRE prints and _exit()s, and the parent
 * checks the exit status), and the execution-log reader.
 */
#ifndef GPUSHARE_SIMTEST_H
#define GPUSHARE_SIMTEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda.h>

#include "gpusim.h"

/* cmocka check of a CUDA call, naming the error on failure (parent only). */
#define CK(call) CK_EQ(call, CUDA_SUCCESS)
#define CK_EQ(call, want)                                                                          \
    do {                                                                                           \
        CUresult ck_r_ = (call);                                                                   \
        if (ck_r_ != (want))                                                                       \
            fail_msg("%s = %s, expected %s", #call, simtest_err(ck_r_), simtest_err(want));        \
    } while (0)

/* Checks in child processes: print and exit with a failure status. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond))                                                                               \
            simtest_child_fail(__FILE__, __LINE__, #cond, 0);                                      \
    } while (0)
#define REQ_CU(call) REQ_CU_EQ(call, CUDA_SUCCESS)
#define REQ_CU_EQ(call, want)                                                                      \
    do {                                                                                           \
        CUresult rq_r_ = (call);                                                                   \
        if (rq_r_ != (want))                                                                       \
            simtest_child_fail(__FILE__, __LINE__, #call, rq_r_);                                  \
    } while (0)

const char *simtest_err(CUresult r);
void simtest_child_fail(const char *file, int line, const char *what, CUresult r)
    __attribute__((noreturn));

/* A machine of its own for the current test: sets GPUSHARE_SIM_NAME
 * (/gpusim-test-<pid>-<n>), _MEMORY and _CONCURRENCY (NULL: unset), clears
 * the other GPUSHARE_SIM_* variables (_HOST_MEMORY too) and unlinks any
 * old segment. */
void simtest_fresh(const char *memory, const char *concurrency);
/* Also log to a fresh file; returns its path. */
const char *simtest_fresh_log(void);
/* cmocka teardown: unlink the segment and the log. */
int simtest_teardown(void **state);
const char *simtest_name(void);

/* In a child: cuInit, retain device 0's primary context, make it current. */
CUcontext simtest_init(void);

uint64_t simtest_now_ns(void);

/* Child processes (create them before any cuInit in the parent). */
struct simchild {
    pid_t pid;
    int rd; /* parent reads what the child writes */
    int wr; /* parent writes what the child reads */
};
typedef void (*simchild_fn)(int rd, int wr, void *arg);
void simtest_spawn(struct simchild *c, simchild_fn fn, void *arg);
/* Waits for the child; cmocka-fails unless it exited with status 0. */
void simtest_join(struct simchild *c);
/* Runs fn in a child of its own and requires it to succeed. */
void simtest_in_child(simchild_fn fn, void *arg);

void simtest_send(int fd, const void *p, size_t n);
void simtest_recv(int fd, void *p, size_t n);
void simtest_send_u64(int fd, uint64_t v);
uint64_t simtest_recv_u64(int fd);
/* Waits until child pid has exited, leaving it unreaped (a zombie). */
void simtest_wait_zombie(pid_t pid);
/* 1 if fd has something to read right now. */
int simtest_readable(int fd);
/* A file descriptor over a Unix socket (SCM_RIGHTS), as the broker hands
 * exported memory to a notebook process.  recv returns the new fd. */
void simtest_send_fd(int sock, int fd);
int simtest_recv_fd(int sock);
/* Touches *addr (writes it if `write`) in a forked child with the default
 * SIGSEGV action: 1 if the child died of SIGSEGV, 0 if the access worked,
 * -1 otherwise.  For checking that memory is really inaccessible. */
int simtest_access_faults(volatile void *addr, int write);

/* The execution log. */
struct simlog {
    int pid;
    int dev;
    char op[16];
    char name[128];
    char stream[32];
    unsigned long long start, end;
    long long bytes;
};
/* Reads up to max records; returns how many. */
int simtest_read_log(const char *path, struct simlog *out, int max);

#endif
