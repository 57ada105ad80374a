/*
 * sim_api_device.c - driver and device queries (version, count, name,
 * UUID, memory, attributes of an H100-like compute capability 9.0 part)
 * and the gpusim_* observation exports.  Devices and their capacity are
 * those of the shared segment, i.e. of the process that created it.
 */
#include "sim_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

SIM_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static CUresult device_get(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal; /* as the driver: the handle is the ordinal */
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_GATED(device_get(device, ordinal));
}

static CUresult device_count(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_g.nvisible;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
    SIM_GATED(device_count(count));
}

static CUresult device_name(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", SIM_DEVICE_NAME);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_GATED(device_name(name, len, dev));
}

/* Deterministic from the segment name and the device index. */
void sim_device_uuid(int dev, CUuuid *uuid)
{
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    for (int k = 0; k < 2; k++) {
        for (const char *p = sim_g.cfg.name; *p; p++)
            h[k] = (h[k] ^ (unsigned char)*p) * 0x100000001b3ULL;
        h[k] = (h[k] ^ (uint64_t)(dev + 1 + 31 * k)) * 0x100000001b3ULL;
        h[k] ^= h[k] >> 29;
    }
    memcpy(uuid->bytes, h, sizeof uuid->bytes);
    uuid->bytes[6] = (char)((uuid->bytes[6] & 0x0f) | 0x40); /* looks like a v4 UUID */
    uuid->bytes[8] = (char)((uuid->bytes[8] & 0x3f) | 0x80);
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_device_uuid(sim_dev_phys(dev), uuid);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    SIM_GATED(device_uuid(uuid, dev));
}

SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    SIM_GATED(device_uuid(uuid, dev));
}

static CUresult total_mem(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)sim_g.cfg.memory;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_GATED(total_mem(bytes, dev));
}

static CUresult total_mem_v1(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    CUresult rc = total_mem(bytes ? &b : NULL, dev);
    if (rc == CUDA_SUCCESS)
        *bytes = b > 0xffffffffULL ? 0xffffffffU : (unsigned int)b;
    return rc;
}

SIM_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    SIM_GATED(total_mem_v1(bytes, dev));
}

static int attribute_value(CUdevice_attribute a, CUdevice dev)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
        return 512;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        return 32;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        return 132;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        return 0x10 + dev;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        return 3;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        return 232448;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
        return 2;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
        return 32505856;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
        return 134213632;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
        return 1024;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT:
        return 4;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
        return -1; /* the GPU's memory is not a NUMA node */
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        return 0; /* the node to pass for CU_MEM_LOCATION_TYPE_HOST_NUMA */
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
        return 131072;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
        return 16384;
    /* capabilities the simulator has (or that cost it nothing to claim) */
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED:
        return 1;
    default:
        return 0;
    }
}

static CUresult device_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi || (int)attrib < 1 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = attribute_value(attrib, dev);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    SIM_GATED(device_attribute(pi, attrib, dev));
}

static CUresult compute_capability(int *major, int *minor, CUdevice dev)
{
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *major = 9;
    *minor = 0;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    SIM_GATED(compute_capability(major, minor, dev));
}

static CUresult pci_bus_id(char *id, int len, CUdevice dev)
{
    if (!id || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + sim_dev_phys(dev)); /* the machine's */
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    SIM_GATED(pci_bus_id(pciBusId, len, dev));
}

/* ---- gpusim_* --------------------------------------------------------- */

SIM_EXPORT int gpusim_is_simulated(void)
{
    return 1;
}

SIM_EXPORT const char *gpusim_segment_name(void)
{
    static __thread char name[256];
    if (atomic_load(&sim_g.initialised))
        return sim_g.cfg.name;
    sim_config_segment_name(name, sizeof name);
    return name;
}

SIM_EXPORT int gpusim_reset(const char *name)
{
    char buf[256];
    if (!name)
        name = gpusim_segment_name();
    if (name[0] != '/') {
        snprintf(buf, sizeof buf, "/%s", name);
        name = buf;
    }
    sim_shared_detach_if(name);
    if (shm_unlink(name) != 0)
        return errno == ENOENT ? 0 : -1;
    return 0;
}

SIM_EXPORT unsigned long long gpusim_busy_ns(int dev)
{
    int ok = atomic_load(&sim_g.initialised) ? sim_seg != NULL : sim_shared_attach_existing() == 0;
    if (!ok || dev < 0 || dev >= SIM_MAX_DEVICES)
        return 0;
    sim_shm_lock();
    unsigned long long v = (unsigned long long)sim_seg->busy_ns[dev];
    sim_shm_unlock();
    return v;
}

SIM_EXPORT int gpusim_kernels_running(int dev)
{
    int ok = atomic_load(&sim_g.initialised) ? sim_seg != NULL : sim_shared_attach_existing() == 0;
    if (!ok || dev < 0 || dev >= SIM_MAX_DEVICES)
        return 0;
    sim_shm_lock();
    int v = (int)sim_seg->slots_used[dev];
    sim_shm_unlock();
    return v;
}

SIM_EXPORT unsigned long long gpusim_process_busy_ns(int dev)
{
    if (dev < 0 || dev >= SIM_MAX_DEVICES)
        return 0;
    return atomic_load(&sim_g.proc_busy_ns[dev]);
}
