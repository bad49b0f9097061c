// SPDX-License-Identifier: MIT
// Simulated device memory: plain allocations, capacity, stream-ordered
// allocation, VMM rules, pinned host memory, pointer attributes, faults.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simgpu.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define G2  (2 * MiB)

static CUcontext ctx;

// Criterion runs each test in its own process: the environment set here is
// what cuInit reads.
static void setup(void)
{
    setenv("SIM_CAPACITY", "1G", 1);
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

static sim_stats_t stats(void)
{
    sim_stats_t s;
    cr_assert_eq(simGetStats(&s), CUDA_SUCCESS);
    return s;
}

static CUmemAllocationProp dev_prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static CUmemAccessDesc rw(void)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 0;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

// --- plain allocations ----------------------------------------------------------------
Test(mem, alloc_round_trip, .init = setup)
{
    CUdeviceptr a, b;
    cr_assert_eq(cuMemAlloc(&a, 1000), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&b, 1000), CUDA_SUCCESS);
    cr_assert_eq(a % 256, 0, "CUDA guarantees 256-byte alignment");
    cr_assert_eq(b % 256, 0);
    cr_assert(b >= a + 1000 || a >= b + 1000, "allocations overlap");
    unsigned char *pa = (unsigned char *)(uintptr_t)a;
    for (int i = 0; i < 1000; i++)
        pa[i] = (unsigned char)(i * 7);
    memset((void *)(uintptr_t)b, 0x5a, 1000);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(pa[i], (unsigned char)(i * 7));
    cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(pa[i], (unsigned char)(i * 7), "freeing b touched a");
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
}

Test(mem, alloc_errors, .init = setup)
{
    CUdeviceptr a;
    cr_assert_eq(cuMemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemAlloc(&a, 8192), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a + 16), CUDA_ERROR_INVALID_VALUE, "interior pointer");
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a), CUDA_ERROR_INVALID_VALUE, "double free");
    cr_assert_eq(cuMemFree(0x1234), CUDA_ERROR_INVALID_VALUE, "never allocated");
    int x;
    cr_assert_eq(cuMemFree((CUdeviceptr)(uintptr_t)&x), CUDA_ERROR_INVALID_VALUE, "host pointer");
}

