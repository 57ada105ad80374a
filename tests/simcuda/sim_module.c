/*
 * sim_module.c - modules, libraries and functions.  The simulator runs no
 * code, so any image (or file that exists) loads, and any name resolves to
 * a function; each CUfunction remembers its name, which the execution log
 * reports.  A CUkernel from a library is the same object as its CUfunction
 * (cuKernelGetFunction returns it unchanged), so either launches.
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static CUresult module_new(int is_library, int need_ctx, struct sim_module **out)
{
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = need_ctx ? sim_ctx_get(&c) : CUDA_SUCCESS;
    struct sim_module *m = NULL;
    if (rc == CUDA_SUCCESS) {
        m = calloc(1, sizeof *m);
        if (!m || sim_hmap_put(&sim_g.handles, (uintptr_t)m,
                               is_library ? SIM_H_LIBRARY : SIM_H_MODULE, m) != 0) {
            free(m);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            m->is_library = is_library;
            *out = m;
        }
    }
    sim_unlock();
    return rc;
}

static struct sim_func *module_func_locked(struct sim_module *m, const char *name)
{
    for (struct sim_func *f = m->funcs; f; f = f->next)
        if (strcmp(f->name, name) == 0)
            return f;
    struct sim_func *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->name = strdup(name);
    if (!f->name || sim_hmap_put(&sim_g.handles, (uintptr_t)f, SIM_H_FUNC, f) != 0) {
        free(f->name);
        free(f);
        return NULL;
    }
    f->mod = m;
    f->next = m->funcs;
    m->funcs = f;
    return f;
}

static CUresult module_unload(void *h, int type)
{
    sim_lock();
    struct sim_module *m = sim_hmap_del(&sim_g.handles, (uintptr_t)h, type);
    if (m) {
        while (m->funcs) {
            struct sim_func *f = m->funcs;
            m->funcs = f->next;
            sim_hmap_del(&sim_g.handles, (uintptr_t)f, SIM_H_FUNC);
            free(f->name);
            free(f);
        }
        free(m);
    }
    sim_unlock();
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult load_image(CUmodule *module, const void *image)
{
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_module *m;
    CUresult rc = module_new(0, 1, &m);
    if (rc == CUDA_SUCCESS)
        *module = (CUmodule)m;
    return rc;
}

SIM_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    SIM_GATED(load_image(module, image));
}

SIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues)
{
    SIM_GATED((numOptions && (!options || !optionValues)) ? CUDA_ERROR_INVALID_VALUE
                                                          : load_image(module, image));
}

SIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    SIM_GATED(load_image(module, fatCubin));
}

static CUresult load_file(CUmodule *module, const char *fname)
{
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return load_image(module, fname);
}

SIM_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    SIM_GATED(load_file(module, fname));
}

SIM_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    SIM_GATED(module_unload(hmod, SIM_H_MODULE));
}

static CUresult get_function(CUfunction *hfunc, void *hmod, int type, const char *name)
{
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_module *m = sim_hmap_get(&sim_g.handles, (uintptr_t)hmod, type);
    struct sim_func *f = m ? module_func_locked(m, name) : NULL;
    sim_unlock();
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    SIM_GATED(get_function(hfunc, hmod, SIM_H_MODULE, name));
}

/* ---- libraries (context-independent loading) -------------------------- */

static CUresult library_load(CUlibrary *library, const void *code, unsigned int njit,
                             CUjit_option *jit, void **jitv, unsigned int nlib)
{
    if (!library || !code || (njit && (!jit || !jitv)))
        return CUDA_ERROR_INVALID_VALUE;
    (void)nlib;
    struct sim_module *m;
    CUresult rc = module_new(1, 0, &m);
    if (rc == CUDA_SUCCESS)
        *library = (CUlibrary)m;
    return rc;
}

