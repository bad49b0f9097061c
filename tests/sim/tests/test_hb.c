// SPDX-License-Identifier: MIT
// The happens-before checker: planted ordering bugs are reported (counted in
// simGetStats, described by simLastRace) and correctly ordered programs are
// not, whatever the virtual timing says.
#include <criterion/criterion.h>
#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim_test.h"
#include "simgpu.h"

// Exported by the simulated driver; cuda.h declares the per-thread-stream
// entry points only for the driver's own build.
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra);

#define BYTES 4096

static uint64_t races(void)
{
    sim_stats_t st;
    OK(simGetStats(&st));
    return st.races;
}

// produce(buf): writes BYTES; consume(out, in): reads in, writes out.
static void produce_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    memset(*(void **)args[0], 0x11, BYTES);
}

static void consume_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    memcpy(*(void **)args[0], *(void **)args[1], BYTES);
}

static CUfunction k_produce, k_consume;

static void make_kernels(void)
{
    sim_kernel_desc_t p = {
        .name = "produce",
        .fn = produce_fn,
        .nparams = 1,
        .param_size = {8},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_W, .count_param = -1, .scale = BYTES}},
        .ns_fixed = 1000,
        .flops_param = -1,
    };
    sim_kernel_desc_t c = {
        .name = "consume",
        .fn = consume_fn,
        .nparams = 2,
        .param_size = {8, 8},
        .naccess = 2,
        .access = {{.param = 0, .mode = SIM_W, .count_param = -1, .scale = BYTES},
                   {.param = 1, .mode = SIM_R, .count_param = -1, .scale = BYTES}},
        .ns_fixed = 1000,
        .flops_param = -1,
    };
    OK(simKernelCreate(&p, &k_produce));
    OK(simKernelCreate(&c, &k_consume));
}

static void produce(CUdeviceptr buf, CUstream s)
{
    void *args[] = {&buf};
    OK(cuLaunchKernel(k_produce, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static void consume(CUdeviceptr out, CUdeviceptr in, CUstream s)
{
    void *args[] = {&out, &in};
    OK(cuLaunchKernel(k_consume, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static CUstream stream(unsigned flags)
{
    CUstream s;
    OK(cuStreamCreate(&s, flags));
    return s;
}

static CUdeviceptr alloc(void)
{
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, BYTES));
    return d;
}

// --- stream to stream ----------------------------------------------------------------
Test(hb, missing_event_wait_is_a_race)
{
    start();
    make_kernels();
    CUdeviceptr buf = alloc(), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    produce(buf, s1);
    consume(out, buf, s2);
    cr_assert_eq(races(), 1);
    char msg[1024];
    OK(simLastRace(msg, sizeof msg));
    cr_assert(strstr(msg, "produce") && strstr(msg, "consume"), "race description: %s", msg);
}

Test(hb, event_wait_orders_producer_and_consumer)
{
    start();
    make_kernels();
    CUdeviceptr buf = alloc(), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    CUevent e;
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    produce(buf, s1);
    OK(cuEventRecord(e, s1));
    OK(cuStreamWaitEvent(s2, e, 0));
    consume(out, buf, s2);
    cr_assert_eq(races(), 0);
    char msg[1024];
    OK(simLastRace(msg, sizeof msg));
    cr_assert_str_empty(msg);
}

Test(hb, race_is_found_even_when_timing_is_fine)
{
    // The host synchronises s3, whose kernel queued behind the producer on
    // the compute engine, so in virtual time the consumer starts after the
    // producer ended. Nothing the program did orders them: still a race.
    start();
    make_kernels();
    CUdeviceptr buf = alloc(), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING),
             s3 = stream(CU_STREAM_NON_BLOCKING);
    produce(buf, s1);
    produce(alloc(), s3); // queued behind the producer on the compute engine
    OK(cuStreamSynchronize(s3));
    consume(out, buf, s2);
    cr_assert_eq(races(), 1);
}

Test(hb, read_read_never_races)
{
    start();
    make_kernels();
    CUdeviceptr buf = alloc(), o1 = alloc(), o2 = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    produce(buf, NULL);
    OK(cuCtxSynchronize());
    consume(o1, buf, s1);
    consume(o2, buf, s2);
    cr_assert_eq(races(), 0);
    // ... but a write after both reads, ordered after only one of them, is.
    CUevent e;
    OK(cuEventCreate(&e, 0));
    OK(cuEventRecord(e, s1));
    OK(cuStreamWaitEvent(s2, e, 0));
    produce(buf, s2);
    cr_assert_eq(races(), 0, "s2 is ordered after both reads");
    produce(buf, s1);
    cr_assert_eq(races(), 1, "s1 is not ordered after s2's write");
}

Test(hb, legacy_stream_orders_blocking_streams_only)
{
    start();
    make_kernels();
    CUdeviceptr a = alloc(), b = alloc(), out = alloc();
    CUstream blocking = stream(0), nonblocking = stream(CU_STREAM_NON_BLOCKING);
    produce(a, blocking);
    consume(out, a, NULL); // legacy waits for the blocking stream
    cr_assert_eq(races(), 0);
    consume(a, out, blocking); // and blocking streams wait for legacy work
    cr_assert_eq(races(), 0);
    produce(b, nonblocking);
    consume(out, b, NULL); // not for a non-blocking one
    cr_assert_eq(races(), 1);
}

// --- per-thread default streams -------------------------------------------------------
Test(hb, per_thread_stream_is_a_blocking_stream)
{
    start();
    make_kernels();
    CUdeviceptr a = alloc(), out = alloc();
    void *args[] = {&a};
    OK(cuLaunchKernel_ptsz(k_produce, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL)); // NULL: per-thread
    consume(out, a, CU_STREAM_LEGACY);
    cr_assert_eq(races(), 0, "the legacy stream waits for the per-thread stream");
    produce(a, CU_STREAM_PER_THREAD); // the same per-thread stream, after the legacy work
    cr_assert_eq(races(), 0);
}

static CUdeviceptr shared_buf;

static void *other_thread(void *arg)
{
    (void)arg;
    CUcontext ctx;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return (void *)1;
    void *args[] = {&shared_buf};
    return (void *)(uintptr_t)cuLaunchKernel(k_produce, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD,
                                             args, NULL);
}

Test(hb, per_thread_streams_of_two_threads_are_unordered)
{
    // pthread_join orders the host threads but not the GPU work they queued
    // on their own per-thread streams: a real race.
    start();
    make_kernels();
    shared_buf = alloc();
    CUdeviceptr out = alloc();
    pthread_t t;
    void *ret;
    cr_assert_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    cr_assert_null(ret);
    consume(out, shared_buf, CU_STREAM_PER_THREAD);
    cr_assert_eq(races(), 1);
}

// --- host against device ---------------------------------------------------------------
static CUdeviceptr vmm_buffer(CUmemGenericAllocationHandle *handle, size_t *size)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, gran, 0, 0, 0));
    OK(cuMemCreate(handle, gran, &prop, 0));
    OK(cuMemMap(va, gran, 0, *handle, 0));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va, gran, &acc, 1));
    *size = gran;
    return va;
}

