// SPDX-License-Identifier: MIT
// Fault injection (SIM_FAIL) and the live-resource figures of the simulated
// driver. An injected failure must be indistinguishable from a call that was
// never made, apart from its error: every test checks the bytes, handles,
// mappings, clocks and counters the call would have changed.
//
// Criterion runs every test in its own process: SIM_FAIL set before cuInit
// applies to that test alone.
#include <criterion/criterion.h>
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_test.h"
#include "simgpu.h"

// Per-thread-stream twins: exported, declared by cuda.h only for per-thread
// builds.
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra);

#define IS(x, e) cr_assert_eq((x), (e), "%s: got %d, want %d", #x, (int)(x), (int)(e))
#define MiB      (1ull << 20)
#define G2       (2 * MiB)
#define MS       (1000000ull)

// --- fixtures ------------------------------------------------------------------------
// start() with these failures injected (NULL: none) on a 1 GiB device.
static void start_failing(const char *fail)
{
    if (fail)
        setenv("SIM_FAIL", fail, 1);
    else
        unsetenv("SIM_FAIL");
    setenv("SIM_CAPACITY", "1G", 1);
    start();
}

static sim_stats_t stats(void)
{
    sim_stats_t s;
    OK(simGetStats(&s));
    return s;
}

// The i-th injected failure was the n-th call of `call`, returning e.
static void injected(uint64_t i, const char *call, uint64_t n, CUresult e)
{
    const char *c = NULL;
    uint64_t got_n = 0;
    CUresult got_e = CUDA_SUCCESS;
    OK(simInjectedGet(i, &c, &got_n, &got_e));
    cr_assert_str_eq(c, call);
    cr_assert_eq(got_n, n, "%s: occurrence %llu, want %llu", call, (unsigned long long)got_n,
                 (unsigned long long)n);
    cr_assert_eq(got_e, e, "%s: error %d, want %d", call, got_e, e);
}

static uint64_t injected_count(void)
{
    uint64_t n = 0;
    OK(simInjectedCount(&n));
    return n;
}

static CUmemAllocationProp dev_prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    return p;
}

static CUmemAccessDesc rw(void)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

static unsigned long long access_of(CUdeviceptr va)
{
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    unsigned long long f = 99;
    OK(cuMemGetAccess(&f, &loc, va));
    return f;
}

// One granule reserved, backed, mapped and accessible.
static CUdeviceptr vmm_granule(CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp p = dev_prop();
    CUmemAccessDesc a = rw();
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, G2, 0, 0, 0));
    OK(cuMemCreate(h, G2, &p, 0));
    OK(cuMemMap(va, G2, 0, *h, 0));
    OK(cuMemSetAccess(va, G2, &a, 1));
    return va;
}

// fill(p, n, v): p[i] = v for i < n bytes, taking ns of compute time.
static void fill_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    memset(*(void **)args[0], (int)*(unsigned *)args[2], *(uint64_t *)args[1]);
}

static CUfunction make_fill(uint64_t ns)
{
    sim_kernel_desc_t d = {
        .name = "fill",
        .fn = fill_fn,
        .nparams = 3,
        .param_size = {8, 8, 4},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_W, .count_param = 1, .scale = 1}},
        .ns_fixed = ns,
        .flops_param = -1,
    };
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    return f;
}

static CUresult fill(CUfunction f, CUdeviceptr p, uint64_t n, unsigned v, CUstream s)
{
    void *args[] = {&p, &n, &v};
    return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
}

// A kernel that only takes time.
static CUfunction make_sleep(uint64_t ns)
{
    sim_kernel_desc_t d = {.name = "sleep", .ns_fixed = ns, .flops_param = -1};
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    return f;
}

static void sleep_on(CUfunction f, CUstream s)
{
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
}

static void expect_bytes(CUdeviceptr d, size_t n, unsigned char v)
{
    unsigned char buf[4096];
    cr_assert_leq(n, sizeof buf);
    OK(cuMemcpyDtoH(buf, d, n));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(buf[i], v, "byte %zu is %u, want %u", i, buf[i], v);
}

