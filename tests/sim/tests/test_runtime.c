// SPDX-License-Identifier: MIT
// The simulated runtime (libcudart.so.13 look-alike): its ELF face (version
// node, no link to the driver), start-up, copies, errors and last-error
// state, launches, entry points, per-thread default streams, events.
//
// Criterion runs every test in its own process, so each starts with the
// runtime uninitialised and can set SIM_* variables before the first call.
#include <criterion/criterion.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simgpu.h"

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported and
// still called by libraries built against older toolkits: it is tested here.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

// _ptsz/_ptds twins are declared by the header only under per-thread
// compilation; this file uses the legacy names and calls the twins directly.
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaMemcpy_ptds(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *, void **, unsigned long long,
                                         enum cudaDriverEntryPointQueryResult *);

// --- a kernel: p[i] += 1 for i < n ---------------------------------------------------
static void add_one_body(void **args, const sim_launch_t *l)
{
    (void)l;
    uint8_t *p = *(uint8_t **)args[0];
    uint64_t n = *(uint64_t *)args[1];
    for (uint64_t i = 0; i < n; i++)
        p[i]++;
}

// The host symbol a program would pass to cudaLaunchKernel.
static void add_one(uint8_t *p, uint64_t n)
{
    (void)p, (void)n;
}

static void register_add_one(uint64_t ns_fixed)
{
    sim_kernel_desc_t d = {
        .name = "add_one",
        .fn = add_one_body,
        .nparams = 2,
        .param_size = {8, 8},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_RW, .count_param = 1, .scale = 1}},
        .ns_fixed = ns_fixed,
        .flops_param = -1,
        .flops_scale = 0,
    };
    cr_assert_eq(simrtRegisterKernel((const void *)add_one, &d), cudaSuccess);
}

static cudaError_t launch_add_one(uint8_t *p, uint64_t n, cudaStream_t s, bool ptsz)
{
    void *args[] = {&p, &n};
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    return ptsz ? cudaLaunchKernel_ptsz((const void *)add_one, g, b, args, 0, s)
                : cudaLaunchKernel((const void *)add_one, g, b, args, 0, s);
}

// --- ELF face ------------------------------------------------------------------------------
Test(runtime, symbols_carry_version_node)
{
    void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h, "the test links libcudart.so.13");
    void *v = dlvsym(h, "cudaMalloc", "libcudart.so.13");
    cr_assert_not_null(v);
    cr_assert_eq(v, (void *)cudaMalloc);
    cr_assert_not_null(dlvsym(h, "cudaLaunchKernel_ptsz", "libcudart.so.13"));
    cr_assert_not_null(dlvsym(h, "cudaMemcpy_ptds", "libcudart.so.13"));
    cr_assert_not_null(dlvsym(h, "simrtRegisterKernel", "libcudart.so.13"));
    cr_assert_null(dlvsym(h, "cudaMalloc", "libcudart.so.12"));
    cr_assert_null(dlvsym(h, "cudaMalloc", "LIBCUDART_13"));
    // Internals stay hidden.
    cr_assert_null(dlsym(h, "rt_enter"));
    cr_assert_null(dlsym(h, "rt_drv"));
    cr_assert_null(dlsym(h, "rt_error_from_cu"));
    dlclose(h);
}

Test(runtime, driver_loaded_lazily_not_linked)
{
    // Not NEEDED: nothing has loaded the driver before the first runtime call.
    cr_assert_null(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD));
    Dl_info info;
    cr_assert(dladdr((void *)cudaMalloc, &info));
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "readelf -d '%s'", info.dli_fname);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    char line[512];
    int needed = 0, cuda = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "(NEEDED)")) {
            needed++;
            if (strstr(line, "libcuda.")) cuda++;
        }
    }
    cr_assert_eq(pclose(f), 0, "readelf -d ran");
    cr_assert_gt(needed, 0, "readelf listed the NEEDED entries");
    cr_assert_eq(cuda, 0, "libcudart must not link libcuda");

    cr_assert_eq(cudaFree(NULL), cudaSuccess);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h, "the first call dlopens the driver");
    dlclose(h);
}