Test(mem, capacity_and_oom, .init = setup)
{
    CUdeviceptr a, b;
    cr_assert_eq(cuMemAlloc(&a, 768 * MiB), CUDA_SUCCESS);
    sim_stats_t s = stats();
    cr_assert_eq(s.current_device_bytes, 768 * MiB);
    cr_assert_eq(cuMemAlloc(&b, 512 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    s = stats();
    cr_assert_eq(s.current_device_bytes, 768 * MiB, "a failed allocation must leave nothing");
    cr_assert_eq(s.peak_device_bytes, 768 * MiB);
    size_t fr, tot;
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(tot, GiB);
    cr_assert_eq(fr, 256 * MiB);
    // Exactly filling capacity works; one page more does not.
    cr_assert_eq(cuMemAlloc(&b, 256 * MiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(cuMemAlloc(&b, 256 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&a, 512 * MiB), CUDA_SUCCESS);
    s = stats();
    cr_assert_eq(s.current_device_bytes, 768 * MiB);
    cr_assert_eq(s.peak_device_bytes, GiB);
    cr_assert_eq(s.alloc_calls, 3);
}

// SIM_CONTEXT_BYTES: the context's own memory, in use from the start by
// cuMemGetInfo's count and taken from what allocations may have.
static void setup_context(void)
{
    setenv("SIM_CONTEXT_BYTES", "256M", 1);
    setup();
}

Test(mem, the_context_holds_memory_of_its_own, .init = setup_context)
{
    size_t fr, tot;
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(tot, GiB);
    cr_assert_eq(fr, 768 * MiB, "the context's 256 MiB are in use before any allocation");
    CUdeviceptr a, b;
    cr_assert_eq(cuMemAlloc(&a, 768 * MiB + 4096), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(cuMemAlloc(&a, 512 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(fr, 256 * MiB);
    cr_assert_eq(cuMemAlloc(&b, 256 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(fr, 768 * MiB, "the context's memory stays");
}

// 0 is a context that holds nothing, as unset: a replay may pass it
// through (it was refused as "a size in bytes").
static void setup_no_context(void)
{
    setenv("SIM_CONTEXT_BYTES", "0", 1);
    setup();
}

Test(mem, a_context_of_zero_bytes_holds_nothing, .init = setup_no_context)
{
    size_t fr, tot;
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(fr, tot, "a context of 0 bytes holds none of the device");
}

Test(mem, peak_current_and_reset, .init = setup)
{
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cuMemAlloc(&p[i], 4097), CUDA_SUCCESS);
    sim_stats_t s = stats();
    // Rounded up to 4 KiB pages, the unit the simulator protects.
    cr_assert_eq(s.current_device_bytes, 3 * 8192);
    cr_assert_eq(cuMemFree(p[1]), CUDA_SUCCESS);
    s = stats();
    cr_assert_eq(s.current_device_bytes, 2 * 8192);
    cr_assert_eq(s.peak_device_bytes, 3 * 8192);
    cr_assert_eq(simResetStats(), CUDA_SUCCESS);
    s = stats();
    cr_assert_eq(s.peak_device_bytes, 2 * 8192, "reset: peak falls to current");
    cr_assert_eq(s.current_device_bytes, 2 * 8192, "reset keeps the memory");
    cr_assert_eq(s.alloc_calls, 0);
    cr_assert_eq(cuMemAlloc(&p[1], 4097), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(p[1]), CUDA_SUCCESS);
    cr_assert_eq(simResetPeak(), CUDA_SUCCESS);
    s = stats();
    cr_assert_eq(s.peak_device_bytes, 2 * 8192, "peak reset: falls to current");
    cr_assert_eq(s.alloc_calls, 1, "peak reset: the counters stay");
}

Test(mem, alloc_and_free_cost_host_time, .init = setup)
{
    sim_stats_t s0 = stats();
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 4096), CUDA_SUCCESS);
    sim_stats_t s1 = stats();
    cr_assert_geq(s1.host_ns - s0.host_ns, 10000, "cuMemAlloc costs ~10 us");
    cr_assert_lt(s1.host_ns - s0.host_ns, 11000);
}

// Use after free: the range is inaccessible at once (fresh space is handed
// out first, so the address is not someone else's buffer).
Test(mem, use_after_free_faults, .init = setup, .exit_code = SIM_EXIT_FAULT)
{
    CUdeviceptr p, q;
    cr_assert_eq(cuMemAlloc(&p, 4096), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(p), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&q, 4096), CUDA_SUCCESS);
    cr_assert_neq(p, q, "freed address handed out again at once");
    *(volatile int *)(uintptr_t)p = 1;
}

// A segfault outside the device region is not the simulator's: the handler
// installed before cuInit gets it (criterion's, a sanitizer's, or the
// default action), so the process dies of a signal, not with SIM_EXIT_FAULT.
Test(mem, foreign_segfault_still_crashes)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        setenv("SIM_CAPACITY", "1G", 1);
        cuInit(0);
        static volatile uintptr_t not_mapped = 8; // opaque to the compiler
        *(volatile int *)not_mapped = 1;
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFSIGNALED(st), "status 0x%x", st);
    cr_assert(WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGABRT, "signal %d", WTERMSIG(st));
}

// Several host threads allocating and freeing at once: the lock keeps the
// tables whole, and every byte comes back.
static void *churn(void *arg)
{
    CUcontext c = arg;
    if (cuCtxSetCurrent(c) != CUDA_SUCCESS) return (void *)1;
    CUdeviceptr p[16];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 16; i++) {
            if (cuMemAlloc(&p[i], 4096 * (size_t)(1 + (i + round) % 5)) != CUDA_SUCCESS)
                return (void *)2;
            *(volatile char *)(uintptr_t)p[i] = (char)i;
        }
        for (int i = 0; i < 16; i++) {
            if (*(volatile char *)(uintptr_t)p[i] != (char)i)
                return (void *)3; // another thread was handed the same bytes
            if (cuMemFree(p[i]) != CUDA_SUCCESS) return (void *)4;
        }
    }
    return NULL;
}

Test(mem, threads_churn, .init = setup)
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, churn, ctx), 0);
    for (int i = 0; i < 8; i++) {
        void *res;
        pthread_join(t[i], &res);
        cr_assert_null(res, "thread %d failed: %p", i, res);
    }
    sim_stats_t s = stats();
    cr_assert_eq(s.current_device_bytes, 0);
    cr_assert_eq(s.alloc_calls, 8 * 200 * 16);
    cr_assert_eq(s.races, 0);
    cr_assert_leq(s.peak_device_bytes, 8 * 16 * 5 * 4096);
}

