// SPDX-License-Identifier: MIT
// The nvcc host-stub path of the simulated runtime (CUDA 13).
//
// A program built with `nvcc -cudart shared` never calls cudaLaunchKernel for
// `k<<<g, b, shmem, s>>>(args)`. Its generated code (crt/host_runtime.h,
// crt/device_functions.h; see the .cudafe1.stub.c of `nvcc --keep`) does:
//   - at load, from a constructor: h = __cudaRegisterFatBinary(&wrapper);
//     __cudaRegisterFunction(h, hostStub, "_Z1kPfi", "_Z1kPfi", -1, 0...)
//     for every kernel; __cudaRegisterFatBinaryEnd(h); atexit(...) which
//     calls __cudaUnregisterFatBinary(h);
//   - at the launch site: __cudaPushCallConfiguration(g, b, shmem, s), then
//     the host stub, which packs &arg pointers, calls __cudaGetKernel once
//     (a function-local static), __cudaPopCallConfiguration, and
//     __cudaLaunchKernel(handle, g, b, args, shmem, s) (the _ptsz twin under
//     --default-stream per-thread).
//
// A fat binary holds device code the simulator cannot run, so kernels are
// found by their device (mangled) name instead: a test registers a host
// implementation with simrtRegisterDeviceKernel("_Z1kPfi", &desc), before or
// after the fat binary registers, and every host stub registered under that
// name is bound to it (into the same table cudaLaunchKernel, cudaFuncGetName,
// cudaFuncGetParamInfo and cudaGetFuncBySymbol read).
//
// The kernel handle __cudaGetKernel returns is the kernel's CUfunction, cast
// to cudaKernel_t: in the simulator a CUkernel, a cudaKernel_t and a
// CUfunction are one object (see exec.c), so an interposer that receives the
// handle in __cudaLaunchKernel can ask cuKernelGetParamInfo /
// cuFuncGetParamInfo about it.
#include "rt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// --- prototypes -------------------------------------------------------------------
// The toolkit declares these only for C++ under __CUDACC__
// (crt/host_runtime.h, crt/device_functions.h); the same prototypes in C.
// __cudaPopCallConfiguration's last parameter is a cudaStream_t * passed as
// void *.
RT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin);
RT_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
RT_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle);
RT_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
RT_EXPORT char __cudaInitModule(void **fatCubinHandle);
RT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream);
RT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream);
RT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
RT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream);
RT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream);

// --- registry -----------------------------------------------------------------------
// Fat binaries, host-stub bindings and device-name implementations, under one
// mutex: registration happens at load, at exit and when a test registers an
// implementation, never on the launch path (launches read the lock-free
// host-symbol table of runtime.c).
#define RT_FATBIN_MAGIC 0x46415442u

typedef struct rt_fatbin_s {
    void *fatCubin; // first: *handle is the wrapper the program passed, as in CUDA
    uint32_t magic;
    bool ended; // __cudaRegisterFatBinaryEnd seen
    bool dead;  // unregistered: its kernels no longer launch
} rt_fatbin_t;

typedef struct rt_binding_s {
    const void *hostFun;
    char *name;
    rt_fatbin_t *fb;
} rt_binding_t;

typedef struct rt_devkernel_s {
    char *name;
    CUfunction f;
} rt_devkernel_t;

static pthread_mutex_t rt_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_binding_t *rt_bindings;
static size_t rt_nbindings, rt_capbindings;
static rt_devkernel_t *rt_devkernels;
static size_t rt_ndevkernels, rt_capdevkernels;

static bool rt_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return true;
    size_t c = *cap ? *cap * 2 : 32;
    void *p = realloc(*arr, c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

static CUfunction rt_devkernel_find(const char *name)
{
    for (size_t i = 0; i < rt_ndevkernels; i++)
        if (strcmp(rt_devkernels[i].name, name) == 0) return rt_devkernels[i].f;
    return NULL;
}

static bool rt_fatbin_ok(void **h)
{
    rt_fatbin_t *fb = (rt_fatbin_t *)h;
    return fb && fb->magic == RT_FATBIN_MAGIC;
}

// --- fat binaries ---------------------------------------------------------------------
RT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    // Called from a constructor, before main: no driver call here (the real
    // runtime also defers module loading to first use). The handle is never
    // freed, so a stale one stays recognisable.
    rt_fatbin_t *fb = calloc(1, sizeof *fb);
    if (!fb) abort();
    fb->fatCubin = fatCubin;
    fb->magic = RT_FATBIN_MAGIC;
    return (void **)fb;
}

RT_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    pthread_mutex_lock(&rt_reg_lock);
    if (rt_fatbin_ok(fatCubinHandle)) ((rt_fatbin_t *)fatCubinHandle)->ended = true;
    pthread_mutex_unlock(&rt_reg_lock);
}

RT_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    // At exit (atexit in the stub). The module is gone: its host stubs stop
    // resolving, so a launch from a later atexit handler or destructor fails
    // with cudaErrorInvalidDeviceFunction instead of running.
    pthread_mutex_lock(&rt_reg_lock);
    if (rt_fatbin_ok(fatCubinHandle)) {
        rt_fatbin_t *fb = (rt_fatbin_t *)fatCubinHandle;
        fb->dead = true;
        for (size_t i = 0; i < rt_nbindings; i++)
            if (rt_bindings[i].fb == fb) (void)rt_kernel_bind(rt_bindings[i].hostFun, NULL);
    }
    pthread_mutex_unlock(&rt_reg_lock);
}

