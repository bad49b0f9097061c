// SPDX-License-Identifier: MIT
// Streams, events, launches, copies and the virtual clock of the simulated
// driver: results are checked as bytes, simulated times and error codes.
#include <criterion/criterion.h>
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h" // sim_graph_t, to look inside a captured graph
#include "sim_test.h"
#include "simgpu.h"

// Per-thread-stream entry points are exported but declared by cuda.h only
// for the driver's own build.
CUresult cuStreamSynchronize_ptsz(CUstream hStream);

#define MS (1000000ull)

// --- fixtures (start() and OK: sim_test.h) --------------------------------------
static uint64_t host_ns(void)
{
    sim_stats_t st;
    OK(simGetStats(&st));
    return st.host_ns;
}

// out[i] = a * in[i] for i < n
static void scale_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    float *out = *(float **)args[0];
    const float *in = *(const float **)args[1];
    float a = *(float *)args[2];
    int n = *(int *)args[3];
    for (int i = 0; i < n; i++)
        out[i] = a * in[i];
}

static CUfunction make_scale(void)
{
    sim_kernel_desc_t d = {
        .name = "scale_kernel",
        .fn = scale_fn,
        .nparams = 4,
        .param_size = {8, 8, 4, 4},
        .naccess = 2,
        .access = {{.param = 0, .mode = SIM_W, .count_param = 3, .scale = 4},
                   {.param = 1, .mode = SIM_R, .count_param = 3, .scale = 4}},
        .ns_fixed = 1000,
        .flops_param = -1,
    };
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    return f;
}

// A kernel that only takes time: ns_fixed = its param 0 is not possible, so
// one kernel per duration.
static CUfunction make_sleep(uint64_t ns, const char *name)
{
    sim_kernel_desc_t d = {
        .name = name, .nparams = 0, .naccess = 0, .ns_fixed = ns, .flops_param = -1};
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    return f;
}

static void launch0(CUfunction f, CUstream s)
{
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
}

// --- kernels -------------------------------------------------------------------
Test(exec, kernel_computes_bytes_via_kernel_params)
{
    start();
    enum { N = 1000 };
    CUdeviceptr din, dout;
    OK(cuMemAlloc_v2(&din, N * 4));
    OK(cuMemAlloc_v2(&dout, N * 4));
    float h[N], r[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)i;
    OK(cuMemcpyHtoD_v2(din, h, sizeof h));
    CUfunction f = make_scale();
    float a = 2.5f;
    int n = N;
    void *params[] = {&dout, &din, &a, &n};
    OK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    OK(cuMemcpyDtoH_v2(r, dout, sizeof r));
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(r[i], 2.5f * (float)i, 1e-6, "r[%d] = %f", i, r[i]);
    sim_stats_t st;
    OK(simGetStats(&st));
    cr_assert_eq(st.launches, 1);
    cr_assert_eq(st.copies, 2);
}

Test(exec, kernel_via_packed_extra_and_launch_ex)
{
    start();
    enum { N = 64 };
    CUdeviceptr din, dout;
    OK(cuMemAlloc_v2(&din, N * 4));
    OK(cuMemAlloc_v2(&dout, N * 4));
    float h[N], r[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)(i + 1);
    OK(cuMemcpyHtoD_v2(din, h, sizeof h));
    CUfunction f = make_scale();

    // Packed layout: two pointers at 0 and 8, float at 16, int at 20.
    unsigned char buf[24];
    float a = -1.0f;
    int n = N;
    memcpy(buf, &dout, 8);
    memcpy(buf + 8, &din, 8);
    memcpy(buf + 16, &a, 4);
    memcpy(buf + 20, &n, 4);
    size_t size = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    OK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, extra));
    OK(cuMemcpyDtoH_v2(r, dout, sizeof r));
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(r[i], -(float)(i + 1), 1e-6);

    // A wrong size, both forms, neither form, a zero dimension: invalid.
    size_t bad = 20;
    void *extra_bad[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bad,
                         CU_LAUNCH_PARAM_END};
    cr_assert_eq(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra_bad),
                 CUDA_ERROR_INVALID_VALUE);
    void *params[] = {&dout, &din, &a, &n};
    cr_assert_eq(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, extra),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuLaunchKernel(f, 1, 1, 1, 1, 0, 1, 0, NULL, params, NULL),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                 CUDA_ERROR_INVALID_HANDLE);

    // cuLaunchKernelEx: a = 3 this time.
    a = 3.0f;
    CUlaunchConfig cfg = {.gridDimX = 1,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 32,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = NULL};
    OK(cuLaunchKernelEx(&cfg, f, params, NULL));
    OK(cuMemcpyDtoH_v2(r, dout, sizeof r));
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(r[i], 3.0f * (float)(i + 1), 1e-6);
    cfg.gridDimY = 0;
    cr_assert_eq(cuLaunchKernelEx(&cfg, f, params, NULL), CUDA_ERROR_INVALID_VALUE);
}

