// SPDX-License-Identifier: MIT
// The simulated CUDA runtime: start-up, last-error state, devices, and the
// kernel registry. Memory, streams, events and launches are in api.c.
#include "rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

rt_drv_t rt_drv;

// --- start-up --------------------------------------------------------------------
// Two stages, each once per process: loading the driver and resolving the
// table (enough for cudaDriverGetVersion, which must work before any context
// exists), then the implicit primary-context initialisation every other call
// needs. pthread_once makes concurrent first calls from many threads safe.
#define RT_MAX_DEVICES 16

static pthread_once_t rt_load_once = PTHREAD_ONCE_INIT;
static pthread_once_t rt_init_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_load_err = cudaSuccess;
static cudaError_t rt_init_err = cudaSuccess;
static int rt_ndevices;
static pthread_mutex_t rt_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(CUcontext) rt_ctx[RT_MAX_DEVICES];

// Per host thread, as in the real runtime: the device chosen by cudaSetDevice,
// whether that device's primary context is current on this thread, and the
// last error.
static __thread int t_device;
static __thread CUcontext t_ctx_set; // the context this thread made current
static __thread cudaError_t t_last_error;

typedef struct rt_entry_s {
    const char *name;
    size_t offset;
    cuuint64_t flags;
    bool sim; // a simulator extension: missing is not fatal for real programs
} rt_entry_t;

#define RT_ENTRY_X(name)                                                                           \
    {#name, offsetof(rt_drv_t, name), CU_GET_PROC_ADDRESS_LEGACY_STREAM, false},
#define RT_ENTRY_P(field, name)                                                                    \
    {#name, offsetof(rt_drv_t, field), CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, false},
#define RT_ENTRY_S(name) {#name, offsetof(rt_drv_t, name), CU_GET_PROC_ADDRESS_LEGACY_STREAM, true},
static const rt_entry_t rt_entries[] = {RT_DRIVER_TABLE(RT_ENTRY_X, RT_ENTRY_P, RT_ENTRY_S)};
#undef RT_ENTRY_X
#undef RT_ENTRY_P
#undef RT_ENTRY_S

// The version the runtime asks the driver for: the runtime's own (13.0, or
// 12.9 for libcudart.so.12), so that base names resolve to that ABI
// (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2,
// cuCtxSynchronize -> cuCtxSynchronize_v2 from 13.0 only, ...).
#define RT_DRIVER_ABI SIMRT_VERSION

static void rt_load(void)
{
    // RTLD_GLOBAL as the real runtime: libraries loaded later (cuBLAS, a
    // preloaded interposer) resolve the same driver instance.
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        // No driver installed: the real runtime answers every call with
        // cudaErrorInsufficientDriver ("CUDA driver version is insufficient").
        rt_load_err = cudaErrorInsufficientDriver;
        return;
    }
    __typeof__(cuGetProcAddress) *gpa =
        (__typeof__(cuGetProcAddress) *)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        rt_load_err = cudaErrorInsufficientDriver;
        return;
    }
    for (size_t i = 0; i < sizeof rt_entries / sizeof rt_entries[0]; i++) {
        const rt_entry_t *e = &rt_entries[i];
        void *pfn = NULL;
        CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = gpa(e->name, &pfn, RT_DRIVER_ABI, e->flags, &q);
        if (r != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS || !pfn) {
            // The simulator's own calls are optional: without them only the
            // simrt* calls fail (cudaErrorNotSupported).
            if (e->sim) continue;
            // A driver without an entry point this runtime needs is older
            // than the runtime: that is exactly cudaErrorInsufficientDriver.
            rt_load_err = cudaErrorInsufficientDriver;
            return;
        }
        memcpy((char *)&rt_drv + e->offset, &pfn, sizeof pfn);
    }
}

static cudaError_t rt_loaded(void)
{
    pthread_once(&rt_load_once, rt_load);
    return rt_load_err;
}

// Retain (once) and return the primary context of device ordinal d.
static cudaError_t rt_primary_ctx(int d, CUcontext *out)
{
    CUcontext c = atomic_load_explicit(&rt_ctx[d], memory_order_acquire);
    if (c) {
        *out = c;
        return cudaSuccess;
    }
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&rt_ctx_lock);
    c = atomic_load_explicit(&rt_ctx[d], memory_order_relaxed);
    if (!c) {
        CUdevice dev;
        CUresult r = rt_drv.cuDeviceGet(&dev, d);
        if (r == CUDA_SUCCESS) r = rt_drv.cuDevicePrimaryCtxRetain(&c, dev);
        if (r == CUDA_SUCCESS)
            atomic_store_explicit(&rt_ctx[d], c, memory_order_release);
        else
            err = rt_error_from_cu(r);
    }
    pthread_mutex_unlock(&rt_ctx_lock);
    *out = c;
    return err;
}