Test(hb, unmap_while_a_kernel_may_run_is_a_race)
{
    start();
    make_kernels();
    CUmemGenericAllocationHandle h;
    size_t size;
    CUdeviceptr va = vmm_buffer(&h, &size), out = alloc();
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    consume(out, va, s);
    OK(cuMemUnmap(va, size));
    cr_assert_eq(races(), 1);
}

Test(hb, unmap_after_event_synchronize_is_ordered)
{
    start();
    make_kernels();
    CUmemGenericAllocationHandle h;
    size_t size;
    CUdeviceptr va = vmm_buffer(&h, &size), out = alloc();
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    CUevent e;
    OK(cuEventCreate(&e, 0));
    consume(out, va, s);
    OK(cuEventRecord(e, s));
    OK(cuEventSynchronize(e));
    OK(cuMemUnmap(va, size));
    OK(cuMemRelease(h));
    cr_assert_eq(races(), 0);
}

Test(hb, unmap_after_successful_query_is_ordered)
{
    start();
    make_kernels();
    CUmemGenericAllocationHandle h;
    size_t size;
    CUdeviceptr va = vmm_buffer(&h, &size), out = alloc();
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    CUevent e;
    OK(cuEventCreate(&e, 0));
    produce(va, s);
    OK(cuEventRecord(e, s));
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY)
        OK(cuCtxGetDevice(&(CUdevice){0})); // each call advances the host clock
    OK(cuMemUnmap(va, size));
    cr_assert_eq(races(), 0);
    (void)out;
}

// The same handle mapped at a second address (aoshim lends the memory of a
// mapping whose last uses are still queued to a new one, ordered on the
// GPU): a use through the new address is checked against the uses through
// the old one.
static CUdeviceptr second_mapping(CUmemGenericAllocationHandle h, size_t size)
{
    CUdeviceptr va2;
    OK(cuMemAddressReserve(&va2, size, 0, 0, 0));
    OK(cuMemMap(va2, size, 0, h, 0));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va2, size, &acc, 1));
    return va2;
}