Test(exec, param_info_counts_and_offsets)
{
    start();
    sim_kernel_desc_t d = {
        .name = "mixed",
        .nparams = 5,
        .param_size = {4, 8, 2, 8, 1},
        .flops_param = -1,
    };
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    // Count as callers must: ask until the index is invalid.
    size_t off[8], size[8], n = 0;
    while (cuFuncGetParamInfo(f, n, &off[n], &size[n]) == CUDA_SUCCESS)
        n++;
    cr_assert_eq(n, 5);
    cr_assert_eq(cuFuncGetParamInfo(f, 5, &off[0], &size[0]), CUDA_ERROR_INVALID_VALUE);
    size_t want_off[] = {0, 8, 16, 24, 32}, want_size[] = {4, 8, 2, 8, 1};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(off[i], want_off[i], "param %zu offset %zu", i, off[i]);
        cr_assert_eq(size[i], want_size[i]);
    }
    size_t o, s;
    OK(cuKernelGetParamInfo((CUkernel)(void *)f, 3, &o, &s));
    cr_assert_eq(o, 24);
    const char *name;
    OK(cuFuncGetName(&name, f));
    cr_assert_str_eq(name, "mixed");
    OK(cuKernelGetName(&name, (CUkernel)(void *)f));
    cr_assert_str_eq(name, "mixed");

    // Descriptors that would make the checker read garbage are refused.
    sim_kernel_desc_t bad = d;
    bad.naccess = 1;
    bad.access[0] = (sim_access_t){
        .param = 0, .mode = SIM_R, .count_param = -1, .scale = 4}; // 4-byte "pointer"
    cr_assert_eq(simKernelCreate(&bad, &f), CUDA_ERROR_INVALID_VALUE);
    bad.access[0] =
        (sim_access_t){.param = 1, .mode = SIM_R, .count_param = 4, .scale = 4}; // 1-byte count
    cr_assert_eq(simKernelCreate(&bad, &f), CUDA_ERROR_INVALID_VALUE);
}

// --- the virtual clock -------------------------------------------------------------
Test(exec, d2h_1gib_at_50gbps_takes_21_5ms)
{
    setenv("SIM_NODATA", "1", 1);
    setenv("SIM_D2H_GBPS", "50", 1);
    start();
    size_t bytes = 1ull << 30;
    CUdeviceptr d;
    void *h;
    OK(cuMemAlloc_v2(&d, bytes));
    OK(cuMemAllocHost_v2(&h, bytes));
    CUstream s;
    CUevent e0, e1;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e0, 0));
    OK(cuEventCreate(&e1, 0));
    OK(cuEventRecord(e0, s));
    OK(cuMemcpyDtoHAsync_v2(h, d, bytes, s));
    OK(cuEventRecord(e1, s));
    OK(cuEventSynchronize(e1));
    float ms;
    OK(cuEventElapsedTime_v2(&ms, e0, e1));
    cr_assert(ms > 21.5f * 0.99f && ms < 21.5f * 1.01f, "1 GiB D2H took %f ms", ms);
    sim_stats_t st;
    OK(simGetStats(&st));
    cr_assert(st.busy_ns_d2h > 21285000ull && st.busy_ns_d2h < 21715000ull);
}

// Simulated host time of copying on two streams, from enqueue to device sync.
static uint64_t two_copies(bool second_is_h2d)
{
    size_t bytes = 256ull << 20;
    CUdeviceptr d1, d2;
    void *h1, *h2;
    OK(cuMemAlloc_v2(&d1, bytes));
    OK(cuMemAlloc_v2(&d2, bytes));
    OK(cuMemAllocHost_v2(&h1, bytes));
    OK(cuMemAllocHost_v2(&h2, bytes));
    CUstream s1, s2;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    uint64_t t0 = host_ns();
    OK(cuMemcpyDtoHAsync_v2(h1, d1, bytes, s1));
    if (second_is_h2d)
        OK(cuMemcpyHtoDAsync_v2(d2, h2, bytes, s2));
    else
        OK(cuMemcpyDtoHAsync_v2(h2, d2, bytes, s2));
    OK(cuCtxSynchronize());
    return host_ns() - t0;
}