// --- stream-ordered allocation ---------------------------------------------------------
Test(mem, async_reuse_follows_order, .init = setup)
{
    CUstream s1, s2;
    cr_assert_eq(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a, b, c, d;
    cr_assert_eq(cuMemAllocAsync(&a, 1 * MiB, s1), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, G2, "the pool reserves a 2 MiB chunk");
    cr_assert_eq(cuMemFreeAsync(a, s1), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, G2, "freed to the pool: still reserved");
    // Not ordered after the free: the chunk's fresh half, never a's range.
    cr_assert_eq(cuMemAllocAsync(&b, 1 * MiB, s2), CUDA_SUCCESS);
    cr_assert_neq(b, a, "reuse across unordered streams");
    // Same stream: ordered, reused.
    cr_assert_eq(cuMemAllocAsync(&c, 1 * MiB, s1), CUDA_SUCCESS);
    cr_assert_eq(c, a, "same-stream reuse");
    cr_assert_eq(cuMemFreeAsync(c, s1), CUDA_SUCCESS);
    // Ordered by an event: reused on the other stream.
    CUevent e;
    cr_assert_eq(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    cr_assert_eq(cuEventRecord(e, s1), CUDA_SUCCESS);
    cr_assert_eq(cuStreamWaitEvent(s2, e, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&d, 1 * MiB, s2), CUDA_SUCCESS);
    cr_assert_eq(d, a, "reuse after an event wait");
    cr_assert_eq(stats().current_device_bytes, G2, "both blocks in the one chunk");
    cr_assert_eq(cuMemFreeAsync(d, s2), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(b, s2), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(b, s2), CUDA_ERROR_INVALID_VALUE, "double free");
    cr_assert_eq(stats().current_device_bytes, G2, "no synchronisation yet: still reserved");
    cr_assert_eq(cuMemAllocAsync(&d, 0, s2), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemAllocAsync(&d, 2 * GiB, s2), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(stats().races, 0);
}

// cuMemFree of cuMemAllocAsync memory: no implicit synchronisation (the
// caller must have completed every access), so an unsynchronised free after
// stream work on the block is a race; after a stream sync it is not.
Test(mem, free_of_async_memory_does_not_sync, .init = setup)
{
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a, b;
    cr_assert_eq(cuMemAllocAsync(&a, 4096, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&b, 4096, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemsetD8Async(a, 1, 4096, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemsetD8Async(b, 1, 4096, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
    cr_assert_eq(stats().races, 1, "free while the memset may still run");
    char last[512];
    cr_assert_eq(simLastRace(last, sizeof last), CUDA_SUCCESS);
    cr_assert(strstr(last, "cuMemFree"), "last race: %s", last);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(b), CUDA_SUCCESS);
    cr_assert_eq(stats().races, 1);
}

// A free the host saw complete is reusable from any stream: kept by a release
// threshold; with the default threshold (0) the synchronisation released the
// chunk, and the next allocation gets fresh space.
Test(mem, async_reuse_after_host_sync, .init = setup)
{
    CUmemoryPool pool;
    cr_assert_eq(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    cuuint64_t keep_all = UINT64_MAX;
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all),
                 CUDA_SUCCESS);
    CUstream s1, s2;
    cr_assert_eq(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a, b;
    cr_assert_eq(cuMemAllocAsync(&a, 64 * 1024, s1), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(a, s1), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s1), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&b, 64 * 1024, s2), CUDA_SUCCESS);
    cr_assert_eq(b, a, "the host saw the free complete: reusable anywhere");
    cr_assert_eq(cuMemFreeAsync(b, s2), CUDA_SUCCESS);

    cuuint64_t none = 0;
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &none),
                 CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s2), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, 0, "threshold 0: the sync released the chunk");
    cr_assert_eq(cuMemAllocAsync(&b, 64 * 1024, s1), CUDA_SUCCESS);
    cr_assert_neq(b, a, "a released chunk's range is not handed out again at once");
}

Test(mem, async_use_after_free_faults, .init = setup, .exit_code = SIM_EXIT_FAULT)
{
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a;
    cr_assert_eq(cuMemAllocAsync(&a, 4096, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemsetD8Async(a, 1, 4096, s), CUDA_SUCCESS, "should have faulted");
}

Test(mem, async_alloc_refused_while_capturing, .init = setup)
{
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    cr_assert_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUdeviceptr a;
    cr_assert_eq(cuMemAllocAsync(&a, 4096, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(stats().current_device_bytes, 0, "nothing allocated");
}

Test(mem, default_pool_attributes, .init = setup)
{
    CUmemoryPool pool = NULL, cur = NULL;
    cr_assert_eq(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    cr_assert_not_null(pool);
    cr_assert_eq(cuDeviceGetMemPool(&cur, 0), CUDA_SUCCESS);
    cr_assert_eq(cur, pool);
    cr_assert_eq(cuDeviceGetDefaultMemPool(&pool, 1), CUDA_ERROR_INVALID_DEVICE);
    cuuint64_t thr = 1ull << 40;
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr),
                 CUDA_SUCCESS);
    thr = 0;
    cr_assert_eq(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr),
                 CUDA_SUCCESS);
    cr_assert_eq(thr, 1ull << 40);
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr a, b;
    cr_assert_eq(cuMemAllocFromPoolAsync(&a, 3 * MiB, pool, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&b, 1 * MiB, s), CUDA_SUCCESS);
    cuuint64_t used = 0, high = 0;
    cr_assert_eq(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
                 CUDA_SUCCESS);
    cr_assert_eq(used, 4 * MiB);
    CUmemoryPool owner = NULL;
    cr_assert_eq(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a),
                 CUDA_SUCCESS);
    cr_assert_eq(owner, pool);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
                 CUDA_SUCCESS);
    cr_assert_eq(used, 1 * MiB);
    cr_assert_eq(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), CUDA_SUCCESS);
    cr_assert_eq(high, 4 * MiB);
    cuuint64_t zero = 0, one = 1;
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), CUDA_SUCCESS);
    cr_assert_eq(high, 1 * MiB, "reset to the current use");
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocFromPoolAsync(&a, 4096, (CUmemoryPool)&used, s),
                 CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr plain;
    cr_assert_eq(cuMemAlloc(&plain, 4096), CUDA_SUCCESS);
    cr_assert_eq(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, plain),
                 CUDA_ERROR_INVALID_VALUE);
}