Test(hb, a_write_through_a_second_mapping_races_the_first_mappings_reader)
{
    start();
    make_kernels();
    CUmemGenericAllocationHandle h;
    size_t size;
    CUdeviceptr va = vmm_buffer(&h, &size), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    consume(out, va, s1); // reads the memory through va
    CUdeviceptr va2 = second_mapping(h, size);
    produce(va2, s2); // writes the same memory, unordered with the read
    cr_assert_eq(races(), 1);
    char msg[1024];
    OK(simLastRace(msg, sizeof msg));
    cr_assert(strstr(msg, "consume") && strstr(msg, "produce"), "race description: %s", msg);
}

Test(hb, a_second_mapping_ordered_after_the_first_mappings_uses_does_not_race)
{
    start();
    make_kernels();
    CUmemGenericAllocationHandle h;
    size_t size;
    CUdeviceptr va = vmm_buffer(&h, &size), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    CUevent e;
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    produce(va, s1);
    OK(cuEventRecord(e, s1));
    CUdeviceptr va2 = second_mapping(h, size);
    OK(cuStreamWaitEvent(s2, e, 0));
    consume(out, va2, s2); // reads what produce wrote through va
    OK(cuStreamSynchronize(s2));
    unsigned char back[16];
    OK(cuMemcpyDtoH(back, out, sizeof back));
    cr_assert_eq(back[0], 0x11, "the second mapping shows the first's bytes");
    OK(cuMemUnmap(va, size)); // after the host saw s2 (and so s1's write) complete
    cr_assert_eq(races(), 0);
    OK(cuMemUnmap(va2, size));
    OK(cuMemRelease(h));
}

static struct {
    CUdeviceptr va;
    size_t size;
    CUevent done;
    CUmemGenericAllocationHandle h;
} offload;

static void *release_worker(void *arg)
{
    (void)arg;
    CUcontext ctx;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return (void *)1;
    // aoshim's release worker: wait for the uses, then unmap and release.
    if (cuEventSynchronize(offload.done) || cuMemUnmap(offload.va, offload.size) ||
        cuMemRelease(offload.h))
        return (void *)2;
    return NULL;
}

Test(hb, remap_after_another_threads_unmap_is_not_a_race)
{
    // The main thread maps fresh memory at the same address after a worker
    // thread unmapped it. pthread_join orders the two host threads, which the
    // checker cannot see: an earlier unmap must never count as a conflict.
    start();
    make_kernels();
    offload.va = vmm_buffer(&offload.h, &offload.size);
    CUstream s = stream(CU_STREAM_NON_BLOCKING);
    OK(cuEventCreate(&offload.done, CU_EVENT_DISABLE_TIMING));
    produce(offload.va, s);
    OK(cuEventRecord(offload.done, s));
    pthread_t t;
    void *ret;
    cr_assert_eq(pthread_create(&t, NULL, release_worker, NULL), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    cr_assert_null(ret);
    cr_assert_eq(races(), 0);

    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h2;
    OK(cuMemCreate(&h2, offload.size, &prop, 0));
    OK(cuMemMap(offload.va, offload.size, 0, h2, 0));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(offload.va, offload.size, &acc, 1));
    produce(offload.va, s);
    cr_assert_eq(races(), 0);
}

Test(hb, pinned_host_buffer_reused_before_copy_completes)
{
    // A D2H copy into pinned memory on s1, then an H2D copy from the same
    // pinned buffer's range written by another D2H on s2: two unordered
    // writes to the pinned range.
    start();
    CUdeviceptr d1 = alloc(), d2 = alloc();
    void *h;
    OK(cuMemAllocHost_v2(&h, BYTES));
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    OK(cuMemcpyDtoHAsync_v2(h, d1, BYTES, s1));
    OK(cuMemcpyDtoHAsync_v2(h, d2, BYTES, s2));
    cr_assert_eq(races(), 1);
}

Test(hb, race_fatal_exits, .exit_code = SIM_EXIT_RACE)
{
    setenv("SIM_RACE_FATAL", "1", 1);
    start();
    make_kernels();
    CUdeviceptr buf = alloc(), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    produce(buf, s1);
    consume(out, buf, s2);
    cr_assert_fail("the race should have stopped the program");
}

Test(hb, no_data_mode_still_checks)
{
    setenv("SIM_NODATA", "1", 1);
    start();
    make_kernels();
    CUdeviceptr buf = alloc(), out = alloc();
    CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
    produce(buf, s1);
    consume(out, buf, s2);
    cr_assert_eq(races(), 1);
}