Test(exec, d2h_and_h2d_overlap_two_d2h_serialise)
{
    setenv("SIM_NODATA", "1", 1);
    setenv("SIM_D2H_GBPS", "50", 1);
    setenv("SIM_H2D_GBPS", "50", 1);
    start();
    double one = (double)(256ull << 20) / 50.0; // ns
    double both = (double)two_copies(true);
    double serial = (double)two_copies(false);
    cr_assert(both > one * 0.99 && both < one * 1.02, "D2H+H2D took %.0f ns, one copy %.0f", both,
              one);
    cr_assert(serial > 2 * one * 0.99 && serial < 2 * one * 1.02,
              "2xD2H took %.0f ns, one copy %.0f", serial, one);
}

Test(exec, event_and_stream_query_not_ready_then_ready)
{
    start();
    CUfunction k = make_sleep(5 * MS, "long_kernel");
    CUstream s;
    CUevent e;
    OK(cuStreamCreate(&s, 0));
    OK(cuEventCreate(&e, 0));
    launch0(k, s);
    OK(cuEventRecord(e, s));
    cr_assert_eq(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    cr_assert_eq(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    float ms;
    CUevent e0;
    OK(cuEventCreate(&e0, 0));
    OK(cuEventRecord(e0, s));
    cr_assert_eq(cuEventElapsedTime_v2(&ms, e, e0), CUDA_ERROR_NOT_READY);
    uint64_t before = host_ns();
    OK(cuEventSynchronize(e));
    cr_assert_geq(host_ns() - before, 4 * MS, "the host waited for the kernel");
    OK(cuEventQuery(e));
    OK(cuStreamQuery(s));
    OK(cuStreamSynchronize(s));
}

Test(exec, never_recorded_event_is_complete)
{
    start();
    CUevent e, t;
    OK(cuEventCreate(&e, 0));
    OK(cuEventCreate(&t, CU_EVENT_DISABLE_TIMING));
    cr_assert_eq(cuEventQuery(e), CUDA_SUCCESS);
    OK(cuEventSynchronize(e));
    float ms;
    cr_assert_eq(cuEventElapsedTime_v2(&ms, e, e), CUDA_ERROR_INVALID_HANDLE);
    OK(cuEventRecord(e, NULL));
    OK(cuEventRecord(t, NULL));
    OK(cuEventSynchronize(t));
    cr_assert_eq(cuEventElapsedTime_v2(&ms, e, t), CUDA_ERROR_INVALID_HANDLE, "timing disabled");
    OK(cuEventDestroy_v2(e));
    cr_assert_eq(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE, "destroyed handle");
    cr_assert_eq(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
}

Test(exec, stream_wait_event_captures_the_record_at_call_time)
{
    setenv("SIM_NODATA", "1", 1);
    start();
    CUfunction k10 = make_sleep(10 * MS, "ten_ms");
    CUstream s1, s2;
    CUevent e0, e, e2;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&e0, 0));
    OK(cuEventCreate(&e, 0));
    OK(cuEventCreate(&e2, 0));
    OK(cuEventRecord(e0, s1));
    launch0(k10, s1);
    OK(cuEventRecord(e, s1)); // ~10 ms
    OK(cuStreamWaitEvent(s2, e, 0));
    launch0(k10, s1);
    OK(cuEventRecord(e, s1)); // ~20 ms: must not move s2's wait
    CUdeviceptr d;
    void *h;
    OK(cuMemAlloc_v2(&d, 1 << 20));
    OK(cuMemAllocHost_v2(&h, 1 << 20));
    OK(cuMemcpyDtoHAsync_v2(h, d, 1 << 20, s2)); // copy engine: free of the kernels
    OK(cuEventRecord(e2, s2));
    OK(cuEventSynchronize(e2));
    float ms;
    OK(cuEventElapsedTime_v2(&ms, e0, e2));
    cr_assert(ms > 10.0f && ms < 12.0f, "s2 finished at %f ms: waited for the first record only",
              ms);
    OK(cuEventSynchronize(e));
    OK(cuEventElapsedTime_v2(&ms, e0, e));
    cr_assert(ms > 19.9f && ms < 20.2f, "second record at %f ms", ms);
}

// D2H on a created stream, then H2D on the legacy stream: the legacy stream
// waits for blocking streams, never for non-blocking ones.
static uint64_t legacy_after(unsigned flags)
{
    size_t bytes = 64ull << 20;
    CUdeviceptr d1, d2;
    void *h1, *h2;
    OK(cuMemAlloc_v2(&d1, bytes));
    OK(cuMemAlloc_v2(&d2, bytes));
    OK(cuMemAllocHost_v2(&h1, bytes));
    OK(cuMemAllocHost_v2(&h2, bytes));
    CUstream s;
    OK(cuStreamCreate(&s, flags));
    uint64_t t0 = host_ns();
    OK(cuMemcpyDtoHAsync_v2(h1, d1, bytes, s));
    OK(cuMemcpyHtoDAsync_v2(d2, h2, bytes, NULL));
    OK(cuCtxSynchronize());
    return host_ns() - t0;
}

Test(exec, legacy_stream_orders_after_blocking_streams)
{
    setenv("SIM_NODATA", "1", 1);
    setenv("SIM_D2H_GBPS", "50", 1);
    setenv("SIM_H2D_GBPS", "50", 1);
    start();
    double one = (double)(64ull << 20) / 50.0;
    double blocking = (double)legacy_after(0);
    double nonblocking = (double)legacy_after(CU_STREAM_NON_BLOCKING);
    cr_assert(blocking > 2 * one * 0.99 && blocking < 2 * one * 1.05, "blocking: %.0f ns vs %.0f",
              blocking, one);
    cr_assert(nonblocking > one * 0.99 && nonblocking < one * 1.05, "non-blocking: %.0f ns vs %.0f",
              nonblocking, one);

    // And the other way: a blocking stream waits for earlier legacy work.
    CUstream s;
    CUevent e0, e1;
    OK(cuStreamCreate(&s, 0));
    OK(cuEventCreate(&e0, 0));
    OK(cuEventCreate(&e1, 0));
    CUdeviceptr d;
    void *h;
    size_t bytes = 64ull << 20;
    OK(cuMemAlloc_v2(&d, bytes));
    OK(cuMemAllocHost_v2(&h, bytes));
    OK(cuEventRecord(e0, NULL));
    OK(cuMemcpyDtoHAsync_v2(h, d, bytes, NULL));
    OK(cuMemcpyHtoDAsync_v2(d, h, bytes, s));
    OK(cuEventRecord(e1, s));
    OK(cuEventSynchronize(e1));
    float ms;
    OK(cuEventElapsedTime_v2(&ms, e0, e1));
    cr_assert(ms * 1e6 > 2 * one * 0.99, "blocking stream after legacy: %f ms", ms);
}

Test(exec, stream_handles_and_flags)
{
    start();
    CUstream s;
    cr_assert_eq(cuStreamCreate(&s, 0x10), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
    unsigned fl = 0;
    OK(cuStreamGetFlags(s, &fl));
    cr_assert_eq(fl, CU_STREAM_NON_BLOCKING);
    OK(cuStreamDestroy_v2(s));
    cr_assert_eq(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    OK(cuStreamSynchronize_ptsz(NULL));
}

Test(exec, wrong_direction_copies_are_invalid)
{
    start();
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, 4096));
    char h[4096];
    cr_assert_eq(cuMemcpyHtoD_v2(d, (void *)(uintptr_t)d, 4096), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemcpyDtoH_v2((void *)(uintptr_t)d, d, 4096), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemcpyDtoD_v2(d, (CUdeviceptr)(uintptr_t)h, 4096), CUDA_ERROR_INVALID_VALUE);
    // Unified cuMemcpy picks the direction from the pointers.
    memset(h, 7, sizeof h);
    OK(cuMemcpy(d, (CUdeviceptr)(uintptr_t)h, 4096));
    OK(cuMemsetD8_v2(d, 0x5a, 100));
    OK(cuMemsetD32_v2(d + 128, 0x01020304, 4));
    char r[4096];
    OK(cuMemcpyDtoH_v2(r, d, 4096));
    cr_assert_eq(r[0], 0x5a);
    cr_assert_eq(r[99], 0x5a);
    cr_assert_eq(r[100], 7);
    uint32_t w;
    memcpy(&w, r + 132, 4);
    cr_assert_eq(w, 0x01020304);
    cr_assert_eq(cuMemsetD32_v2(d + 2, 0, 1), CUDA_ERROR_INVALID_VALUE, "misaligned D32");
}

// --- faults --------------------------------------------------------------------------
static void launch_on_freed(void)
{
    start();
    CUdeviceptr din, dout;
    OK(cuMemAlloc_v2(&din, 4096));
    OK(cuMemAlloc_v2(&dout, 4096));
    OK(cuMemFree_v2(din));
    CUfunction f = make_scale();
    float a = 1;
    int n = 1024;
    void *params[] = {&dout, &din, &a, &n};
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
}

Test(exec, kernel_on_freed_memory_faults, .exit_code = SIM_EXIT_FAULT)
{
    launch_on_freed();
    cr_assert_fail("the launch should have stopped the program");
}

static void loud_launch_on_freed(void)
{
    unsetenv("SIM_QUIET");
    launch_on_freed();
}

Test(exec, fault_diagnostic_names_the_kernel)
{
    char buf[8192];
    // 128 + a signal's number if it died of one: never SIM_EXIT_FAULT (86).
    cr_assert_eq(run_child_capture(loud_launch_on_freed, buf, sizeof buf), SIM_EXIT_FAULT,
                 "stderr: %s", buf);
    cr_assert(strstr(buf, "scale_kernel") != NULL, "diagnostic lacks the kernel name: %s", buf);
}

// --- capture ---------------------------------------------------------------------------
Test(exec, capture_records_and_does_not_execute)
{
    start();
    enum { N = 16 };
    CUdeviceptr din, dout;
    OK(cuMemAlloc_v2(&din, N * 4));
    OK(cuMemAlloc_v2(&dout, N * 4));
    float h[N], r[N];
    for (int i = 0; i < N; i++)
        h[i] = 1.0f;
    OK(cuMemcpyHtoD_v2(din, h, sizeof h));
    OK(cuMemsetD32_v2(dout, 0, N));
    CUfunction f = make_scale();
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus cs;
    OK(cuStreamIsCapturing(s, &cs));
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    float a = 4;
    int n = N;
    void *params[] = {&dout, &din, &a, &n};
    OK(cuLaunchKernel(f, 1, 1, 1, N, 1, 1, 0, s, params, NULL));
    a = 0; // the graph keeps its own copy of the arguments
    OK(cuMemsetD8Async(din, 0, N * 4, s));
    sim_stats_t st;
    OK(simGetStats(&st));
    uint64_t launches = st.launches;
    CUgraph g;
    OK(cuStreamEndCapture(s, &g));
    cr_assert_not_null(g);
    const sim_graph_t *sg = (const sim_graph_t *)g;
    cr_assert_eq(sg->n, 2);
    cr_assert_eq(sg->nodes[0].kind, SIM_NODE_KERNEL);
    float ga;
    memcpy(&ga, (char *)sg->nodes[0].argbuf + 16, 4);
    cr_assert_float_eq(ga, 4.0f, 0);
    cr_assert_eq(sg->nodes[1].kind, SIM_NODE_MEMSET);
    OK(cuStreamIsCapturing(s, &cs));
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    OK(simGetStats(&st));
    cr_assert_eq(st.launches, launches, "a captured launch does not run");
    OK(cuMemcpyDtoH_v2(r, dout, sizeof r));
    for (int i = 0; i < N; i++)
        cr_assert_float_eq(r[i], 0.0f, 0, "captured kernel ran");
    OK(cuMemcpyDtoH_v2(r, din, sizeof r));
    cr_assert_float_eq(r[0], 1.0f, 0, "captured memset ran");
}

Test(exec, capture_rules)
{
    start();
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    cr_assert_eq(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
                 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g = (CUgraph)1;
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);

    // Synchronising a capturing stream fails and invalidates the capture.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cr_assert_eq(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
                 CUDA_ERROR_ILLEGAL_STATE);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUstreamCaptureStatus cs;
    OK(cuStreamIsCapturing(s, &cs));
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    cr_assert_null(g);

    // The legacy stream while a blocking stream captures: implicit dependency.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cr_assert_eq(cuStreamIsCapturing(NULL, &cs), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CUfunction k = make_sleep(1000, "tiny");
    cr_assert_eq(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                 CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // Event record and wait during capture become nodes.
    CUevent e;
    OK(cuEventCreate(&e, 0));
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuEventRecord(e, s));
    OK(cuStreamWaitEvent(s, e, 0));
    OK(cuStreamEndCapture(s, &g));
    cr_assert_eq(((const sim_graph_t *)g)->n, 2);
    cr_assert_eq(cuEventQuery(e), CUDA_SUCCESS, "a captured record does not record");
}