// Run by runtime/no_driver below in a child whose environment is empty: no
// LD_LIBRARY_PATH, so libcuda.so.1 cannot be found (libcudart itself comes
// from the executable's RUNPATH), and none of criterion's own worker
// variables, which make a nested criterion run abort.
Test(runtime, no_driver_child)
{
    if (!getenv("SIMRT_NODRIVER_CHILD"))
        cr_skip_test("run by runtime/no_driver in a child without the driver");
    void *p = NULL;
    cr_assert_eq(cudaMalloc(&p, 64), cudaErrorInsufficientDriver);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInsufficientDriver);
    cr_assert_eq(cudaGetLastError(), cudaErrorInsufficientDriver);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    int n = 7;
    cr_assert_eq(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
    cr_assert_eq(n, 0);
    int v = -1;
    cr_assert_eq(cudaDriverGetVersion(&v), cudaSuccess);
    cr_assert_eq(v, 0);
    cr_assert_eq(cudaStreamSynchronize(NULL), cudaErrorInsufficientDriver);
    cr_assert_null(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD));
}

Test(runtime, no_driver)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert_gt(len, 0);
    exe[len] = 0;
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd,
             "env -i PATH=/usr/bin:/bin SIMRT_NODRIVER_CHILD=1 '%s' "
             "--filter='runtime/no_driver_child' 2>&1",
             exe);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = 0;
    int st = pclose(f);
    cr_assert_eq(st, 0, "child failed:\n%s", buf);
    cr_assert(strstr(buf, "Passing: 1"), "the child ran the test:\n%s", buf);
}