static void rt_init(void)
{
    if ((rt_init_err = rt_loaded()) != cudaSuccess) return;
    CUresult r = rt_drv.cuInit(0);
    if (r == CUDA_SUCCESS) r = rt_drv.cuDeviceGetCount(&rt_ndevices);
    if (r != CUDA_SUCCESS) {
        rt_init_err = r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : rt_error_from_cu(r);
        return;
    }
    if (rt_ndevices <= 0) {
        rt_init_err = cudaErrorNoDevice;
        return;
    }
    if (rt_ndevices > RT_MAX_DEVICES) rt_ndevices = RT_MAX_DEVICES;
    CUcontext c;
    rt_init_err = rt_primary_ctx(0, &c);
}

// Every call that needs the device: the process-wide start-up, then this
// thread's current context. Threads other than the first start with no
// current context in the driver, so each makes its device's primary context
// current at its first call (what the real runtime does lazily too).
cudaError_t rt_enter(void)
{
    pthread_once(&rt_init_once, rt_init);
    if (rt_init_err != cudaSuccess) return rt_init_err;
    CUcontext want = atomic_load_explicit(&rt_ctx[t_device], memory_order_acquire);
    if (!want || t_ctx_set != want) {
        cudaError_t e = rt_primary_ctx(t_device, &want);
        if (e != cudaSuccess) return e;
        CUresult r = rt_drv.cuCtxSetCurrent(want);
        if (r != CUDA_SUCCESS) return rt_error_from_cu(r);
        t_ctx_set = want;
    }
    return cudaSuccess;
}

// --- last error ----------------------------------------------------------------------
// Every runtime call's result passes through here. cudaErrorNotReady is "not
// actually an error" (driver_types.h) and is never recorded.
cudaError_t rt_ret(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
    return e;
}

cudaError_t rt_ret_cu(CUresult r)
{
    return rt_ret(rt_error_from_cu(r));
}

RT_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}

RT_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    return t_last_error;
}

// --- versions ---------------------------------------------------------------------------
RT_EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion) return rt_ret(cudaErrorInvalidValue);
    *runtimeVersion = SIMRT_VERSION;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion) return rt_ret(cudaErrorInvalidValue);
    // "If no driver is installed, then 0 is returned as the driver version"
    // (cuda_runtime_api.h), and the call succeeds.
    if (rt_loaded() != cudaSuccess) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    return rt_ret_cu(rt_drv.cuDriverGetVersion(driverVersion));
}

// --- devices ----------------------------------------------------------------------------
RT_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) {
        *count = 0;
        return rt_ret(e);
    }
    *count = rt_ndevices;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaGetDevice(int *device)
{
    if (!device) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    *device = t_device;
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaSetDevice(int device)
{
    pthread_once(&rt_init_once, rt_init);
    if (rt_init_err != cudaSuccess) return rt_ret(rt_init_err);
    if (device < 0 || device >= rt_ndevices) return rt_ret(cudaErrorInvalidDevice);
    t_device = device;
    return rt_ret(rt_enter());
}

RT_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
#if SIMRT_VERSION >= 13000
    // Asked for at 13.0 the name is cuCtxSynchronize_v2, which takes the
    // context (the driver refuses a stray one): this thread's.
    return rt_ret_cu(
        ((__typeof__(cuCtxSynchronize_v2) *)(void *)rt_drv.cuCtxSynchronize)(t_ctx_set));
#else
    return rt_ret_cu(rt_drv.cuCtxSynchronize());
#endif
}

RT_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (device < 0 || device >= rt_ndevices) return rt_ret(cudaErrorInvalidDevice);
    if (!value) return rt_ret(cudaErrorInvalidValue);
    CUdevice dev;
    CUresult r = rt_drv.cuDeviceGet(&dev, device);
    if (r == CUDA_SUCCESS)
        // cudaDeviceAttr and CUdevice_attribute share their values.
        r = rt_drv.cuDeviceGetAttribute(value, (CUdevice_attribute)attr, dev);
    return rt_ret_cu(r);
}