// --- every injectable call, its default error -------------------------------------------
// Each call fails at its first occurrence before it looks at its arguments
// (so NULLs are safe here), with the default documented in internal.h; its
// second call is not injected and fails on the NULL arguments instead.
// clang-format off
#define EVERY_CALL(X)                                                                   \
    X(cuMemAlloc, CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(NULL, 0))                        \
    X(cuMemAllocAsync, CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocAsync(NULL, 0, NULL))        \
    X(cuMemAllocFromPoolAsync, CUDA_ERROR_OUT_OF_MEMORY,                                \
      cuMemAllocFromPoolAsync(NULL, 0, NULL, NULL))                                     \
    X(cuMemAllocHost, CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocHost(NULL, 0))                \
    X(cuMemHostAlloc, CUDA_ERROR_OUT_OF_MEMORY, cuMemHostAlloc(NULL, 0, 0))             \
    X(cuMemHostRegister, CUDA_ERROR_OUT_OF_MEMORY, cuMemHostRegister(NULL, 0, 0))       \
    X(cuMemHostUnregister, CUDA_ERROR_OUT_OF_MEMORY, cuMemHostUnregister(NULL))         \
    X(cuMemCreate, CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(NULL, 0, NULL, 0))             \
    X(cuMemAddressReserve, CUDA_ERROR_OUT_OF_MEMORY, cuMemAddressReserve(NULL, 0, 0, 0, 0)) \
    X(cuMemMap, CUDA_ERROR_OUT_OF_MEMORY, cuMemMap(0, 0, 0, 0, 0))                      \
    X(cuEventCreate, CUDA_ERROR_OUT_OF_MEMORY, cuEventCreate(NULL, 0))                  \
    X(cuStreamCreate, CUDA_ERROR_OUT_OF_MEMORY, cuStreamCreate(NULL, 0))                \
    X(cuStreamCreateWithPriority, CUDA_ERROR_OUT_OF_MEMORY,                             \
      cuStreamCreateWithPriority(NULL, 0, 0))                                           \
    X(cuMemSetAccess, CUDA_ERROR_LAUNCH_FAILED, cuMemSetAccess(0, 0, NULL, 0))          \
    X(cuMemUnmap, CUDA_ERROR_LAUNCH_FAILED, cuMemUnmap(0, 0))                           \
    X(cuMemRelease, CUDA_ERROR_LAUNCH_FAILED, cuMemRelease(0))                          \
    X(cuMemFree, CUDA_ERROR_LAUNCH_FAILED, cuMemFree(0))                                \
    X(cuMemFreeHost, CUDA_ERROR_LAUNCH_FAILED, cuMemFreeHost(NULL))                     \
    X(cuMemcpy, CUDA_ERROR_LAUNCH_FAILED, cuMemcpy(0, 0, 1))                            \
    X(cuMemcpyAsync, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyAsync(0, 0, 1, NULL))            \
    X(cuMemcpyDtoH, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyDtoH(NULL, 0, 1))                 \
    X(cuMemcpyHtoD, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyHtoD(0, NULL, 1))                 \
    X(cuMemcpyDtoD, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyDtoD(0, 0, 1))                    \
    X(cuMemcpyDtoHAsync, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyDtoHAsync(NULL, 0, 1, NULL)) \
    X(cuMemcpyHtoDAsync, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyHtoDAsync(0, NULL, 1, NULL)) \
    X(cuMemcpyDtoDAsync, CUDA_ERROR_LAUNCH_FAILED, cuMemcpyDtoDAsync(0, 0, 1, NULL))    \
    X(cuMemsetD8, CUDA_ERROR_LAUNCH_FAILED, cuMemsetD8(0, 0, 1))                        \
    X(cuMemsetD32, CUDA_ERROR_LAUNCH_FAILED, cuMemsetD32(0, 0, 1))                      \
    X(cuMemsetD8Async, CUDA_ERROR_LAUNCH_FAILED, cuMemsetD8Async(0, 0, 1, NULL))        \
    X(cuMemsetD32Async, CUDA_ERROR_LAUNCH_FAILED, cuMemsetD32Async(0, 0, 1, NULL))      \
    X(cuEventRecord, CUDA_ERROR_LAUNCH_FAILED, cuEventRecord(NULL, NULL))               \
    X(cuEventRecordWithFlags, CUDA_ERROR_LAUNCH_FAILED,                                 \
      cuEventRecordWithFlags(NULL, NULL, 0))                                            \
    X(cuEventQuery, CUDA_ERROR_LAUNCH_FAILED, cuEventQuery(NULL))                       \
    X(cuEventSynchronize, CUDA_ERROR_LAUNCH_FAILED, cuEventSynchronize(NULL))           \
    X(cuStreamWaitEvent, CUDA_ERROR_LAUNCH_FAILED, cuStreamWaitEvent(NULL, NULL, 0))    \
    X(cuStreamQuery, CUDA_ERROR_LAUNCH_FAILED, cuStreamQuery((CUstream)&bogus))         \
    X(cuStreamSynchronize, CUDA_ERROR_LAUNCH_FAILED,                                    \
      cuStreamSynchronize((CUstream)&bogus))                                            \
    X(cuCtxSynchronize, CUDA_ERROR_LAUNCH_FAILED, cuCtxSynchronize())                   \
    X(cuGraphLaunch, CUDA_ERROR_LAUNCH_FAILED, cuGraphLaunch(NULL, NULL))               \
    X(cuLaunchKernel, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,                               \
      cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL))                      \
    X(cuLaunchKernelEx, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,                             \
      cuLaunchKernelEx(NULL, NULL, NULL, NULL))
// clang-format on