// Potentially unsafe calls during a GLOBAL capture are refused and
// invalidate it; a thread in RELAXED mode may make them.
Test(mem, unsafe_calls_during_capture, .init = setup)
{
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr keep;
    cr_assert_eq(cuMemAlloc(&keep, 4096), CUDA_SUCCESS);
    cr_assert_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CUdeviceptr a;
    cr_assert_eq(cuMemAlloc(&a, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(stats().current_device_bytes, 4096, "nothing allocated");
    CUstreamCaptureStatus cs;
    cr_assert_eq(cuStreamIsCapturing(s, &cs), CUDA_SUCCESS);
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CUgraph g;
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    cr_assert_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(keep), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    void *h;
    cr_assert_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    cr_assert_eq(cuMemHostAlloc(&h, 4096, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    cr_assert_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // RELAXED: allowed, and the capture survives.
    cr_assert_eq(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&a, 4096), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
    cr_assert_eq(cuStreamIsCapturing(s, &cs), CUDA_SUCCESS);
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
}

// cuMemFree of plain memory synchronises the device first.
static void nodata(void)
{
    setenv("SIM_NODATA", "1", 1);
    setup();
}
Test(mem, free_waits_for_device, .init = nodata)
{
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    void *h;
    cr_assert_eq(cuMemHostAlloc(&h, 256 * MiB, 0), CUDA_SUCCESS);
    CUdeviceptr d, other;
    cr_assert_eq(cuMemAlloc(&d, 256 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&other, 4096), CUDA_SUCCESS);
    uint64_t t0 = stats().host_ns;
    cr_assert_eq(cuMemcpyHtoDAsync(d, h, 256 * MiB, s), CUDA_SUCCESS);
    cr_assert_lt(stats().host_ns - t0, 1000000, "an async copy does not block the host");
    cr_assert_eq(cuMemFree(other), CUDA_SUCCESS);
    // 256 MiB at 50 GB/s = 5.37 ms: the free waited for it.
    uint64_t waited = stats().host_ns - t0;
    cr_assert_geq(waited, 5368709, "cuMemFree returned after %llu ns", (unsigned long long)waited);
    cr_assert_lt(waited, 5600000);
    cr_assert_eq(stats().races, 0);
}

// --- virtual memory management ----------------------------------------------------------
Test(vmm, granularity_and_argument_rules, .init = setup)
{
    CUmemAllocationProp prop = dev_prop();
    size_t g = 0;
    cr_assert_eq(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                 CUDA_SUCCESS);
    cr_assert_eq(g, G2);
    cr_assert_eq(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                 CUDA_SUCCESS);
    cr_assert_eq(g, G2);

    CUdeviceptr va, va2;
    cr_assert_eq(cuMemAddressReserve(&va, G2 + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(va % G2, 0);
    cr_assert_eq(cuMemAddressReserve(&va2, 4 * MiB, 64 * MiB, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(va2 % (64 * MiB), 0, "alignment honoured");

    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemCreate(&h, G2 + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp bad = prop;
    bad.location.id = 1;
    cr_assert_eq(cuMemCreate(&h, G2, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
    cr_assert_eq(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);

    cr_assert_eq(cuMemMap(va + 4096, G2, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "misaligned address");
    cr_assert_eq(cuMemMap(va, G2 + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "misaligned size");
    cr_assert_eq(cuMemMap(va, G2, G2, h, 0), CUDA_ERROR_INVALID_VALUE, "offset must be zero");
    cr_assert_eq(cuMemMap(va, 8 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE,
                 "larger than the handle");
    cr_assert_eq(cuMemMap(va + 6 * MiB, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE,
                 "past the reservation");
    CUdeviceptr plain;
    cr_assert_eq(cuMemAlloc(&plain, 4 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(plain - plain % G2, G2, 0, h, 0), CUDA_ERROR_INVALID_VALUE,
                 "not reserved");
    cr_assert_eq(cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE,
                 "over a mapping");

    CUmemAccessDesc d = rw();
    cr_assert_eq(cuMemSetAccess(va, 6 * MiB, &d, 1), CUDA_ERROR_INVALID_VALUE, "not fully mapped");
    cr_assert_eq(cuMemSetAccess(va + 4 * MiB, 2 * MiB, &d, 1), CUDA_ERROR_INVALID_VALUE,
                 "unmapped");
    cr_assert_eq(cuMemSetAccess(va, 4 * MiB, &d, 1), CUDA_SUCCESS);

    cr_assert_eq(cuMemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE, "part of a mapping");
    cr_assert_eq(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE, "still mapped");
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE, "already unmapped");
    cr_assert_eq(cuMemAddressFree(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE, "size must match");
    cr_assert_eq(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
    cr_assert_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "released twice");
    cr_assert_eq(cuMemMap(va2, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "released handle");

    sim_stats_t s = stats();
    cr_assert_eq(s.mem_create_calls, 1);
    cr_assert_eq(s.address_reserve_calls, 2);
    cr_assert_eq(s.set_access_calls, 1);
    cr_assert_eq(s.map_calls, 1);
    cr_assert_eq(s.unmap_calls, 1);
}

Test(vmm, contents_follow_the_handle, .init = setup)
{
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemAddressReserve(&va, 16 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(va, 4 * MiB, &d, 1), CUDA_SUCCESS);
    uint32_t *p = (uint32_t *)(uintptr_t)va;
    for (size_t i = 0; i < 4 * MiB / 4; i += 1021)
        p[i] = (uint32_t)(i * 2654435761u);
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    // Same handle at another address: same bytes.
    CUdeviceptr at = va + 8 * MiB;
    cr_assert_eq(cuMemMap(at, 4 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(at, 4 * MiB, &d, 1), CUDA_SUCCESS);
    uint32_t *q = (uint32_t *)(uintptr_t)at;
    for (size_t i = 0; i < 4 * MiB / 4; i += 1021)
        cr_assert_eq(q[i], (uint32_t)(i * 2654435761u), "word %zu", i);
    // Two handles mapped back to back are accessible as one range.
    CUmemGenericAllocationHandle h2;
    cr_assert_eq(cuMemCreate(&h2, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(at + 4 * MiB, 2 * MiB, 0, h2, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(at, 6 * MiB, &d, 1), CUDA_SUCCESS);
    memset((void *)(uintptr_t)(at + 4 * MiB - 8), 0xab, 16);
    cr_assert_eq(cuMemUnmap(at, 6 * MiB), CUDA_SUCCESS, "unmap of two whole adjacent mappings");
}

// The H200 (tests/sim/drv/core.c): cuMemSetAccess and cuMemUnmap cost per
// mapping the range covers, so a range of granule mappings costs far more
// than one handle's mapping of the same bytes (3762 us against 79 for 256
// MiB); the calls' host time is counted apart (vmm_host_ns).
Test(vmm, set_access_and_unmap_cost_per_mapping_covered, .init = setup)
{
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle one, g[4];
    cr_assert_eq(cuMemAddressReserve(&va, 16 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&one, 8 * MiB, &prop, 0), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cuMemCreate(&g[i], 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 8 * MiB, 0, one, 0), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cuMemMap(va + 8 * MiB + (CUdeviceptr)i * 2 * MiB, 2 * MiB, 0, g[i], 0),
                     CUDA_SUCCESS);
    // The calls' host time, counted apart from the API's own cost.
    uint64_t v0 = stats().vmm_host_ns, h0 = stats().host_ns;
    cr_assert_eq(cuMemSetAccess(va, 8 * MiB, &d, 1), CUDA_SUCCESS);
    uint64_t v1 = stats().vmm_host_ns;
    cr_assert_eq(cuMemSetAccess(va + 8 * MiB, 8 * MiB, &d, 1), CUDA_SUCCESS);
    uint64_t v2 = stats().vmm_host_ns, h2 = stats().host_ns;
    // 29 us + 0.195 us/MiB a mapping.
    cr_assert_eq(v1 - v0, 29000 + 8 * 195, "one mapping: %llu", (unsigned long long)(v1 - v0));
    cr_assert_eq(v2 - v1, 4 * (29000 + 2 * 195), "four: %llu", (unsigned long long)(v2 - v1));
    cr_assert_geq(h2 - h0, v2 - v0, "on the host clock too");
    cr_assert_lt(h2 - h0, v2 - v0 + 1000);
    cr_assert_eq(cuMemUnmap(va, 8 * MiB), CUDA_SUCCESS);
    uint64_t v3 = stats().vmm_host_ns;
    cr_assert_eq(cuMemUnmap(va + 8 * MiB, 8 * MiB), CUDA_SUCCESS);
    uint64_t v4 = stats().vmm_host_ns;
    // 19 us + 0.063 us/MiB a mapping.
    cr_assert_eq(v3 - v2, 19000 + 8 * 63, "one mapping: %llu", (unsigned long long)(v3 - v2));
    cr_assert_eq(v4 - v3, 4 * (19000 + 2 * 63), "four: %llu", (unsigned long long)(v4 - v3));
    cr_assert_eq(cuMemRelease(one), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cuMemRelease(g[i]), CUDA_SUCCESS);
    cr_assert_eq(cuMemAddressFree(va, 16 * MiB), CUDA_SUCCESS);
}

// While a copy between the host and the device runs, cuMemMap costs 600 us
// more a call and cuMemSetAccess 600 us more per mapping it covers (the
// H200 of 2026-11-28: tests/bench/bench_vmm_load.c); once the copy is done,
// they cost what they cost idle.
Test(vmm, map_and_set_access_cost_more_while_a_copy_runs, .init = setup)
{
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    CUdeviceptr va, dev;
    CUmemGenericAllocationHandle g[2];
    CUstream s;
    void *host;
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    cr_assert_eq(cuMemHostAlloc(&host, 64 * MiB, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&dev, 64 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0), CUDA_SUCCESS);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(cuMemCreate(&g[i], 2 * MiB, &prop, 0), CUDA_SUCCESS);
    // 64 MiB at 50 GB/s: 1.3 ms on the link, past the calls below.
    cr_assert_eq(cuMemcpyDtoHAsync(host, dev, 64 * MiB, s), CUDA_SUCCESS);
    uint64_t v0 = stats().vmm_host_ns;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(cuMemMap(va + (CUdeviceptr)i * 2 * MiB, 2 * MiB, 0, g[i], 0), CUDA_SUCCESS);
    uint64_t v1 = stats().vmm_host_ns;
    cr_assert_eq(v1 - v0, 2 * (840 + 2 * 24 + 600000), "two maps: %llu",
                 (unsigned long long)(v1 - v0));
    // The copy is done now (1.2 ms of mapping): set access costs what it does idle.
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(va, 4 * MiB, &d, 1), CUDA_SUCCESS);
    uint64_t v2 = stats().vmm_host_ns;
    cr_assert_eq(v2 - v1, 2 * (29000 + 2 * 195), "idle: %llu", (unsigned long long)(v2 - v1));
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(cuMemMap(va + (CUdeviceptr)i * 2 * MiB, 2 * MiB, 0, g[i], 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemcpyHtoDAsync(dev, host, 64 * MiB, s), CUDA_SUCCESS);
    uint64_t v3 = stats().vmm_host_ns;
    cr_assert_eq(cuMemSetAccess(va, 4 * MiB, &d, 1), CUDA_SUCCESS);
    uint64_t v4 = stats().vmm_host_ns;
    cr_assert_eq(v4 - v3, 2 * (29000 + 2 * 195 + 600000), "during the copy back: %llu",
                 (unsigned long long)(v4 - v3));
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(cuMemRelease(g[i]), CUDA_SUCCESS);
    cr_assert_eq(cuMemAddressFree(va, 4 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(dev), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeHost(host), CUDA_SUCCESS);
}

static void setup_vmm_free(void)
{
    setenv("SIM_VMM_COST", "0", 1);
    setup();
}

static void setup_vmm_double(void)
{
    setenv("SIM_VMM_COST", "2", 1);
    setup();
}

// SIM_VMM_COST scales the virtual-memory calls' host costs: 0 makes them
// free (a step's time without the host's mapping), 2 doubles them.
static uint64_t map_cycle_ns(void)
{
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
    uint64_t v0 = stats().vmm_host_ns;
    cr_assert_eq(cuMemCreate(&h, 8 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 8 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(va, 8 * MiB, &d, 1), CUDA_SUCCESS);
    cr_assert_eq(cuMemUnmap(va, 8 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
    uint64_t v1 = stats().vmm_host_ns;
    cr_assert_eq(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
    return v1 - v0;
}

// create 12.5 + 0.096/MiB, map 0.84 + 0.024, set-access 29 + 0.195, unmap
// 19 + 0.063, release 13 + 0.5 (us), for one 8 MiB handle.
#define CYCLE_NS                                                                                   \
    (12500 + 8 * 96 + 840 + 8 * 24 + 29000 + 8 * 195 + 19000 + 8 * 63 + 13000 + 8 * 500)

Test(vmm, the_calls_cost_what_an_h200_measured, .init = setup)
{
    cr_assert_eq(map_cycle_ns(), CYCLE_NS);
}

Test(vmm, sim_vmm_cost_0_makes_the_calls_free, .init = setup_vmm_free)
{
    uint64_t h0 = stats().host_ns;
    cr_assert_eq(map_cycle_ns(), 0);
    // Left on the host clock: the reservation's 19 us and 0.1 us a call.
    cr_assert_lt(stats().host_ns - h0, 19000 + 10 * 100 + 1, "%llu",
                 (unsigned long long)(stats().host_ns - h0));
}

Test(vmm, sim_vmm_cost_scales_the_calls, .init = setup_vmm_double)
{
    cr_assert_eq(map_cycle_ns(), 2 * CYCLE_NS);
}

Test(vmm, capacity_counts_handles, .init = setup)
{
    CUmemAllocationProp prop = dev_prop();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h, big;
    cr_assert_eq(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, 0, "a reservation is not memory");
    uint64_t t0 = stats().host_ns;
    cr_assert_eq(cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);
    uint64_t dt = stats().host_ns - t0;
    // The H200's figures (core.c): 12.5 us a handle and 0.096 us a MiB.
    cr_assert_geq(dt, 12500 + 4 * 96, "cuMemCreate costs 12.5 us + 0.096 us/MiB: %llu",
                  (unsigned long long)dt);
    cr_assert_lt(dt, 12500 + 4 * 96 + 1000);
    cr_assert_eq(stats().current_device_bytes, 4 * MiB);
    cr_assert_eq(cuMemCreate(&big, GiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(stats().current_device_bytes, 4 * MiB);
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, GiB - 4 * MiB + 1), CUDA_ERROR_OUT_OF_MEMORY,
                 "handles and allocations share capacity");
    cr_assert_eq(cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_SUCCESS);
    // Released while mapped: the memory lives until the unmap.
    cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, 4 * MiB);
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, 0);
    cr_assert_eq(stats().peak_device_bytes, 4 * MiB);
}

// Mapped but access not set: a touch faults (cuda.h: "calling cuMemMap does
// not make the address accessible").
Test(vmm, touch_before_set_access_faults, .init = setup, .exit_code = SIM_EXIT_FAULT)
{
    CUmemAllocationProp prop = dev_prop();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    *(volatile char *)(uintptr_t)va = 1;
}

// A copy into mapped-but-not-accessible memory: the copy engine faults.
Test(vmm, copy_before_set_access_faults, .init = setup, .exit_code = SIM_EXIT_FAULT)
{
    CUmemAllocationProp prop = dev_prop();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    char buf[64] = {0};
    cuMemcpyHtoD(va, buf, sizeof buf);
}

// Read-only access: reading works, a copy that writes faults.
Test(vmm, write_to_read_only_mapping_faults, .init = setup, .exit_code = SIM_EXIT_FAULT)
{
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(va, 2 * MiB, &d, 1), CUDA_SUCCESS);
    unsigned long long flags = 9;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    cr_assert_eq(cuMemGetAccess(&flags, &loc, va), CUDA_SUCCESS);
    cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
    char buf[16];
    cr_assert_eq(cuMemcpyDtoH(buf, va, sizeof buf), CUDA_SUCCESS, "reading is allowed");
    cuMemcpyHtoD(va, buf, sizeof buf);
}

Test(vmm, touch_after_unmap_faults, .init = setup, .exit_code = SIM_EXIT_FAULT)
{
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemSetAccess(va, 2 * MiB, &d, 1), CUDA_SUCCESS);
    *(volatile char *)(uintptr_t)va = 1;
    cr_assert_eq(cuMemUnmap(va, 2 * MiB), CUDA_SUCCESS);
    *(volatile char *)(uintptr_t)(va + 100) = 1;
}

// The diagnostic names the range and what happened to it.
static void unmap_touch_child(void)
{
    setenv("SIM_CAPACITY", "1G", 1);
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUmemAllocationProp prop = dev_prop();
    CUmemAccessDesc d = rw();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0);
    cuMemCreate(&h, 2 * MiB, &prop, 0);
    cuMemMap(va, 2 * MiB, 0, h, 0);
    cuMemSetAccess(va, 2 * MiB, &d, 1);
    cuMemUnmap(va, 2 * MiB);
    char buf[16] = {0};
    cuMemcpyHtoD(va + 4096, buf, sizeof buf);
    _exit(0);
}

Test(vmm, fault_diagnostic_names_unmapped_range)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        unmap_touch_child();
    }
    close(fds[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t k;
    while (n + 1 < sizeof buf && (k = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)k;
    buf[n] = 0;
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == SIM_EXIT_FAULT, "status %d: %s", st, buf);
    cr_assert(strstr(buf, "simgpu: FAULT: "), "got: %s", buf);
    cr_assert(strstr(buf, "(+16 bytes)") || strstr(buf, "address=0x"), "got: %s", buf);
    cr_assert(strstr(buf, "inside cuMemAddressReserve range"), "got: %s", buf);
    cr_assert(strstr(buf, "VMM mapping"), "got: %s", buf);
    cr_assert(strstr(buf, "unmapped"), "got: %s", buf);
}

Test(vmm, address_hint_and_retain, .init = setup)
{
    CUdeviceptr va, hint;
    cr_assert_eq(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0), CUDA_SUCCESS);
    hint = va + 64 * MiB;
    CUdeviceptr got;
    cr_assert_eq(cuMemAddressReserve(&got, 2 * MiB, 0, hint, 0), CUDA_SUCCESS);
    cr_assert_eq(got, hint, "a free, aligned hint is honoured");
    CUdeviceptr again;
    cr_assert_eq(cuMemAddressReserve(&again, 2 * MiB, 0, hint, 0), CUDA_SUCCESS);
    cr_assert_neq(again, hint, "a taken hint is only a hint");
    CUmemAllocationProp prop = dev_prop();
    CUmemGenericAllocationHandle h, h2;
    cr_assert_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(got, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(got + 4096)), CUDA_SUCCESS);
    cr_assert_eq(h2, h);
    cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
    cr_assert_eq(cuMemUnmap(got, 2 * MiB), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, 2 * MiB, "one retain still outstanding");
    cr_assert_eq(cuMemRelease(h2), CUDA_SUCCESS);
    cr_assert_eq(stats().current_device_bytes, 0);
}

// --- pinned host memory -------------------------------------------------------------------
Test(host, pinned_alloc_counts_and_costs, .init = setup)
{
    sim_stats_t s0 = stats();
    void *p;
    cr_assert_eq(cuMemHostAlloc(&p, 256 * MiB, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
    sim_stats_t s1 = stats();
    cr_assert_eq(s1.pin_calls, s0.pin_calls + 1);
    cr_assert_eq(s1.pinned_bytes, s0.pinned_bytes + 256 * MiB);
    double dt = (double)(s1.host_ns - s0.host_ns);
    cr_assert(dt > 0.1e9 * 0.99 && dt < 0.1e9 * 1.01, "0.4 s/GiB: 256 MiB took %.0f ns", dt);
    cr_assert_eq(s1.current_device_bytes, 0, "pinned host memory is not device memory");
    memset(p, 1, 4096);
    unsigned flags = 0;
    cr_assert_eq(cuMemHostGetFlags(&flags, p), CUDA_SUCCESS);
    cr_assert_eq(flags, CU_MEMHOSTALLOC_PORTABLE);
    CUdeviceptr dp;
    cr_assert_eq(cuMemHostGetDevicePointer(&dp, p, 0), CUDA_SUCCESS);
    cr_assert_eq(dp, (CUdeviceptr)(uintptr_t)p, "unified addressing");
    cr_assert_eq(cuMemHostAlloc(&p, 4096, 0x100), CUDA_ERROR_INVALID_VALUE, "unknown flag");
    cr_assert_eq(cuMemFreeHost(p), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE);
    void *q;
    cr_assert_eq(cuMemAllocHost(&q, 4096), CUDA_SUCCESS);
    cr_assert_eq(stats().pin_calls, s0.pin_calls + 2);
    cr_assert_eq(cuMemFreeHost(q), CUDA_SUCCESS);
}

Test(host, register_rules, .init = setup)
{
    size_t n = 1 * MiB;
    char *buf = aligned_alloc(4096, n);
    cr_assert_not_null(buf);
    sim_stats_t s0 = stats();
    cr_assert_eq(cuMemHostRegister(buf, n / 2, 0), CUDA_SUCCESS);
    cr_assert_eq(stats().pin_calls, s0.pin_calls + 1);
    cr_assert_eq(cuMemHostRegister(buf + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    cr_assert_eq(cuMemHostRegister(buf + n / 2 - 1, 4096, 0),
                 CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    cr_assert_eq(cuMemHostRegister(buf + n / 2, n / 2, 0), CUDA_SUCCESS, "adjacent is fine");
    CUdeviceptr dp;
    cr_assert_eq(cuMemHostGetDevicePointer(&dp, buf + 100, 0), CUDA_SUCCESS);
    cr_assert_eq(dp, (CUdeviceptr)(uintptr_t)(buf + 100));
    cr_assert_eq(cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                 "not the start");
    cr_assert_eq(cuMemHostUnregister(buf), CUDA_SUCCESS);
    cr_assert_eq(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    cr_assert_eq(cuMemHostGetDevicePointer(&dp, buf, 0), CUDA_ERROR_INVALID_VALUE,
                 "no longer pinned");
    cr_assert_eq(cuMemHostUnregister(buf + n / 2), CUDA_SUCCESS);
    cr_assert_eq(cuMemHostRegister(buf, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
    cr_assert_eq(cuMemHostRegister((void *)(uintptr_t)d, 4096, 0), CUDA_ERROR_INVALID_VALUE,
                 "device memory");
    free(buf);
}

// --- pointer attributes ------------------------------------------------------------------------
Test(attr, pointer_attributes, .init = setup)
{
    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc(&d, 10000), CUDA_SUCCESS);
    unsigned type = 0;
    cr_assert_eq(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 50),
                 CUDA_SUCCESS);
    cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
    CUdeviceptr start = 0;
    size_t size = 0;
    cr_assert_eq(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 50),
                 CUDA_SUCCESS);
    cr_assert_eq(start, d);
    cr_assert_eq(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 50),
                 CUDA_SUCCESS);
    cr_assert_eq(size, 10000);
    CUcontext c = NULL;
    cr_assert_eq(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, d), CUDA_SUCCESS);
    cr_assert_eq(c, ctx);
    int ord = -1;
    cr_assert_eq(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d), CUDA_SUCCESS);
    cr_assert_eq(ord, 0);
    CUdeviceptr dp = 0;
    cr_assert_eq(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 8),
                 CUDA_SUCCESS);
    cr_assert_eq(dp, d + 8);
    void *hp;
    cr_assert_eq(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
                 CUDA_ERROR_INVALID_VALUE);
    unsigned mapped = 0;
    cr_assert_eq(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, d), CUDA_SUCCESS);
    cr_assert_eq(mapped, 1);

    void *h;
    cr_assert_eq(cuMemHostAlloc(&h, 8192, 0), CUDA_SUCCESS);
    cr_assert_eq(
        cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h),
        CUDA_SUCCESS);
    cr_assert_eq(type, CU_MEMORYTYPE_HOST);
    cr_assert_eq(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                       (CUdeviceptr)(uintptr_t)h + 4),
                 CUDA_SUCCESS);
    cr_assert_eq(hp, (char *)h + 4);

    // Unregistered host memory: invalid for cuPointerGetAttribute, default
    // values (no error) for cuPointerGetAttributes.
    int local;
    CUdeviceptr lp = (CUdeviceptr)(uintptr_t)&local;
    cr_assert_eq(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, lp),
                 CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
    type = 77;
    dp = 77;
    void *data[2] = {&type, &dp};
    cr_assert_eq(cuPointerGetAttributes(2, attrs, data, lp), CUDA_SUCCESS);
    cr_assert_eq(type, 0);
    cr_assert_eq(dp, 0);
    cr_assert_eq(cuPointerGetAttributes(2, attrs, data, d), CUDA_SUCCESS);
    cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
    cr_assert_eq(dp, d);

    // Freed: no longer a pointer.
    cr_assert_eq(cuMemFree(d), CUDA_SUCCESS);
    cr_assert_eq(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d),
                 CUDA_ERROR_INVALID_VALUE);
    // Reserved but unmapped VA: not a pointer either.
    CUdeviceptr va;
    cr_assert_eq(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va),
                 CUDA_ERROR_INVALID_VALUE);
}