SIM_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                      CUjit_option *jitOptions, void **jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                      void **libraryOptionValues, unsigned int numLibraryOptions)
{
    SIM_GATED(library_load(library, code, numJitOptions, jitOptions, jitOptionsValues,
                           numLibraryOptions));
}

SIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                          CUjit_option *jitOptions, void **jitOptionsValues,
                                          unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions,
                                          void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
    SIM_GATED((fileName && access(fileName, R_OK) != 0)
                  ? CUDA_ERROR_FILE_NOT_FOUND
                  : library_load(library, fileName, numJitOptions, jitOptions, jitOptionsValues,
                                 numLibraryOptions));
}

SIM_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    SIM_GATED(module_unload(library, SIM_H_LIBRARY));
}

SIM_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    SIM_GATED(get_function((CUfunction *)pKernel, library, SIM_H_LIBRARY, name));
}

static CUresult kernel_function(CUfunction *pFunc, CUkernel kernel)
{
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_func *f = sim_hmap_get(&sim_g.handles, (uintptr_t)kernel, SIM_H_FUNC);
    sim_unlock();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    SIM_GATED(kernel_function(pFunc, kernel));
}

/* ---- function queries ------------------------------------------------- */

static CUresult func_name(const char **name, const void *h)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_func *f = sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_FUNC);
    if (f)
        *name = f->name;
    sim_unlock();
    return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    SIM_GATED(func_name(name, hfunc));
}

SIM_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    SIM_GATED(func_name(name, hfunc));
}

static CUresult func_attribute(int *pi, CUfunction_attribute attrib, const void *h)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_func *f = sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_FUNC);
    sim_unlock();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = 1024;
        break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = 32;
        break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = 90;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = -1;
        break;
    default:
        if ((int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        *pi = 0;
        break;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    SIM_GATED(func_attribute(pi, attrib, hfunc));
}

static CUresult func_accept(const void *h)
{
    sim_lock();
    struct sim_func *f = sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_FUNC);
    sim_unlock();
    return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    SIM_GATED(func_accept(hfunc));
}

SIM_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    SIM_GATED(func_accept(hfunc));
}

/* ---- launches --------------------------------------------------------- */

static CUresult launch(const void *hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream h, int pt)
{
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 ||
        gz > 65535 || bz > 64 || (unsigned long long)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_func *f = sim_hmap_get(&sim_g.handles, (uintptr_t)hf, SIM_H_FUNC);
    struct sim_stream *s = NULL;
    CUresult rc = f ? sim_stream_resolve(h, pt, &s) : CUDA_ERROR_INVALID_HANDLE;
    struct sim_op *op = NULL;
    if (rc == CUDA_SUCCESS && !(op = sim_op_new(SIM_OP_KERNEL)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && !(op->u.kernel.name = strdup(f->name))) {
        free(op);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS) {
        op->u.kernel.dur_ns = sim_take_kernel_ns();
        rc = sim_submit_locked(s, op);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams, void **extra)
{
    SIM_GATED(launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, 0));
}

SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams, void **extra)
{
    SIM_GATED(launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, 1));
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, int pt)
{
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                  c->blockDimZ, c->hStream, pt);
}

SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                     void **kernelParams, void **extra)
{
    SIM_GATED(launch_ex(config, f, 0));
}

SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                          void **kernelParams, void **extra)
{
    SIM_GATED(launch_ex(config, f, 1));
}

SIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                              unsigned int gridDimY, unsigned int gridDimZ,
                                              unsigned int blockDimX, unsigned int blockDimY,
                                              unsigned int blockDimZ, unsigned int sharedMemBytes,
                                              CUstream hStream, void **kernelParams)
{
    SIM_GATED(launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, 0));
}

SIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                   unsigned int gridDimY, unsigned int gridDimZ,
                                                   unsigned int blockDimX, unsigned int blockDimY,
                                                   unsigned int blockDimZ,
                                                   unsigned int sharedMemBytes, CUstream hStream,
                                                   void **kernelParams)
{
    SIM_GATED(launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, 1));
}