#if SIMRT_VERSION >= 13000
// CUDA 13 only. CUDA 12 exports cudaGetDeviceProperties_v2 (cuda_runtime_api.h
// 12.x renames the call to it) and a legacy cudaGetDeviceProperties, each
// with a different struct cudaDeviceProp from CUDA 13's (1032 bytes in 12.9,
// 1008 in 13.0): the installed headers describe neither, so libcudart.so.12
// leaves both out rather than fill a struct of the wrong layout.
typedef struct rt_prop_field_s {
    CUdevice_attribute attr;
    size_t offset;
    bool is_size_t;
} rt_prop_field_t;

#define RT_PI(a, f)                                                                                \
    {                                                                                              \
        a, offsetof(struct cudaDeviceProp, f), false                                               \
    }
#define RT_PZ(a, f)                                                                                \
    {                                                                                              \
        a, offsetof(struct cudaDeviceProp, f), true                                                \
    }
static const rt_prop_field_t rt_prop_fields[] = {
    RT_PZ(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, sharedMemPerBlock),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, regsPerBlock),
    RT_PI(CU_DEVICE_ATTRIBUTE_WARP_SIZE, warpSize),
    RT_PZ(CU_DEVICE_ATTRIBUTE_MAX_PITCH, memPitch),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, maxThreadsPerBlock),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, maxThreadsDim[0]),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, maxThreadsDim[1]),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, maxThreadsDim[2]),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, maxGridSize[0]),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, maxGridSize[1]),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, maxGridSize[2]),
    RT_PZ(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, totalConstMem),
    RT_PI(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major),
    RT_PI(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor),
    RT_PZ(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, textureAlignment),
    RT_PI(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, multiProcessorCount),
    RT_PI(CU_DEVICE_ATTRIBUTE_INTEGRATED, integrated),
    RT_PI(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, canMapHostMemory),
    RT_PI(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, concurrentKernels),
    RT_PI(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, ECCEnabled),
    RT_PI(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, pciBusID),
    RT_PI(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, pciDeviceID),
    RT_PI(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, pciDomainID),
    RT_PI(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, asyncEngineCount),
    RT_PI(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, unifiedAddressing),
    RT_PI(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, memoryBusWidth),
    RT_PI(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, l2CacheSize),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, maxThreadsPerMultiProcessor),
    RT_PI(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, streamPrioritiesSupported),
    RT_PZ(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, sharedMemPerMultiprocessor),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, regsPerMultiprocessor),
    RT_PI(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, managedMemory),
    RT_PI(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, concurrentManagedAccess),
    RT_PI(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, cooperativeLaunch),
    RT_PZ(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, sharedMemPerBlockOptin),
    RT_PI(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, maxBlocksPerMultiProcessor),
    RT_PI(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, hostRegisterSupported),
    RT_PI(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, memoryPoolsSupported),
    RT_PI(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, clusterLaunch),
};
#undef RT_PI
#undef RT_PZ

RT_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (!prop) return rt_ret(cudaErrorInvalidValue);
    if (device < 0 || device >= rt_ndevices) return rt_ret(cudaErrorInvalidDevice);
    CUdevice dev;
    CUresult r = rt_drv.cuDeviceGet(&dev, device);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    memset(prop, 0, sizeof *prop);
    r = rt_drv.cuDeviceGetName(prop->name, (int)sizeof prop->name, dev);
    if (r == CUDA_SUCCESS) r = rt_drv.cuDeviceTotalMem(&prop->totalGlobalMem, dev);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    // The UUID and the attributes are filled where the driver knows them: a
    // simulated device need not model every attribute, and a field it does
    // not model stays 0 rather than failing the whole query.
    CUuuid uuid;
    if (rt_drv.cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
        memcpy(&prop->uuid, &uuid, sizeof prop->uuid);
    for (size_t i = 0; i < sizeof rt_prop_fields / sizeof rt_prop_fields[0]; i++) {
        int v = 0;
        if (rt_drv.cuDeviceGetAttribute(&v, rt_prop_fields[i].attr, dev) != CUDA_SUCCESS) continue;
        char *p = (char *)prop + rt_prop_fields[i].offset;
        if (rt_prop_fields[i].is_size_t) {
            size_t z = (size_t)(unsigned)v;
            memcpy(p, &z, sizeof z);
        } else {
            memcpy(p, &v, sizeof v);
        }
    }
    return cudaSuccess;
}
#endif