Test(exec, capture_fork_join_across_streams)
{
    start();
    CUfunction k = make_sleep(1000, "tiny");
    CUstream origin, side;
    CUevent fork_e, join_e, outside;
    OK(cuStreamCreate(&origin, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&fork_e, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&join_e, CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&outside, 0));
    OK(cuEventRecord(outside, NULL));

    // Fork: the side stream waits on an event recorded in the capture and so
    // joins it; its work must be joined back before the capture ends.
    OK(cuStreamBeginCapture_v2(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuEventRecord(fork_e, origin));
    cr_assert_eq(cuEventQuery(fork_e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    OK(cuStreamWaitEvent(side, fork_e, 0));
    CUstreamCaptureStatus cs;
    OK(cuStreamIsCapturing(side, &cs));
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    launch0(k, side);
    CUgraph g;
    cr_assert_eq(cuStreamEndCapture(side, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    OK(cuEventRecord(join_e, side));
    OK(cuStreamWaitEvent(origin, join_e, 0));
    OK(cuStreamEndCapture(origin, &g));
    cr_assert_not_null(g);
    cr_assert_eq(((const sim_graph_t *)g)->n, 5);
    OK(cuStreamIsCapturing(side, &cs));
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    OK(cuEventQuery(fork_e));

    // Unjoined fork: the capture ends without a graph.
    OK(cuStreamBeginCapture_v2(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuEventRecord(fork_e, origin));
    OK(cuStreamWaitEvent(side, fork_e, 0));
    launch0(k, side);
    cr_assert_eq(cuStreamEndCapture(origin, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    cr_assert_null(g);

    // A wait on an event recorded outside the capture crosses its boundary.
    OK(cuStreamBeginCapture_v2(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cr_assert_eq(cuStreamWaitEvent(origin, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    cr_assert_eq(cuStreamEndCapture(origin, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

// count(n: 8-byte) elements of 2 bytes; flops = 2 * m (m: 4-byte param).
static void fill_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    uint16_t *p = *(uint16_t **)args[0];
    uint64_t n = *(uint64_t *)args[1];
    for (uint64_t i = 0; i < n; i++)
        p[i] = (uint16_t)i;
}

Test(exec, kernel_cost_and_integer_count_params)
{
    setenv("SIM_TFLOPS", "100", 1);
    start();
    sim_kernel_desc_t d = {
        .name = "fill16",
        .fn = fill_fn,
        .nparams = 3,
        .param_size = {8, 8, 4},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_W, .count_param = 1, .scale = 2}},
        .ns_fixed = 1000,
        .flops_param = 2,
        .flops_scale = 2.5e3,
    };
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    CUdeviceptr buf;
    OK(cuMemAlloc_v2(&buf, 4096));
    uint64_t n = 2048;      // exactly the buffer: 2048 * 2 bytes
    uint32_t m = 400000000; // 1e12 flops at 100 TFLOP/s: 10 ms
    void *params[] = {&buf, &n, &m};
    sim_stats_t st0, st1;
    OK(simGetStats(&st0));
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    OK(simGetStats(&st1));
    cr_assert_eq(st1.busy_ns_compute - st0.busy_ns_compute, 10001000ull, "compute busy %llu ns",
                 (unsigned long long)(st1.busy_ns_compute - st0.busy_ns_compute));
    uint16_t h[2048];
    OK(cuMemcpyDtoH_v2(h, buf, sizeof h));
    cr_assert_eq(h[2047], 2047);
    cr_assert_geq(host_ns(), st0.host_ns + 10001000ull,
                  "the synchronous copy waited for the kernel");
}

Test(exec, kernel_footprint_past_the_buffer_faults, .exit_code = SIM_EXIT_FAULT)
{
    start();
    sim_kernel_desc_t d = {
        .name = "overrun",
        .nparams = 2,
        .param_size = {8, 8},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_R, .count_param = 1, .scale = 1}},
        .flops_param = -1,
    };
    CUfunction f;
    OK(simKernelCreate(&d, &f));
    CUdeviceptr buf;
    OK(cuMemAlloc_v2(&buf, 4096));
    uint64_t n = 64ull << 20; // far past the 2 MiB granule
    void *params[] = {&buf, &n};
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    cr_assert_fail("the launch should have faulted");
}

static CUevent other_event;

static void *query_from_other_thread(void *arg)
{
    (void)arg;
    CUcontext ctx;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return (void *)(uintptr_t)999;
    return (void *)(uintptr_t)cuEventQuery(other_event);
}

static CUresult query_in_thread(void)
{
    pthread_t t;
    void *ret;
    cr_assert_eq(pthread_create(&t, NULL, query_from_other_thread, NULL), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    return (CUresult)(uintptr_t)ret;
}

Test(exec, capture_modes_forbid_unsafe_calls)
{
    start();
    CUstream s;
    CUgraph g;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(&other_event, 0));
    OK(cuEventRecord(other_event, NULL));

    // Global mode: an event query, from this thread or another, is refused
    // and kills the capture.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cr_assert_eq(cuEventQuery(other_event), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cr_assert_eq(query_in_thread(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // Thread-local: other threads are free, this one is not.
    char h[64];
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, sizeof h)); // before: cuMemAlloc is itself an unsafe call
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    OK(query_in_thread());
    cr_assert_eq(cuMemcpyDtoH_v2(h, d, sizeof h), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // Relaxed capture, or a thread that switched itself to relaxed: allowed.
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuEventQuery(other_event));
    OK(cuStreamEndCapture(s, &g));
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    cr_assert_eq(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
    OK(cuEventSynchronize(other_event));
    OK(cuThreadExchangeStreamCaptureMode(&mode));
    OK(cuStreamEndCapture(s, &g));
    cr_assert_not_null(g);
}

// SIM_TRACE_GAPS=1: the compute engine's idle gaps of 10 us or more, each
// with the op that ended it and why it started no sooner, and the host's
// waits of 0.1 ms or more. A 1 ms kernel the host synchronises on (a wait
// of 1 ms); 95 us of the host's own calls before the next kernel (a gap
// the host made); a kernel on a second stream waiting on the GPU for a
// copy (a gap a wait made: the copy itself waited for the host, which was
// pinning its buffer).
static void gaps_child(void)
{
    setenv("SIM_TRACE_GAPS", "1", 1);
    setenv("SIM_QUIET", "1", 1);
    setenv("SIM_NODATA", "1", 1);
    setenv("SIM_D2H_GBPS", "50", 1);
    start();
    CUfunction a = make_sleep(1 * MS, "one_ms"), b = make_sleep(1000, "after_host"),
               c = make_sleep(1000, "after_copy");
    CUstream s1, s2;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    launch0(a, s1);
    OK(cuStreamSynchronize(s1));
    CUdeviceptr va[5];
    for (int i = 0; i < 5; i++) // 19 us each (drv/core.c)
        OK(cuMemAddressReserve(&va[i], 2u << 20, 0, 0, 0));
    launch0(b, s1);
    CUdeviceptr d;
    void *h;
    OK(cuMemAlloc_v2(&d, 50u << 20));
    OK(cuMemAllocHost_v2(&h, 50u << 20));
    CUevent e;
    OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(cuMemcpyDtoHAsync_v2(h, d, 50u << 20, s1));
    OK(cuEventRecord(e, s1));
    OK(cuStreamWaitEvent(s2, e, 0));
    launch0(c, s2);
    OK(cuCtxSynchronize());
}

Test(exec, sim_trace_gaps_says_where_the_gpu_idled_and_why)
{
    char out[4096];
    cr_assert_eq(run_child_capture(gaps_child, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "simgpu: the host waited 1.0"), "no 1 ms wait:\n%s", out);
    const char *host = strstr(out, "until kernel after_host on stream ");
    cr_assert(host && strstr(host, "(the host)\n"), "no gap the host made:\n%s", out);
    double ms = 0;
    const char *line = host;
    while (line > out && line[-1] != '\n')
        line--;
    cr_assert(sscanf(line, "simgpu: compute idle %lf ms", &ms) == 1 && ms > 0.09 && ms < 0.11,
              "the host's gap: %s", out);
    const char *wait = strstr(out, "until kernel after_copy on stream ");
    cr_assert(wait && strncmp(strchr(wait, '('), "(a wait)", 8) == 0, "no gap a wait made:\n%s",
              out);
}