RT_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)deviceFun; // nvcc passes the mangled name twice
    (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    // No error channel (void, called from a constructor): a malformed
    // registration is ignored, and launching that stub then fails with
    // cudaErrorInvalidDeviceFunction.
    if (!hostFun || !deviceName) return;
    pthread_mutex_lock(&rt_reg_lock);
    if (rt_fatbin_ok(fatCubinHandle) && !((rt_fatbin_t *)fatCubinHandle)->dead &&
        rt_grow((void **)&rt_bindings, &rt_capbindings, rt_nbindings, sizeof *rt_bindings)) {
        char *name = strdup(deviceName);
        if (name) {
            rt_bindings[rt_nbindings++] =
                (rt_binding_t){hostFun, name, (rt_fatbin_t *)fatCubinHandle};
            CUfunction f = rt_devkernel_find(name);
            if (f) (void)rt_kernel_bind(hostFun, f);
        }
    }
    pthread_mutex_unlock(&rt_reg_lock);
}

RT_EXPORT char __cudaInitModule(void **fatCubinHandle)
{
    // Used by nvcc's managed-variable support to make sure the module is
    // loaded in the current context: here, that the runtime starts.
    // Non-zero: initialised.
    if (!rt_fatbin_ok(fatCubinHandle)) return 0;
    return rt_enter() == cudaSuccess;
}

// --- device-name implementations --------------------------------------------------------------
RT_EXPORT int simrtRegisterDeviceKernel(const char *deviceName, const sim_kernel_desc_t *desc)
{
    if (!deviceName || !*deviceName || !desc) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    if (!rt_drv.simKernelCreate) return rt_ret(cudaErrorNotSupported);
    CUfunction f = NULL;
    CUresult r = rt_drv.simKernelCreate(desc, &f);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    e = cudaSuccess;
    pthread_mutex_lock(&rt_reg_lock);
    size_t i;
    for (i = 0; i < rt_ndevkernels; i++)
        if (strcmp(rt_devkernels[i].name, deviceName) == 0) break;
    if (i == rt_ndevkernels) {
        char *name = strdup(deviceName);
        if (!name || !rt_grow((void **)&rt_devkernels, &rt_capdevkernels, rt_ndevkernels,
                              sizeof *rt_devkernels)) {
            free(name);
            e = cudaErrorMemoryAllocation;
        } else {
            rt_devkernels[rt_ndevkernels++] = (rt_devkernel_t){name, NULL};
        }
    }
    if (e == cudaSuccess) {
        // Re-registration replaces the implementation for later lookups;
        // handles __cudaGetKernel already gave out keep the old kernel.
        rt_devkernels[i].f = f;
        for (size_t j = 0; j < rt_nbindings && e == cudaSuccess; j++)
            if (!rt_bindings[j].fb->dead && strcmp(rt_bindings[j].name, deviceName) == 0)
                e = rt_kernel_bind(rt_bindings[j].hostFun, f);
    }
    pthread_mutex_unlock(&rt_reg_lock);
    return rt_ret(e);
}

// --- call configuration
// --------------------------------------------------------------------------- `k<<<g, b, m,
// s>>>(a)` is `__cudaPushCallConfiguration(g, b, m, s) ? (void)0 : k(a)`: the arguments are
// evaluated after the push and may themselves launch kernels (a host function called in an
// argument), so the configuration is a per-thread stack, popped by the stub right before it
// launches.
#define RT_CALLCFG_DEPTH 64

typedef struct rt_callcfg_s {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
} rt_callcfg_t;

static __thread rt_callcfg_t t_callcfg[RT_CALLCFG_DEPTH];
static __thread int t_ncallcfg;

RT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream)
{
    // Non-zero skips the launch. Only a nesting deeper than any real program
    // reaches does that (recorded as cudaErrorLaunchOutOfResources: an
    // assumption, the real runtime's stack is not documented). The
    // configuration itself is checked at launch, as cudaLaunchKernel does.
    if (t_ncallcfg >= RT_CALLCFG_DEPTH) {
        (void)rt_ret(cudaErrorLaunchOutOfResources);
        return 1;
    }
    t_callcfg[t_ncallcfg++] = (rt_callcfg_t){gridDim, blockDim, sharedMem, stream};
    return 0;
}

RT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream)
{
    // A stub called without <<<>>> (nothing pushed): the stub returns without
    // launching; the error is cudaErrorMissingConfiguration.
    if (t_ncallcfg <= 0) return rt_ret(cudaErrorMissingConfiguration);
    rt_callcfg_t c = t_callcfg[--t_ncallcfg];
    if (gridDim) *gridDim = c.grid;
    if (blockDim) *blockDim = c.block;
    if (sharedMem) *sharedMem = c.shmem;
    if (stream) memcpy(stream, &c.stream, sizeof c.stream);
    return cudaSuccess;
}

// --- kernels and launches
// ---------------------------------------------------------------------------
RT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (!kernel) return rt_ret(cudaErrorInvalidValue);
    // A stub with no implementation registered yet gets NULL and
    // cudaErrorInvalidDeviceFunction. The stub caches the handle in a
    // function-local static on its first launch, so an implementation must be
    // registered before a kernel's first launch: launching with the NULL
    // handle keeps failing with cudaErrorInvalidDeviceFunction.
    CUfunction f = rt_kernel_lookup(hostFun);
    *kernel = (cudaKernel_t)(void *)f;
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return cudaSuccess;
}

RT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream)
{
    return rt_launch_func((CUfunction)(void *)kernel, gridDim, blockDim, args, sharedMem, stream,
                          false);
}

RT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream)
{
    return rt_launch_func((CUfunction)(void *)kernel, gridDim, blockDim, args, sharedMem, stream,
                          true);
}