Test(fail, every_call_fails_first_with_its_default)
{
    // A stream handle that is no stream (magic 0): the second query and
    // synchronize answer CUDA_ERROR_INVALID_HANDLE instead of succeeding.
    static uint64_t bogus[64];
    char spec[2048] = "";
#define X(call, err, expr) strcat(spec, #call ":1,");
    EVERY_CALL(X)
#undef X
    spec[strlen(spec) - 1] = 0;
    start_failing(spec);
    uint64_t i = 0;
#define X(call, err, expr)                                                                         \
    {                                                                                              \
        CUresult first = expr;                                                                     \
        cr_expect_eq(first, err, "%s: %d, want %d", #call, first, err);                            \
        injected(i++, #call, 1, err);                                                              \
        CUresult second = expr;                                                                    \
        cr_expect_neq(second, err, "%s: the second call is not injected", #call);                  \
    }
    EVERY_CALL(X)
#undef X
    cr_assert_eq(injected_count(), i);
    cr_assert_eq(stats().injected, i);
}

// --- VMM ---------------------------------------------------------------------------------
Test(fail, mem_create_second_call)
{
    start_failing("cuMemCreate:2");
    CUmemAllocationProp p = dev_prop();
    CUmemGenericAllocationHandle h1, h2 = 0xdead;
    OK(cuMemCreate(&h1, G2, &p, 0));
    sim_stats_t a = stats();
    IS(cuMemCreate(&h2, 2 * G2, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(h2, 0xdead, "output untouched");
    sim_stats_t b = stats();
    cr_assert_eq(b.current_device_bytes, a.current_device_bytes, "no memory taken");
    cr_assert_eq(b.mem_create_calls, 1);
    cr_assert_eq(b.live_handles, 1);
    // The failed call and simGetStats: two plain calls, no cuMemCreate cost.
    cr_assert_eq(b.host_ns - a.host_ns, 200);
    OK(cuMemCreate(&h2, 2 * G2, &p, 0));
    cr_assert_eq(stats().live_handles, 2);
    cr_assert_eq(stats().current_device_bytes, 3 * G2);
    cr_assert_eq(injected_count(), 1);
    injected(0, "cuMemCreate", 2, CUDA_ERROR_OUT_OF_MEMORY);
}

Test(fail, mem_map_leaves_range_unmapped)
{
    start_failing("cuMemMap:1");
    CUmemAllocationProp p = dev_prop();
    CUmemAccessDesc a = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    OK(cuMemAddressReserve(&va, G2, 0, 0, 0));
    OK(cuMemCreate(&h, G2, &p, 0));
    IS(cuMemMap(va, G2, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY);
    sim_stats_t s = stats();
    cr_assert_eq(s.live_mappings, 0);
    cr_assert_eq(s.map_calls, 0);
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE};
    unsigned long long f;
    IS(cuMemGetAccess(&f, &loc, va), CUDA_ERROR_INVALID_VALUE); // nothing mapped there
    IS(cuMemSetAccess(va, G2, &a, 1), CUDA_ERROR_INVALID_VALUE);
    IS(cuMemUnmap(va, G2), CUDA_ERROR_INVALID_VALUE);
    // The handle is intact and the same range maps at the next call.
    OK(cuMemMap(va, G2, 0, h, 0));
    OK(cuMemSetAccess(va, G2, &a, 1));
    OK(cuMemsetD8(va, 7, 4096));
    expect_bytes(va, 4096, 7);
    cr_assert_eq(stats().live_mappings, 1);
}

Test(fail, set_access_chosen_error_leaves_no_access)
{
    start_failing("cuMemSetAccess:1:1:CUDA_ERROR_NOT_SUPPORTED");
    CUmemAllocationProp p = dev_prop();
    CUmemAccessDesc a = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    OK(cuMemAddressReserve(&va, G2, 0, 0, 0));
    OK(cuMemCreate(&h, G2, &p, 0));
    OK(cuMemMap(va, G2, 0, h, 0));
    IS(cuMemSetAccess(va, G2, &a, 1), CUDA_ERROR_NOT_SUPPORTED);
    cr_assert_eq(access_of(va), 0, "mapped, access still not set");
    cr_assert_eq(stats().set_access_calls, 0);
    OK(cuMemSetAccess(va, G2, &a, 1));
    cr_assert_eq(access_of(va), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    injected(0, "cuMemSetAccess", 1, CUDA_ERROR_NOT_SUPPORTED);
}

Test(fail, unmap_leaves_mapping_and_bytes)
{
    start_failing("cuMemUnmap:1");
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = vmm_granule(&h);
    OK(cuMemsetD8(va, 0x5a, 4096));
    OK(cuCtxSynchronize());
    IS(cuMemUnmap(va, G2), CUDA_ERROR_LAUNCH_FAILED);
    cr_assert_eq(access_of(va), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    expect_bytes(va, 4096, 0x5a);
    sim_stats_t s = stats();
    cr_assert_eq(s.live_mappings, 1);
    cr_assert_eq(s.unmap_calls, 0);
    OK(cuMemUnmap(va, G2));
    cr_assert_eq(stats().live_mappings, 0);
}

Test(fail, release_keeps_handle)
{
    start_failing("cuMemRelease:1");
    CUmemAllocationProp p = dev_prop();
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, G2, &p, 0));
    IS(cuMemRelease(h), CUDA_ERROR_LAUNCH_FAILED);
    sim_stats_t s = stats();
    cr_assert_eq(s.live_handles, 1);
    cr_assert_eq(s.current_device_bytes, G2, "memory kept");
    // Still a handle: it maps, and the next release takes it.
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, G2, 0, 0, 0));
    OK(cuMemMap(va, G2, 0, h, 0));
    OK(cuMemRelease(h));
    cr_assert_eq(stats().live_handles, 0);
    cr_assert_eq(stats().current_device_bytes, G2, "still mapped");
    OK(cuMemUnmap(va, G2));
    cr_assert_eq(stats().current_device_bytes, 0);
}

Test(fail, address_reserve)
{
    start_failing("cuMemAddressReserve:1");
    CUdeviceptr va = 0x1234;
    IS(cuMemAddressReserve(&va, G2, 0, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(va, 0x1234);
    cr_assert_eq(stats().address_reserve_calls, 0);
    OK(cuMemAddressReserve(&va, G2, 0, 0, 0));
    OK(cuMemAddressFree(va, G2));
}

// --- allocations ---------------------------------------------------------------------------
Test(fail, mem_alloc_count_three)
{
    start_failing("cuMemAlloc:2:3");
    CUdeviceptr d[5];
    for (int i = 0; i < 5; i++) {
        d[i] = 0xbad;
        CUresult r = cuMemAlloc(&d[i], 4096);
        bool fails = i >= 1 && i <= 3;
        cr_assert_eq(r, fails ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS, "call %d: %d", i + 1, r);
        if (fails) cr_assert_eq(d[i], 0xbad);
    }
    sim_stats_t s = stats();
    cr_assert_eq(s.alloc_calls, 2);
    cr_assert_eq(s.current_device_bytes, 2 * 4096);
    cr_assert_eq(injected_count(), 3);
    for (uint64_t i = 0; i < 3; i++)
        injected(i, "cuMemAlloc", 2 + i, CUDA_ERROR_OUT_OF_MEMORY);
}

Test(fail, alloc_async)
{
    start_failing("cuMemAllocAsync:1");
    CUdeviceptr d = 0xbad;
    IS(cuMemAllocAsync(&d, 4096, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(d, 0xbad);
    sim_stats_t s = stats();
    cr_assert_eq(s.current_device_bytes, 0);
    cr_assert_eq(s.alloc_calls, 0);
    cr_assert_eq(s.elapsed_ns, s.host_ns, "nothing enqueued");
    OK(cuMemAllocAsync(&d, 4096, NULL));
    OK(cuMemFreeAsync(d, NULL));
}

Test(fail, host_alloc_and_register)
{
    start_failing("cuMemHostAlloc:1,cuMemHostRegister:1");
    void *p = (void *)0x1234;
    IS(cuMemHostAlloc(&p, 4096, 0), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(p, (void *)0x1234);
    sim_stats_t s = stats();
    cr_assert_eq(s.pin_calls, 0);
    cr_assert_eq(s.live_pinned_bytes, 0);
    // cuMemAllocHost is another entry point, counted on its own.
    void *q;
    OK(cuMemAllocHost(&q, 4096));
    OK(cuMemHostAlloc(&p, 5000, 0));
    cr_assert_eq(stats().live_pinned_bytes, 3 * 4096);

    static char buf[3 * 4096];
    IS(cuMemHostRegister(buf, sizeof buf, 0), CUDA_ERROR_OUT_OF_MEMORY);
    IS(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    cr_assert_eq(stats().pin_calls, 2);
    OK(cuMemHostRegister(buf, sizeof buf, 0));
    cr_assert_eq(stats().live_pinned_bytes, 3 * 4096 + sizeof buf);
}

// --- copies and memsets ----------------------------------------------------------------------
Test(fail, dtoh_async_leaves_host_bytes)
{
    start_failing("cuMemcpyDtoHAsync:1");
    CUdeviceptr d;
    unsigned char *h;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemHostAlloc((void **)&h, 4096, 0));
    OK(cuMemsetD8(d, 0xaa, 4096));
    memset(h, 0x11, 4096);
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuCtxSynchronize());
    sim_stats_t a = stats();
    IS(cuMemcpyDtoHAsync(h, d, 4096, s), CUDA_ERROR_LAUNCH_FAILED);
    OK(cuStreamSynchronize(s));
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(h[i], 0x11, "byte %d", i);
    sim_stats_t b = stats();
    cr_assert_eq(b.copies, a.copies);
    cr_assert_eq(b.busy_ns_d2h, 0);
    OK(cuMemcpyDtoHAsync(h, d, 4096, s));
    OK(cuStreamSynchronize(s));
    cr_assert_eq(h[4095], 0xaa);
}

Test(fail, htod_async_v2_name_and_ptsz_twin)
{
    // Named with its _v2 suffix; the _ptsz twin counts as the same call.
    start_failing("cuMemcpyHtoDAsync_v2:2");
    CUdeviceptr d;
    unsigned char *h;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemHostAlloc((void **)&h, 4096, 0));
    memset(h, 1, 4096);
    OK(cuMemcpyHtoDAsync(d, h, 4096, NULL));
    OK(cuCtxSynchronize());
    memset(h, 2, 4096);
    IS(cuMemcpyHtoDAsync_v2_ptsz(d, h, 4096, NULL), CUDA_ERROR_LAUNCH_FAILED);
    OK(cuCtxSynchronize());
    expect_bytes(d, 4096, 1);
    cr_assert_eq(stats().busy_ns_h2d > 0, true);
    OK(cuMemcpyHtoDAsync(d, h, 4096, NULL));
    expect_bytes(d, 4096, 2);
    injected(0, "cuMemcpyHtoDAsync", 2, CUDA_ERROR_LAUNCH_FAILED);
}

Test(fail, sync_copies)
{
    start_failing("cuMemcpyHtoD:1,cuMemcpyDtoH:2");
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemsetD8(d, 3, 4096));
    unsigned char h[4096];
    memset(h, 9, sizeof h);
    uint64_t copies = stats().copies;
    IS(cuMemcpyHtoD(d, h, sizeof h), CUDA_ERROR_LAUNCH_FAILED);
    expect_bytes(d, sizeof h, 3); // DtoH call 1
    memset(h, 9, sizeof h);
    IS(cuMemcpyDtoH(h, d, sizeof h), CUDA_ERROR_LAUNCH_FAILED);
    for (size_t i = 0; i < sizeof h; i++)
        cr_assert_eq(h[i], 9);
    cr_assert_eq(stats().copies, copies + 1, "only the one that ran");
}

Test(fail, memsets_leave_bytes)
{
    start_failing("cuMemsetD8:2,cuMemsetD32:1,cuMemsetD8Async:1,cuMemsetD32Async:1");
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemsetD8(d, 4, 4096));
    IS(cuMemsetD8(d, 5, 4096), CUDA_ERROR_LAUNCH_FAILED);
    IS(cuMemsetD32(d, 0x06060606u, 1024), CUDA_ERROR_LAUNCH_FAILED);
    IS(cuMemsetD8Async(d, 7, 4096, NULL), CUDA_ERROR_LAUNCH_FAILED);
    IS(cuMemsetD32Async(d, 0x08080808u, 1024, NULL), CUDA_ERROR_LAUNCH_FAILED);
    expect_bytes(d, 4096, 4);
    OK(cuMemsetD32Async(d, 0x08080808u, 1024, NULL));
    expect_bytes(d, 4096, 8);
    cr_assert_eq(injected_count(), 4);
}

// --- launches --------------------------------------------------------------------------------
Test(fail, launch_third_leaves_bytes)
{
    start_failing("cuLaunchKernel:3,cuLaunchKernelEx:1");
    CUfunction f = make_fill(1000);
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(fill(f, d, 4096, 1, NULL));
    OK(fill(f, d, 4096, 2, NULL));
    IS(fill(f, d, 4096, 3, NULL), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    expect_bytes(d, 4096, 2);
    cr_assert_eq(stats().launches, 2);
    // The per-thread twin is the same call (the 4th), cuLaunchKernelEx another.
    uint64_t n = 4096;
    unsigned v = 4;
    void *args[] = {&d, &n, &v};
    OK(cuLaunchKernel_ptsz(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    expect_bytes(d, 4096, 4);
    CUlaunchConfig cfg = {.gridDimX = 1,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 32,
                          .blockDimY = 1,
                          .blockDimZ = 1};
    v = 5;
    IS(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    expect_bytes(d, 4096, 4);
    OK(cuLaunchKernelEx(&cfg, f, args, NULL));
    expect_bytes(d, 4096, 5);
    cr_assert_eq(stats().launches, 4);
    injected(0, "cuLaunchKernel", 3, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    injected(1, "cuLaunchKernelEx", 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
}

// --- events and streams ------------------------------------------------------------------------
Test(fail, event_and_stream_create)
{
    start_failing("cuEventCreate:1,cuStreamCreate:1:1:CUDA_ERROR_INVALID_VALUE");
    CUevent e = (CUevent)0x1234;
    IS(cuEventCreate(&e, 0), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(e, (CUevent)0x1234);
    OK(cuEventCreate(&e, 0));
    CUstream s = (CUstream)0x1234;
    IS(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(s, (CUstream)0x1234);
    OK(cuStreamCreateWithPriority(&s, 0, 0)); // another entry point
    OK(cuStreamCreate(&s, 0));
}

// The second record fails: the event keeps its first record, 1 ms in, and
// waiting on it does not wait for the 5 ms kernel after it.
Test(fail, event_record_keeps_previous_record)
{
    start_failing("cuEventRecord:2");
    CUstream s;
    CUevent e;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, 0));
    sleep_on(make_sleep(1 * MS), s);
    OK(cuEventRecord(e, s));
    sleep_on(make_sleep(5 * MS), s);
    IS(cuEventRecord(e, s), CUDA_ERROR_LAUNCH_FAILED);
    OK(cuEventSynchronize(e));
    uint64_t t = stats().host_ns;
    cr_assert(t > 1 * MS && t < 2 * MS, "waited until %llu ns", (unsigned long long)t);
    IS(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
}

Test(fail, event_record_first_leaves_never_recorded)
{
    start_failing("cuEventRecord:1");
    CUstream s;
    CUevent e, e0;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, 0));
    OK(cuEventCreate(&e0, 0));
    sleep_on(make_sleep(5 * MS), s);
    IS(cuEventRecord(e, s), CUDA_ERROR_LAUNCH_FAILED);
    OK(cuEventQuery(e)); // never recorded: complete
    OK(cuEventRecord(e0, s));
    float ms;
    IS(cuEventElapsedTime(&ms, e0, e), CUDA_ERROR_INVALID_HANDLE); // e has no record
}

// The wait fails: a copy on s2 neither waits for the 5 ms kernel on s1 (the
// copy engine is free) nor is ordered after its write (a race).
Test(fail, stream_wait_event_does_not_order)
{
    start_failing("cuStreamWaitEvent:1");
    CUstream s1, s2;
    CUevent e;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, 0));
    CUdeviceptr d;
    void *h;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemHostAlloc(&h, 4096, 0));
    OK(fill(make_fill(5 * MS), d, 4096, 1, s1));
    OK(cuEventRecord(e, s1));
    IS(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_LAUNCH_FAILED);
    uint64_t t0 = stats().host_ns;
    OK(cuMemcpyHtoDAsync(d, h, 4096, s2));
    OK(cuStreamSynchronize(s2));
    sim_stats_t s = stats();
    cr_assert_lt(s.host_ns - t0, 1 * MS, "s2 did not wait for the 5 ms kernel");
    cr_assert_eq(s.races, 1);
    // The control: the same wait, not injected, orders and delays the copy.
    OK(cuStreamWaitEvent(s2, e, 0));
    OK(cuMemcpyHtoDAsync(d, h, 4096, s2));
    OK(cuStreamSynchronize(s2));
    s = stats();
    cr_assert_gt(s.host_ns - t0, 4 * MS, "waited for the kernel");
    cr_assert_eq(s.races, 1, "no new race");
}

// A kernel on s writes a mapped range; the host clock passes its end without
// the host observing it (it waits on another stream); then a query or a
// synchronize on the kernel's event, and an unmap. Observed, the unmap is
// ordered after the kernel; after an injected failure it is not: a race.
static uint64_t observe_then_unmap(bool sync)
{
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = vmm_granule(&h);
    CUstream s, other;
    CUevent e;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e, 0));
    OK(fill(make_fill(1 * MS), va, 4096, 1, s));
    OK(cuEventRecord(e, s));
    sleep_on(make_sleep(3 * MS), other);
    OK(cuStreamSynchronize(other)); // host clock now past the kernel's end
    CUresult r = sync ? cuEventSynchronize(e) : cuEventQuery(e);
    OK(cuMemUnmap(va, G2));
    return (uint64_t)r << 32 | stats().races;
}

Test(fail, event_query_real_error_no_join)
{
    start_failing("cuEventQuery:1");
    uint64_t v = observe_then_unmap(false);
    cr_assert_eq((CUresult)(v >> 32), CUDA_ERROR_LAUNCH_FAILED, "an error, not NOT_READY");
    cr_assert_eq(v & 0xffffffff, 1, "the failed query ordered nothing");
}

Test(fail, event_query_control)
{
    start_failing("cuEventQuery:2"); // armed, but the query observed is the first
    uint64_t v = observe_then_unmap(false);
    cr_assert_eq((CUresult)(v >> 32), CUDA_SUCCESS);
    cr_assert_eq(v & 0xffffffff, 0);
}

Test(fail, event_synchronize_no_wait_no_join)
{
    start_failing("cuEventSynchronize:1");
    uint64_t v = observe_then_unmap(true);
    cr_assert_eq((CUresult)(v >> 32), CUDA_ERROR_LAUNCH_FAILED);
    cr_assert_eq(v & 0xffffffff, 1);
}

// --- grammar -------------------------------------------------------------------------------
Test(fail, several_specs_names_and_numbers)
{
    // _v2 spelling, error by name and by number (719: CUDA_ERROR_LAUNCH_FAILED,
    // 1: CUDA_ERROR_INVALID_VALUE), two specs on one call.
    start_failing("cuMemAlloc_v2:1:1:CUDA_ERROR_UNKNOWN,cuEventCreate:2:1:1,cuMemAlloc:3:2:719");
    CUdeviceptr d;
    CUevent e;
    IS(cuMemAlloc(&d, 4096), CUDA_ERROR_UNKNOWN);
    OK(cuMemAlloc(&d, 4096));
    OK(cuEventCreate(&e, 0));
    IS(cuEventCreate(&e, 0), CUDA_ERROR_INVALID_VALUE);
    IS(cuMemAlloc(&d, 4096), CUDA_ERROR_LAUNCH_FAILED);
    IS(cuMemAlloc(&d, 4096), CUDA_ERROR_LAUNCH_FAILED);
    OK(cuMemAlloc(&d, 4096));
    OK(cuEventCreate(&e, 0));
    cr_assert_eq(injected_count(), 4);
    injected(0, "cuMemAlloc", 1, CUDA_ERROR_UNKNOWN);
    injected(1, "cuEventCreate", 2, CUDA_ERROR_INVALID_VALUE);
    injected(2, "cuMemAlloc", 3, CUDA_ERROR_LAUNCH_FAILED);
    injected(3, "cuMemAlloc", 4, CUDA_ERROR_LAUNCH_FAILED);
    IS(simInjectedGet(4, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
}

Test(fail, unset_injects_nothing)
{
    start_failing(NULL);
    CUdeviceptr d;
    for (int i = 0; i < 100; i++)
        OK(cuMemAlloc(&d, 4096));
    cr_assert_eq(injected_count(), 0);
    cr_assert_eq(stats().injected, 0);
}

// Eight threads make 100 events each; calls 101 to 350 fail, whichever
// thread makes them: 250 failures, each occurrence once.
static void *create_events(void *arg)
{
    CUcontext ctx = arg;
    cuCtxSetCurrent(ctx);
    uintptr_t failed = 0;
    for (int i = 0; i < 100; i++) {
        CUevent e;
        CUresult r = cuEventCreate(&e, 0);
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            failed++;
        else if (r != CUDA_SUCCESS)
            return (void *)UINTPTR_MAX;
    }
    return (void *)failed;
}

Test(fail, counting_is_per_process_and_thread_safe)
{
    start_failing("cuEventCreate:101:250");
    CUcontext ctx;
    OK(cuCtxGetCurrent(&ctx));
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, create_events, ctx), 0);
    uintptr_t failed = 0;
    for (int i = 0; i < 8; i++) {
        void *v;
        pthread_join(t[i], &v);
        cr_assert_neq((uintptr_t)v, UINTPTR_MAX);
        failed += (uintptr_t)v;
    }
    cr_assert_eq(failed, 250);
    cr_assert_eq(injected_count(), 250);
    bool seen[250] = {false};
    for (uint64_t i = 0; i < 250; i++) {
        uint64_t n;
        OK(simInjectedGet(i, NULL, &n, NULL));
        cr_assert(n >= 101 && n <= 350 && !seen[n - 101], "occurrence %llu", (unsigned long long)n);
        seen[n - 101] = true;
    }
}

// --- child processes: bad values, exit lines ----------------------------------------------------
// The simulator's lines only: a sanitizer build adds its own to a child's
// stderr (LeakSanitizer's notes at exit).
static void ours(char *buf)
{
    char *w = buf;
    for (const char *line = buf; *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) + 1 : strlen(line);
        if (strncmp(line, "simgpu: ", 8) == 0) {
            memmove(w, line, n);
            w += n;
        }
        line += n;
    }
    *w = 0;
}

static const char *child_fail;
static void init_child(void)
{
    setenv("SIM_FAIL", child_fail, 1);
    cuInit(0);
}

Test(fail, bad_values_exit_2_with_one_line)
{
    static const char *bad[] = {
        "cuMemMap",                         // no occurrence
        "cuMemMap:",                        // empty occurrence
        "cuMemMap:0",                       // 1-based
        "cuMemMap:-1",                      // no sign
        "cuMemMap: 1",                      // no blanks
        "cuMemMap:1x",                      // not a number
        "cuMemMap:99999999999999999999999", // overflow
        "cuMemMap:1:0",                     // count >= 1
        "cuMemMap:1::CUDA_ERROR_UNKNOWN",   // count must be given before an error
        "cuMemMap:1:1:CUDA_ERROR_NOPE",     // unknown error name
        "cuMemMap:1:1:cuda_error_unknown",  // names are cuda.h's, case and all
        "cuMemMap:1:1:0",                   // CUDA_SUCCESS is no failure
        "cuMemMap:1:1:CUDA_SUCCESS",        //
        "cuMemMap:1:1:12345",               // not a CUresult
        "cuMemMap:1:1:2:5",                 // too many fields
        "cuMemMap:1,",                      // empty spec
        ",cuMemMap:1",                      //
        "cuMemMap:1,,cuMemCreate:1",        //
        "cuFooBar:1",                       // not an injectable call
        "cuMemMap_v3:1",                    // only _v2 is ignored
        "cuMemcpyHtoDAsync_v2_ptsz:1",      // twins are named by their call
        "cuDeviceGetCount:1",               // a real call, not injectable
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[8192];
        child_fail = bad[i];
        cr_assert_eq(run_child_capture(init_child, buf, sizeof buf), 2, "%s: %s", bad[i], buf);
        char want[128];
        snprintf(want, sizeof want, "simgpu: error: SIM_FAIL='%s': ", bad[i]);
        cr_assert_eq(strncmp(buf, want, strlen(want)), 0, "got: %s", buf);
        cr_assert_eq(strchr(buf, '\n'), buf + strlen(buf) - 1, "one line: %s", buf);
        cr_assert(strstr(buf, "<call>:<n>[:<count>[:<error>]]"), "says what is accepted: %s", buf);
        cr_assert(strstr(buf, " cuMemHostAlloc "), "lists the calls: %s", buf);
    }
    // 64 specs are accepted, 65 are not.
    static char many[4096];
    for (int i = 0; i < 65; i++)
        strcat(many, i ? ",cuMemAlloc:1" : "cuMemAlloc:1");
    char buf[8192];
    child_fail = many;
    cr_assert_eq(run_child_capture(init_child, buf, sizeof buf), 2, "%s", buf);
    many[strlen(many) - strlen(",cuMemAlloc:1")] = 0;
    cr_assert_eq(run_child_capture(init_child, buf, sizeof buf), 0, "%s", buf);
}

// Injected failures, reported after the exit line, in the order they fired.
static void report_child(void)
{
    setenv("SIM_FAIL", "cuMemAlloc:2,cuEventCreate:1:2:CUDA_ERROR_INVALID_VALUE", 1);
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUdeviceptr d;
    CUevent e;
    cuMemAlloc(&d, 4096);
    cuEventCreate(&e, 0);
    cuMemAlloc(&d, 4096);
    cuEventCreate(&e, 0);
    cuEventCreate(&e, 0);
}

static const char injected_lines[] =
    "simgpu: injected cuEventCreate:1 -> CUDA_ERROR_INVALID_VALUE\n"
    "simgpu: injected cuMemAlloc:2 -> CUDA_ERROR_OUT_OF_MEMORY\n"
    "simgpu: injected cuEventCreate:2 -> CUDA_ERROR_INVALID_VALUE\n";

static void report_child_quiet(void)
{
    setenv("SIM_QUIET", "1", 1);
    report_child();
}
static void report_child_loud(void)
{
    setenv("SIM_QUIET", "0", 1);
    report_child();
}

Test(fail, exit_report_lines)
{
    char buf[8192];
    // Even with SIM_QUIET=1: the test asked for these failures.
    cr_assert_eq(run_child_capture(report_child_quiet, buf, sizeof buf), 0);
    ours(buf);
    cr_assert_str_eq(buf, injected_lines);
    // After the exit line, which keeps its first keys first.
    cr_assert_eq(run_child_capture(report_child_loud, buf, sizeof buf), 0);
    ours(buf);
    cr_assert_eq(strncmp(buf, "simgpu: peak_device_bytes=", 26), 0, "got: %s", buf);
    const char *nl = strchr(buf, '\n');
    cr_assert_not_null(nl);
    cr_assert_str_eq(nl + 1, injected_lines);
    cr_assert(strstr(buf, " live_handles=0 live_mappings=0 live_pinned_bytes=0 "
                          "pool_reserved_bytes=0 peak_in_use_bytes="),
              "%s", buf);
}

static void nothing_fired_child(void)
{
    setenv("SIM_QUIET", "1", 1);
    setenv("SIM_FAIL", "cuMemAlloc:5", 1);
    cuInit(0);
}

// The exit lines also come out of a fault (exit 86), injected lines included.
static void fault_child(void)
{
    setenv("SIM_QUIET", "1", 1);
    setenv("SIM_FAIL", "cuMemsetD8:1", 1);
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUdeviceptr d;
    cuMemAlloc(&d, 4096);
    cuMemsetD8(d, 1, 4096);
    cuMemFree(d);
    *(volatile char *)(uintptr_t)d = 1;
}

Test(fail, exit_report_edge_cases)
{
    char buf[8192];
    cr_assert_eq(run_child_capture(nothing_fired_child, buf, sizeof buf), 0);
    ours(buf);
    cr_assert_str_eq(buf, "", "nothing fired, nothing said");
    cr_assert_eq(run_child_capture(fault_child, buf, sizeof buf), SIM_EXIT_FAULT, "%s", buf);
    cr_assert(strstr(buf, "simgpu: FAULT: "), "%s", buf);
    cr_assert(strstr(buf, "\nsimgpu: injected cuMemsetD8:1 -> CUDA_ERROR_LAUNCH_FAILED\n"), "%s",
              buf);
}

// --- live figures ------------------------------------------------------------------------------
Test(fail, live_figures)
{
    start_failing(NULL);
    CUmemAllocationProp p = dev_prop();
    CUmemAccessDesc a = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h1, h2, h3;
    OK(cuMemAddressReserve(&va, 2 * G2, 0, 0, 0));
    OK(cuMemCreate(&h1, G2, &p, 0));
    OK(cuMemCreate(&h2, G2, &p, 0));
    sim_stats_t s = stats();
    cr_assert_eq(s.live_handles, 2);
    cr_assert_eq(s.live_mappings, 0);
    OK(cuMemMap(va, G2, 0, h1, 0));
    OK(cuMemMap(va + G2, G2, 0, h2, 0));
    OK(cuMemSetAccess(va, 2 * G2, &a, 1));
    cr_assert_eq(stats().live_mappings, 2);
    // Released while mapped: no handle owed, the mapping lives on.
    OK(cuMemRelease(h1));
    s = stats();
    cr_assert_eq(s.live_handles, 1);
    cr_assert_eq(s.live_mappings, 2);
    // Retained from its address: a release is owed again.
    OK(cuMemRetainAllocationHandle(&h3, (void *)(uintptr_t)va));
    cr_assert_eq(h3, h1);
    cr_assert_eq(stats().live_handles, 2);
    OK(cuMemRelease(h3));
    OK(cuMemRelease(h2));
    cr_assert_eq(stats().live_handles, 0);
    // One unmap of two adjacent mappings.
    OK(cuMemUnmap(va, 2 * G2));
    s = stats();
    cr_assert_eq(s.live_mappings, 0);
    cr_assert_eq(s.current_device_bytes, 0);

    void *h4, *h5;
    static char reg[8192];
    OK(cuMemHostAlloc(&h4, 100, 0)); // a page
    OK(cuMemAllocHost(&h5, 8192));
    OK(cuMemHostRegister(reg, 5000, 0)); // registered bytes as given
    cr_assert_eq(stats().live_pinned_bytes, 4096 + 8192 + 5000);
    OK(cuMemFreeHost(h4));
    cr_assert_eq(stats().live_pinned_bytes, 8192 + 5000);
    OK(cuMemHostUnregister(reg));
    OK(cuMemFreeHost(h5));
    s = stats();
    cr_assert_eq(s.live_pinned_bytes, 0);
    cr_assert_eq(s.pinned_bytes, 4096 + 8192 + 5000,
                 "pinned_bytes counts pinning, not what is held");
    // What is held is state, not a counter: simResetStats leaves it.
    OK(cuMemCreate(&h1, G2, &p, 0));
    OK(simResetStats());
    cr_assert_eq(stats().live_handles, 1);
}

// Left at exit: one handle, one mapping (of another handle, released), and
// one page of pinned memory.
static void leak_child(void)
{
    setenv("SIM_QUIET", "0", 1);
    unsetenv("SIM_FAIL");
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUmemAllocationProp p = dev_prop();
    CUmemGenericAllocationHandle h1, h2;
    CUdeviceptr va;
    cuMemAddressReserve(&va, G2, 0, 0, 0);
    cuMemCreate(&h1, G2, &p, 0);
    cuMemCreate(&h2, G2, &p, 0);
    cuMemMap(va, G2, 0, h2, 0);
    cuMemRelease(h2);
    void *hp;
    cuMemHostAlloc(&hp, 10, 0);
}

Test(fail, live_figures_in_exit_line)
{
    char buf[8192];
    cr_assert_eq(run_child_capture(leak_child, buf, sizeof buf), 0);
    cr_assert(strstr(buf, " set_access=0 live_handles=1 live_mappings=1 live_pinned_bytes=4096 "
                          "pool_reserved_bytes=0 peak_in_use_bytes="),
              "got: %s", buf);
}