// --- kernel registry ----------------------------------------------------------------------
// Host symbol -> CUfunction, open addressing. Written under a mutex, read
// without one on every launch: a slot's function is stored before its key
// (release), so a reader that sees the key (acquire) sees the function. Slots
// are never removed, only their function replaced on re-registration.
#define RT_KERNEL_SLOTS 4096u

typedef struct rt_kslot_s {
    _Atomic(const void *) key;
    _Atomic(CUfunction) fn;
} rt_kslot_t;

static rt_kslot_t rt_kernels[RT_KERNEL_SLOTS];
static pthread_mutex_t rt_kernels_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned rt_khash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (unsigned)x & (RT_KERNEL_SLOTS - 1);
}

CUfunction rt_kernel_lookup(const void *hostFun)
{
    if (!hostFun) return NULL;
    for (unsigned i = rt_khash(hostFun), n = 0; n < RT_KERNEL_SLOTS;
         i = (i + 1) & (RT_KERNEL_SLOTS - 1), n++) {
        const void *k = atomic_load_explicit(&rt_kernels[i].key, memory_order_acquire);
        if (!k) return NULL;
        if (k == hostFun) return atomic_load_explicit(&rt_kernels[i].fn, memory_order_acquire);
    }
    return NULL;
}

CUfunction rt_kernel_resolve(const void *func)
{
    CUfunction f = rt_kernel_lookup(func);
    if (f || !func) return f;
    // cuda_runtime_api.h (cudaLaunchKernel, cudaLaunchKernelExC,
    // cudaFuncGetName, cudaFuncGetParamInfo): func may also be a
    // cudaKernel_t cast to void *. The driver knows its kernels: a name
    // lookup succeeds only for one (it reads the handle's magic, so func must
    // be readable, as any pointer a real runtime would dereference).
    const char *name = NULL;
    if (rt_drv.cuFuncGetName &&
        rt_drv.cuFuncGetName(&name, (CUfunction)(uintptr_t)func) == CUDA_SUCCESS)
        return (CUfunction)(uintptr_t)func;
    return NULL;
}

cudaError_t rt_kernel_bind(const void *hostFun, CUfunction f)
{
    cudaError_t e = cudaErrorMemoryAllocation; // table full
    pthread_mutex_lock(&rt_kernels_lock);
    for (unsigned i = rt_khash(hostFun), n = 0; n < RT_KERNEL_SLOTS;
         i = (i + 1) & (RT_KERNEL_SLOTS - 1), n++) {
        const void *k = atomic_load_explicit(&rt_kernels[i].key, memory_order_relaxed);
        if (k == hostFun || !k) {
            // Unbinding a symbol never bound needs no slot.
            if (!k && !f) {
                e = cudaSuccess;
                break;
            }
            atomic_store_explicit(&rt_kernels[i].fn, f, memory_order_release);
            if (!k) atomic_store_explicit(&rt_kernels[i].key, hostFun, memory_order_release);
            e = cudaSuccess;
            break;
        }
    }
    pthread_mutex_unlock(&rt_kernels_lock);
    return e;
}

RT_EXPORT int simrtRegisterKernel(const void *hostFun, const sim_kernel_desc_t *desc)
{
    if (!hostFun || !desc) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (!rt_drv.simKernelCreate) return rt_ret(cudaErrorNotSupported);
    CUfunction f = NULL;
    CUresult r = rt_drv.simKernelCreate(desc, &f);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    return rt_ret(rt_kernel_bind(hostFun, f));
}

// --- simulator statistics -------------------------------------------------------------------
RT_EXPORT int simrtGetStats(sim_stats_t *out)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (!rt_drv.simGetStats) return rt_ret(cudaErrorNotSupported);
    return rt_ret_cu(rt_drv.simGetStats(out));
}

RT_EXPORT int simrtResetStats(void)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (!rt_drv.simResetStats) return rt_ret(cudaErrorNotSupported);
    return rt_ret_cu(rt_drv.simResetStats());
}

RT_EXPORT int simrtResetPeak(void)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (!rt_drv.simResetPeak) return rt_ret(cudaErrorNotSupported);
    return rt_ret_cu(rt_drv.simResetPeak());
}