// --- copies ------------------------------------------------------------------------------------
Test(runtime, malloc_memcpy_free_round_trip)
{
    enum { N = 8192 };
    static uint8_t in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (uint8_t)(i * 7 + 3);
    void *a = NULL, *b = NULL;
    cr_assert_eq(cudaMalloc(&a, N), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, N), cudaSuccess);
    cr_assert_not_null(a);
    cr_assert_neq(a, b);
    cr_assert_eq(cudaMemcpy(a, in, N, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaMemcpy(b, a, N, cudaMemcpyDeviceToDevice), cudaSuccess);
    cr_assert_eq(cudaMemcpy(out, b, N, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_arr_eq(out, in, N);
    cr_assert_eq(cudaMemset(b, 0x1A5, 100), cudaSuccess); // low byte 0xA5
    cr_assert_eq(cudaMemcpy(out, b, N, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(out[i], 0xA5, "byte %d", i);
    cr_assert_eq(out[100], in[100]);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    void *z = (void *)1;
    cr_assert_eq(cudaMalloc(&z, 0), cudaSuccess);
    cr_assert_null(z);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

Test(runtime, memcpy_default_and_host_kinds)
{
    enum { N = 4096 };
    uint8_t *pinned = NULL, *dev = NULL;
    static uint8_t page[N], back[N];
    cr_assert_eq(cudaMallocHost((void **)&pinned, N), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dev, N), cudaSuccess);
    for (int i = 0; i < N; i++)
        page[i] = (uint8_t)(255 - i);
    // pageable -> device -> pinned, all with cudaMemcpyDefault
    cr_assert_eq(cudaMemcpy(dev, page, N, cudaMemcpyDefault), cudaSuccess);
    cr_assert_eq(cudaMemcpy(pinned, dev, N, cudaMemcpyDefault), cudaSuccess);
    cr_assert_arr_eq(pinned, page, N);
    // device -> device and host -> host with Default
    uint8_t *dev2 = NULL;
    cr_assert_eq(cudaMalloc((void **)&dev2, N), cudaSuccess);
    cr_assert_eq(cudaMemcpy(dev2, dev, N, cudaMemcpyDefault), cudaSuccess);
    memset(back, 0, N);
    cr_assert_eq(cudaMemcpy(back, dev2, N, cudaMemcpyDefault), cudaSuccess);
    cr_assert_arr_eq(back, page, N);
    memset(back, 0, N);
    cr_assert_eq(cudaMemcpy(back, pinned, N, cudaMemcpyDefault), cudaSuccess);
    cr_assert_arr_eq(back, page, N);
    memset(back, 0, N);
    cr_assert_eq(cudaMemcpy(back, page, N, cudaMemcpyHostToHost), cudaSuccess);
    cr_assert_arr_eq(back, page, N);
    // async into pinned memory, ordered by a stream sync
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    memset(pinned, 0, N);
    cr_assert_eq(cudaMemcpyAsync(pinned, dev, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_arr_eq(pinned, page, N);
    cr_assert_eq(cudaMemsetAsync(dev, 7, N, s), cudaSuccess);
    cr_assert_eq(cudaMemcpyAsync(pinned, dev, N, cudaMemcpyDefault, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(pinned[0], 7);
    cr_assert_eq(pinned[N - 1], 7);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);

    // Wrong directions: the driver's explicit copies check the pointers.
    cr_assert_eq(cudaMemcpy(dev, page, N, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(page, dev, N, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(page, dev, N, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(page, dev, N, (enum cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
    cr_assert_eq(cudaFreeHost(pinned), cudaSuccess);
    cr_assert_eq(cudaFree(dev), cudaSuccess);
    cr_assert_eq(cudaFree(dev2), cudaSuccess);
}

Test(runtime, host_alloc_register_meminfo)
{
    void *h = NULL;
    cr_assert_eq(cudaHostAlloc(&h, 1 << 20, cudaHostAllocPortable), cudaSuccess);
    cr_assert_not_null(h);
    cr_assert_eq(cudaFreeHost(h), cudaSuccess);
    size_t sz = 1 << 20;
    void *m = aligned_alloc(4096, sz);
    cr_assert_eq(cudaHostRegister(m, sz, cudaHostRegisterDefault), cudaSuccess);
    cr_assert_eq(cudaHostRegister(m, sz, cudaHostRegisterDefault),
                 cudaErrorHostMemoryAlreadyRegistered);
    cr_assert_eq(cudaHostUnregister(m), cudaSuccess);
    cr_assert_eq(cudaHostUnregister(m), cudaErrorHostMemoryNotRegistered);
    free(m);
    size_t fr = 0, tot = 0;
    cr_assert_eq(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    cr_assert_gt(tot, 0);
    cr_assert_leq(fr, tot);
}

// The pool calls PyTorch's backend:cudaMallocAsync makes (lazy_init_device
// sets the release threshold to UINT64_MAX; emptyCache synchronises and
// trims to 0), and cudaMemGetInfo seeing the reserve through all of them.
Test(runtime, memory_pool_calls)
{
    setenv("SIM_CAPACITY", "1G", 1);
    cudaMemPool_t pool = NULL, cur = NULL;
    cr_assert_eq(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    cr_assert_not_null(pool);
    cr_assert_eq(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
    cr_assert_eq(cur, pool);
    cr_assert_eq(cudaDeviceSetMemPool(0, pool), cudaSuccess);
    cr_assert_eq(cudaDeviceGetDefaultMemPool(&cur, 1), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDevice);
    uint64_t keep = UINT64_MAX;
    cr_assert_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                 cudaSuccess);
    int on = 1;
    cr_assert_eq(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &on),
                 cudaSuccess);
    size_t fr0, fr, tot;
    cr_assert_eq(cudaMemGetInfo(&fr0, &tot), cudaSuccess);
    void *a = NULL, *b = NULL;
    cr_assert_eq(cudaMallocAsync(&a, 10u << 20, NULL), cudaSuccess);
    cr_assert_eq(cudaMallocFromPoolAsync(&b, 6u << 20, pool, NULL), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, NULL), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(b, NULL), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    cr_assert_eq(fr0 - fr, 16u << 20, "the pool kept its reserve through the sync");
    uint64_t v = 0;
    cr_assert_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v), cudaSuccess);
    cr_assert_eq(v, 16u << 20);
    cr_assert_eq(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v), cudaSuccess);
    cr_assert_eq(v, 0);
    cr_assert_eq(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
    cr_assert_eq(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    cr_assert_eq(fr, fr0);
    cr_assert_eq(cudaMemPoolTrimTo((cudaMemPool_t)&v, 0), cudaErrorInvalidValue);
    cr_assert_eq(cudaMallocFromPoolAsync(NULL, 16, pool, NULL), cudaErrorInvalidValue);
}

// --- errors and last-error state -----------------------------------------------------------------
Test(runtime, errors_and_last_error)
{
    void *a = NULL;
    cr_assert_eq(cudaMalloc(&a, 4096), cudaSuccess);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaFree(a), cudaErrorInvalidValue, "double free");
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidValue, "peek does not reset");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "get resets");

    // A handle that is no stream (zeroed memory: no live stream's magic).
    static uint64_t fake[64];
    cr_assert_eq(cudaStreamSynchronize((cudaStream_t)fake), cudaErrorInvalidResourceHandle);
    // A later success does not clear the recorded error.
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidResourceHandle);

    cr_assert_eq(cudaSetDevice(99), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDevice);

    cr_assert_str_eq(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
    cr_assert_str_eq(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    cr_assert_str_eq(cudaGetErrorName(cudaErrorStreamCaptureUnsupported),
                     "cudaErrorStreamCaptureUnsupported");
    cr_assert_str_eq(cudaGetErrorName((cudaError_t)12345), "unrecognized error code");
}

static void *peek_thread(void *arg)
{
    *(cudaError_t *)arg = cudaPeekAtLastError();
    return NULL;
}

Test(runtime, last_error_is_per_thread)
{
    cr_assert_eq(cudaFree((void *)16), cudaErrorInvalidValue);
    cudaError_t other = cudaErrorUnknown;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, peek_thread, &other), 0);
    pthread_join(t, NULL);
    cr_assert_eq(other, cudaSuccess, "another thread has its own last error");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
}

Test(runtime, out_of_memory)
{
    setenv("SIM_CAPACITY", "64M", 1); // read at cuInit, i.e. at the first runtime call
    void *a = NULL, *b = NULL;
    cr_assert_eq(cudaMalloc(&a, 32u << 20), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, 64u << 20), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&b, 64u << 20, NULL), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, 48u << 20), cudaSuccess, "memory came back");
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), cudaSuccess);
    cr_assert_eq(st.capacity_bytes, 64u << 20);
    cr_assert_geq(st.peak_device_bytes, 48u << 20);
}

// SIM_FAIL counts the driver entry points the runtime calls (through
// cuGetProcAddress) like the program's own, and the runtime turns the
// injected driver error into its own code, as for any driver failure.
Test(runtime, injected_driver_failures)
{
    setenv("SIM_FAIL", "cuMemAlloc:2,cuLaunchKernel:1,cuMemAllocHost:1,cuEventRecord:1", 1);
    register_add_one(1000);
    uint8_t *a = NULL, *b = (uint8_t *)0x1234;
    cr_assert_eq(cudaMalloc((void **)&a, 4096), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&b, 4096), cudaErrorMemoryAllocation);
    cr_assert_eq(b, (uint8_t *)0x1234, "output untouched");
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaMemset(a, 1, 4096), cudaSuccess);
    cr_assert_eq(launch_add_one(a, 4096, NULL, false), cudaErrorLaunchOutOfResources);
    cr_assert_eq(launch_add_one(a, 4096, NULL, true), cudaSuccess, "the _ptsz twin: call 2");
    uint8_t out[4096];
    cr_assert_eq(cudaMemcpy(out, a, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(out[0], 2, "one launch ran");
    void *h = NULL;
    cr_assert_eq(cudaMallocHost(&h, 4096), cudaErrorMemoryAllocation); // cuMemAllocHost
    cr_assert_eq(cudaHostAlloc(&h, 4096, 0), cudaSuccess);             // cuMemHostAlloc
    cudaEvent_t e;
    cr_assert_eq(cudaEventCreate(&e), cudaSuccess);
    cr_assert_eq(cudaEventRecord(e, NULL), cudaErrorLaunchFailure);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), cudaSuccess);
    cr_assert_eq(st.injected, 4);
    cr_assert_eq(st.launches, 1);
    cr_assert_eq(st.live_pinned_bytes, 4096);
}

// --- launches ------------------------------------------------------------------------------------
Test(runtime, register_and_launch)
{
    register_add_one(1000);
    enum { N = 1000 };
    uint8_t host[N], *dev = NULL;
    for (int i = 0; i < N; i++)
        host[i] = (uint8_t)i;
    cr_assert_eq(cudaMalloc((void **)&dev, N), cudaSuccess);
    cr_assert_eq(cudaMemcpy(dev, host, N, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(launch_add_one(dev, N, NULL, false), cudaSuccess);
    cr_assert_eq(launch_add_one(dev, N / 2, NULL, false), cudaSuccess);
    uint8_t out[N];
    cr_assert_eq(cudaMemcpy(out, dev, N, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], (uint8_t)(i + (i < N / 2 ? 2 : 1)), "byte %d", i);

    // cudaLaunchKernelExC on a created stream
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    uint64_t n = N;
    void *args[] = {&dev, &n};
    cudaLaunchConfig_t cfg = {.gridDim = {2, 1, 1}, .blockDim = {64, 1, 1}, .stream = s};
    cr_assert_eq(cudaLaunchKernelExC(&cfg, (const void *)add_one, args), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(cudaMemcpy(out, dev, N, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(out[N - 1], (uint8_t)(N - 1 + 2));

    // Unknown symbol, bad configuration.
    int not_a_kernel;
    cr_assert_eq(cudaLaunchKernel(&not_a_kernel, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
    cr_assert_eq(
        cudaLaunchKernel((const void *)add_one, (dim3){0, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
        cudaErrorInvalidConfiguration);
    cr_assert_eq(
        cudaLaunchKernel((const void *)add_one, (dim3){1, 1, 1}, (dim3){2048, 1, 1}, args, 0, NULL),
        cudaErrorInvalidConfiguration);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), cudaSuccess);
    cr_assert_eq(st.launches, 3);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
    cr_assert_eq(cudaFree(dev), cudaSuccess);
}

Test(runtime, function_queries)
{
    register_add_one(0);
    size_t off = 99, sz = 99;
    cr_assert_eq(cudaFuncGetParamInfo((const void *)add_one, 0, &off, &sz), cudaSuccess);
    cr_assert_eq(off, 0);
    cr_assert_eq(sz, 8);
    cr_assert_eq(cudaFuncGetParamInfo((const void *)add_one, 1, &off, &sz), cudaSuccess);
    cr_assert_eq(off, 8);
    cr_assert_eq(sz, 8);
    cr_assert_eq(cudaFuncGetParamInfo((const void *)add_one, 2, &off, &sz), cudaErrorInvalidValue,
                 "counting parameters ends with an invalid index");
    const char *name = NULL;
    cr_assert_eq(cudaFuncGetName(&name, (const void *)add_one), cudaSuccess);
    cr_assert_str_eq(name, "add_one");
    cudaFunction_t f = NULL;
    cr_assert_eq(cudaGetFuncBySymbol(&f, (const void *)add_one), cudaSuccess);
    cr_assert_not_null(f);
    // The runtime's handle is the driver's CUfunction: its parameter info agrees.
    CUresult (*param_info)(CUfunction, size_t, size_t *, size_t *) = NULL;
    enum cudaDriverEntryPointQueryResult q;
    cr_assert_eq(
        cudaGetDriverEntryPoint("cuFuncGetParamInfo", (void **)&param_info, cudaEnableDefault, &q),
        cudaSuccess);
    cr_assert_eq(param_info((CUfunction)f, 1, &off, &sz), CUDA_SUCCESS);
    cr_assert_eq(off, 8);
    int x;
    cr_assert_eq(cudaGetFuncBySymbol(&f, &x), cudaErrorInvalidDeviceFunction);
    cr_assert_eq(cudaFuncGetName(&name, &x), cudaErrorInvalidDeviceFunction);
}

// --- driver entry points ----------------------------------------------------------------------
Test(runtime, driver_entry_point)
{
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = NULL;
    CUresult (*mem_free)(CUdeviceptr) = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cr_assert_eq(cudaGetDriverEntryPoint("cuMemAlloc", (void **)&mem_alloc, cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(q, cudaDriverEntryPointSuccess);
    cr_assert_not_null(mem_alloc);
    cr_assert_eq(cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&mem_free, 12000,
                                                  cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(q, cudaDriverEntryPointSuccess);
    // The pointer works in the runtime's context: allocate through the
    // driver, copy through the runtime.
    CUdeviceptr d = 0;
    cr_assert_eq(mem_alloc(&d, 256), CUDA_SUCCESS);
    uint8_t in[256], out[256];
    for (int i = 0; i < 256; i++)
        in[i] = (uint8_t)(i ^ 0x5c);
    cr_assert_eq(cudaMemcpy((void *)(uintptr_t)d, in, 256, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaMemcpy(out, (void *)(uintptr_t)d, 256, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_arr_eq(out, in, 256);
    cr_assert_eq(mem_free(d), CUDA_SUCCESS);

    void *p = (void *)1;
    q = cudaDriverEntryPointSuccess;
    // The default flag follows the calling entry point: legacy for
    // cudaGetDriverEntryPoint, per-thread for its _ptsz twin.
    void *leg = NULL, *pts = NULL, *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h);
    cr_assert_eq(cudaGetDriverEntryPoint("cuLaunchKernel", &leg, cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(cudaGetDriverEntryPoint_ptsz("cuLaunchKernel", &pts, cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(leg, dlsym(h, "cuLaunchKernel"));
    cr_assert_eq(pts, dlsym(h, "cuLaunchKernel_ptsz"));
    cr_assert_eq(
        cudaGetDriverEntryPoint("cuLaunchKernel", &pts, cudaEnablePerThreadDefaultStream, &q),
        cudaSuccess);
    cr_assert_eq(pts, dlsym(h, "cuLaunchKernel_ptsz"));
    dlclose(h);

    // Not found is a success with a NULL pointer, the reason in the status.
    cr_assert_eq(cudaGetDriverEntryPoint("cuNoSuchEntryPoint", &p, cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(q, cudaDriverEntryPointSymbolNotFound);
    cr_assert_null(p);
    // cuMemCreate arrived in CUDA 10.2.
    p = (void *)1;
    cr_assert_eq(cudaGetDriverEntryPointByVersion("cuMemCreate", &p, 10000, cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(q, cudaDriverEntryPointVersionNotSufficent);
    cr_assert_null(p);
    cr_assert_eq(cudaGetDriverEntryPointByVersion("cuMemCreate", &p, 10020, cudaEnableDefault, &q),
                 cudaSuccess);
    cr_assert_eq(q, cudaDriverEntryPointSuccess);
    cr_assert_not_null(p);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

// --- per-thread default stream ------------------------------------------------------------------
static void *query_ptsz_thread(void *arg)
{
    *(cudaError_t *)arg = cudaStreamQuery_ptsz(NULL);
    return NULL;
}

Test(runtime, ptsz_null_stream_is_per_thread)
{
    // A 50 ms kernel: still running on the virtual clock when queried.
    register_add_one(50u * 1000 * 1000);
    uint8_t *dev = NULL;
    cr_assert_eq(cudaMalloc((void **)&dev, 64), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(launch_add_one(dev, 64, NULL, true), cudaSuccess);
    // The work went to this thread's per-thread stream ...
    cr_assert_eq(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
    cr_assert_eq(cudaStreamQuery_ptsz(NULL), cudaErrorNotReady);
    // ... not to the legacy stream, nor to another thread's per-thread stream.
    cr_assert_eq(cudaStreamQuery(NULL), cudaSuccess);
    cudaError_t other = cudaErrorUnknown;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, query_ptsz_thread, &other), 0);
    pthread_join(t, NULL);
    cr_assert_eq(other, cudaSuccess);
    // cudaErrorNotReady is not an error: nothing was recorded.
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize_ptsz(NULL), cudaSuccess);
    cr_assert_eq(cudaStreamQuery(cudaStreamPerThread), cudaSuccess);

    // And the legacy launch on 0 goes to the legacy stream.
    cr_assert_eq(launch_add_one(dev, 64, NULL, false), cudaSuccess);
    cr_assert_eq(cudaStreamQuery(NULL), cudaErrorNotReady);
    cr_assert_eq(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    uint8_t out[64];
    cr_assert_eq(cudaMemcpy_ptds(out, dev, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(out[0], 2);
    cr_assert_eq(cudaPeekAtLastError(), cudaSuccess);
}

// --- events ------------------------------------------------------------------------------------
Test(runtime, events_elapsed_time)
{
    register_add_one(2u * 1000 * 1000); // 2 ms
    uint8_t *dev = NULL;
    cr_assert_eq(cudaMalloc((void **)&dev, 64), cudaSuccess);
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cudaEvent_t a, b, c;
    cr_assert_eq(cudaEventCreate(&a), cudaSuccess);
    cr_assert_eq(cudaEventCreateWithFlags(&b, cudaEventDefault), cudaSuccess);
    cr_assert_eq(cudaEventCreateWithFlags(&c, cudaEventDisableTiming), cudaSuccess);
    cr_assert_eq(cudaEventRecord(a, s), cudaSuccess);
    cr_assert_eq(launch_add_one(dev, 64, s, false), cudaSuccess);
    cr_assert_eq(cudaEventRecordWithFlags(b, s, cudaEventRecordDefault), cudaSuccess);
    cr_assert_eq(cudaEventQuery(b), cudaErrorNotReady);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "NotReady is not recorded");
    cr_assert_eq(cudaEventSynchronize(b), cudaSuccess);
    cr_assert_eq(cudaEventQuery(b), cudaSuccess);
    float ms = -1;
    cr_assert_eq(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
    cr_assert_geq(ms, 2.0f);
    cr_assert_lt(ms, 2.5f, "the kernel's cost is 2 ms, got %f", ms);
    // Another stream waits on b, then records c.
    cudaStream_t s2;
    cr_assert_eq(cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, 0), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(s2, b, 0), cudaSuccess);
    cr_assert_eq(cudaEventRecord(c, s2), cudaSuccess);
    cr_assert_eq(cudaEventSynchronize(c), cudaSuccess);
    cr_assert_eq(cudaEventElapsedTime(&ms, a, c), cudaErrorInvalidResourceHandle,
                 "an event created with cudaEventDisableTiming has no time");
    cr_assert_eq(cudaEventDestroy(a), cudaSuccess);
    cr_assert_eq(cudaEventDestroy(b), cudaSuccess);
    cr_assert_eq(cudaEventDestroy(c), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s2), cudaSuccess);
}

// --- stream capture ----------------------------------------------------------------------------
Test(runtime, stream_capture)
{
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusInvalidated;
    cr_assert_eq(cudaStreamIsCapturing(s, &cs), cudaSuccess);
    cr_assert_eq(cs, cudaStreamCaptureStatusNone);
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaStreamIsCapturing(s, &cs), cudaSuccess);
    cr_assert_eq(cs, cudaStreamCaptureStatusActive);
    // A synchronous call on a capturing stream is not capturable.
    cr_assert_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    cr_assert(e == cudaSuccess || e == cudaErrorStreamCaptureInvalidated, "got %d", e);
    cr_assert_eq(cudaStreamIsCapturing(s, &cs), cudaSuccess);
    cr_assert_eq(cs, cudaStreamCaptureStatusNone);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
}

// --- devices and versions ----------------------------------------------------------------------
Test(runtime, devices_and_versions)
{
    int n = 0, d = -1, v = 0;
    cr_assert_eq(cudaGetDeviceCount(&n), cudaSuccess);
    cr_assert_geq(n, 1);
    cr_assert_eq(cudaGetDevice(&d), cudaSuccess);
    cr_assert_eq(d, 0);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaSetDevice(n), cudaErrorInvalidDevice);
    struct cudaDeviceProp p;
    cr_assert_eq(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    cr_assert_gt(strlen(p.name), 0);
    size_t fr, tot;
    cr_assert_eq(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    cr_assert_eq(p.totalGlobalMem, tot);
    cr_assert_geq(p.major, 8);
    cr_assert_eq(p.warpSize, 32);
    int mp = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&mp, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    cr_assert_eq(mp, p.multiProcessorCount);
    cr_assert_gt(mp, 0);
    cr_assert_eq(cudaRuntimeGetVersion(&v), cudaSuccess);
    cr_assert_eq(v, CUDART_VERSION);
    cr_assert_eq(cudaDriverGetVersion(&v), cudaSuccess);
    cr_assert_geq(v, 13000);
}

// --- threads ------------------------------------------------------------------------------------
// Many threads make their first runtime call at once (start-up through
// pthread_once, each thread's current context), register their own kernels
// while others launch (the lock-free registry), and use their own per-thread
// default streams.
enum { STRESS_THREADS = 8, STRESS_ROUNDS = 20, STRESS_BYTES = 4096 };
static char stress_symbols[STRESS_THREADS]; // any address can be a kernel's host symbol

static void *stress_thread(void *arg)
{
    int id = (int)(intptr_t)arg;
    sim_kernel_desc_t d = {
        .name = "add_one",
        .fn = add_one_body,
        .nparams = 2,
        .param_size = {8, 8},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_RW, .count_param = 1, .scale = 1}},
        .ns_fixed = 1000,
        .flops_param = -1,
    };
    const void *sym = &stress_symbols[id];
    if (simrtRegisterKernel(sym, &d) != cudaSuccess) return (void *)"register";
    uint8_t *dev = NULL;
    uint8_t buf[STRESS_BYTES];
    if (cudaMalloc((void **)&dev, STRESS_BYTES) != cudaSuccess) return (void *)"malloc";
    memset(buf, id, sizeof buf);
    if (cudaMemcpy_ptds(dev, buf, STRESS_BYTES, cudaMemcpyHostToDevice) != cudaSuccess)
        return (void *)"memcpy H2D";
    uint64_t n = STRESS_BYTES;
    void *args[] = {&dev, &n};
    for (int r = 0; r < STRESS_ROUNDS; r++)
        if (cudaLaunchKernel_ptsz(sym, (dim3){1, 1, 1}, (dim3){128, 1, 1}, args, 0, NULL) !=
            cudaSuccess)
            return (void *)"launch";
    if (cudaStreamSynchronize_ptsz(NULL) != cudaSuccess) return (void *)"sync";
    if (cudaMemcpy_ptds(buf, dev, STRESS_BYTES, cudaMemcpyDeviceToHost) != cudaSuccess)
        return (void *)"memcpy D2H";
    for (int i = 0; i < STRESS_BYTES; i++)
        if (buf[i] != (uint8_t)(id + STRESS_ROUNDS)) return (void *)"bytes";
    if (cudaFree(dev) != cudaSuccess) return (void *)"free";
    if (cudaPeekAtLastError() != cudaSuccess) return (void *)"last error";
    return NULL;
}

Test(runtime, threads_start_register_launch)
{
    pthread_t t[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, stress_thread, (void *)(intptr_t)i), 0);
    for (int i = 0; i < STRESS_THREADS; i++) {
        void *res = NULL;
        pthread_join(t[i], &res);
        cr_assert_null(res, "thread %d failed at %s", i, res ? (const char *)res : "");
    }
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), cudaSuccess);
    cr_assert_eq(st.launches, STRESS_THREADS * STRESS_ROUNDS);
    cr_assert_eq(st.races, 0);
}
