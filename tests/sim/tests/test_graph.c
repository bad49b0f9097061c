// SPDX-License-Identifier: MIT
// Graphs from stream capture: instantiate, launch (replay on the launch
// stream with fault and race checks), destroy, and their driver entry points.
#include <criterion/criterion.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "simgpu.h"

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);

#define N 4096

// --- add(p, n, v): p[i] += v --------------------------------------------------------------
static void add_body(void **args, const sim_launch_t *l)
{
    (void)l;
    uint8_t *p = *(uint8_t **)args[0];
    uint64_t n = *(uint64_t *)args[1];
    uint32_t v = *(uint32_t *)args[2];
    for (uint64_t i = 0; i < n; i++)
        p[i] = (uint8_t)(p[i] + v);
}
static void add(uint8_t *p, uint64_t n, uint32_t v)
{
    (void)p, (void)n, (void)v;
}

// --- sum(src, n, dst): reads src, writes dst[0] --------------------------------------------
static void peek_body(void **args, const sim_launch_t *l)
{
    (void)l;
    uint8_t *src = *(uint8_t **)args[0];
    uint8_t *dst = *(uint8_t **)args[2];
    dst[0] = src[0];
}
static void peek(uint8_t *src, uint64_t n, uint8_t *dst)
{
    (void)src, (void)n, (void)dst;
}

static void setup(void)
{
    sim_kernel_desc_t a = {
        .name = "add",
        .fn = add_body,
        .nparams = 3,
        .param_size = {8, 8, 4},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_RW, .count_param = 1, .scale = 1}},
        .ns_fixed = 5000,
        .flops_param = -1,
    };
    cr_assert_eq(simrtRegisterKernel((const void *)add, &a), 0);
    sim_kernel_desc_t p = {
        .name = "peek",
        .fn = peek_body,
        .nparams = 3,
        .param_size = {8, 8, 8},
        .naccess = 2,
        .access = {{.param = 0, .mode = SIM_R, .count_param = 1, .scale = 1},
                   {.param = 2, .mode = SIM_W, .count_param = -1, .scale = 1}},
        .flops_param = -1,
    };
    cr_assert_eq(simrtRegisterKernel((const void *)peek, &p), 0);
}

// Capture add(d, N, 5) and a copy of d into pinned h on s.
static cudaGraph_t capture_add_copy(uint8_t *d, uint8_t *h, cudaStream_t s)
{
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    uint32_t v = 5;
    uint64_t n = N;
    void *args[3] = {&d, &n, &v};
    cr_assert_eq(
        cudaLaunchKernel((const void *)add, (dim3){1, 1, 1}, (dim3){256, 1, 1}, args, 0, s),
        cudaSuccess);
    // Arguments are captured by value: changing them now changes nothing.
    v = 99;
    n = 1;
    cr_assert_eq(cudaMemcpyAsync(h, d, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
    cudaGraph_t g = NULL;
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    cr_assert_not_null(g);
    return g;
}

static void check_all(const uint8_t *h, uint8_t want)
{
    for (int i = 0; i < N; i++)
        cr_assert_eq(h[i], want, "byte %d = %u, want %u", i, h[i], want);
}

TestSuite(graph, .init = setup);

Test(graph, kernel_and_copy_replay_on_every_launch)
{
    uint8_t *d, *h;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 0, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s);
    cudaGraphExec_t x = NULL;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    cr_assert_not_null(x);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.launches, 0, "capture records, it does not run");

    memset(h, 0xee, N);
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    check_all(h, 5);
    memset(h, 0xee, N);
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    check_all(h, 10);

    // The executable graph does not need the graph any more.
    cr_assert_eq(cudaGraphDestroy(g), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch_ptsz(x, NULL), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
    check_all(h, 15);

    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.launches, 3);
    cr_assert_eq(st.races, 0);
    cr_assert_geq(st.busy_ns_compute, 3 * 5000);
    cr_assert_eq(cudaGraphExecDestroy(x), cudaSuccess);
}

Test(graph, launch_reads_a_freed_buffer_and_faults, .exit_code = 86)
{
    uint8_t *d, *h;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s);
    cudaGraphExec_t x;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    cr_assert_eq(cudaFree(d), cudaSuccess);
    cudaGraphLaunch(x, s);
    cr_assert_fail("a graph launch on a freed buffer returned");
}

Test(graph, destroy_and_handle_errors)
{
    uint8_t *d, *h;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s);
    cudaGraphExec_t x;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);

    cr_assert_eq(cudaGraphInstantiate(NULL, g, 0), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphInstantiateWithFlags(&x, g, 1ull << 40), cudaErrorInvalidValue);
    // Device launch and auto-free cannot be combined (cuda.h).
    cudaGraphExec_t y = NULL;
    cr_assert_eq(cudaGraphInstantiateWithFlags(&y, g,
                                               cudaGraphInstantiateFlagDeviceLaunch |
                                                   cudaGraphInstantiateFlagAutoFreeOnLaunch),
                 cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphInstantiateWithFlags(&y, g, cudaGraphInstantiateFlagUpload), cudaSuccess);
    cr_assert_eq(cudaGraphExecDestroy(y), cudaSuccess);
    cr_assert_eq(cudaGraphExecDestroy(y), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphLaunch(y, s), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);

    cr_assert_eq(cudaGraphDestroy(g), cudaSuccess);
    cr_assert_eq(cudaGraphDestroy(g), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphInstantiate(&y, g, 0), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphDestroy(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphExecDestroy(NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphLaunch(NULL, s), cudaErrorInvalidValue);
    // The executable graph outlives its graph.
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    check_all(h, 5);
    cr_assert_eq(cudaGraphExecDestroy(x), cudaSuccess);
}

Test(graph, replay_is_race_checked_against_other_streams)
{
    uint8_t *d, *h, *out;
    cudaStream_t s, t;
    cudaEvent_t done;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&out, 64), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 0, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&done), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s);
    cudaGraphExec_t x;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);

    uint64_t n = N;
    void *args[3] = {&d, &n, &out};
    // Ordered: t waits for the graph's launch.
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaEventRecord(done, s), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(t, done, 0), cudaSuccess);
    cr_assert_eq(cudaLaunchKernel((const void *)peek, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, t),
                 cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.races, 0);

    // Not ordered: the graph's kernel writes d while t's kernel reads it.
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaLaunchKernel((const void *)peek, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, t),
                 cudaSuccess);
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_geq(st.races, 1);
}

Test(graph, launches_of_one_exec_are_ordered)
{
    uint8_t *d, *h;
    cudaStream_t s, t;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 0, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s);
    cudaGraphExec_t x;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    // cuda.h: each launch is ordered behind the previous launch of the same
    // executable graph, even on another stream: no race between the two.
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(x, t), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(t), cudaSuccess);
    check_all(h, 10);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.races, 0);
}

Test(graph, launch_into_a_capturing_stream_is_refused)
{
    uint8_t *d, *h;
    cudaStream_t s, c;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&c), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s);
    cudaGraphExec_t x;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(x, c), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g2 = NULL;
    cr_assert_eq(cudaStreamEndCapture(c, &g2), cudaErrorStreamCaptureInvalidated);
    cr_assert_null(g2);
}

Test(graph, driver_entry_points)
{
    cr_assert_eq(cudaFree(NULL), cudaSuccess); // start the runtime (loads libcuda.so.1)
    void *want_flags = dlsym(RTLD_DEFAULT, "cuGraphInstantiateWithFlags");
    void *want_launch = dlsym(RTLD_DEFAULT, "cuGraphLaunch");
    void *want_ptsz = dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz");
    cr_assert(want_flags && want_launch && want_ptsz);
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    // CUDA 12+ callers asking for "cuGraphInstantiate" get the 3-argument ABI.
    cr_assert_eq(
        cudaGetDriverEntryPointByVersion("cuGraphInstantiate", &fn, 13000, cudaEnableDefault, &q),
        cudaSuccess);
    cr_assert_eq(q, cudaDriverEntryPointSuccess);
    cr_assert_eq(fn, want_flags);
    cr_assert_eq(
        cudaGetDriverEntryPointByVersion("cuGraphInstantiate", &fn, 11000, cudaEnableDefault, &q),
        cudaSuccess);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuGraphInstantiate_v2"));
    cr_assert_eq(
        cudaGetDriverEntryPointByVersion("cuGraphLaunch", &fn, 13000, cudaEnableDefault, &q),
        cudaSuccess);
    cr_assert_eq(fn, want_launch);
    cr_assert_eq(cudaGetDriverEntryPointByVersion("cuGraphLaunch", &fn, 13000,
                                                  cudaEnablePerThreadDefaultStream, &q),
                 cudaSuccess);
    cr_assert_eq(fn, want_ptsz);
    for (const char *const *p =
             (const char *const[]){"cuGraphDestroy", "cuGraphExecDestroy", "cuGraphUpload", NULL};
         *p; p++) {
        cr_assert_eq(cudaGetDriverEntryPointByVersion(*p, &fn, 13000, cudaEnableDefault, &q),
                     cudaSuccess);
        cr_assert_eq(fn, dlsym(RTLD_DEFAULT, *p), "%s", *p);
        cr_assert_not_null(fn, "%s", *p);
    }
}

Test(graph, fork_join_and_external_wait_replay)
{
    uint8_t *d, *h;
    cudaStream_t s, t, other;
    cudaEvent_t fork, join, ext;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 0, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&fork), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&join), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&ext), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(cudaEventRecord(ext, other), cudaSuccess);

    // s: wait(ext, external) -> fork -> [t: add(d, 7)] -> join -> copy d to h.
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(s, ext, cudaEventWaitExternal), cudaSuccess);
    cr_assert_eq(cudaEventRecord(fork, s), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(t, fork, 0), cudaSuccess);
    uint32_t v = 7;
    uint64_t n = N;
    void *args[3] = {&d, &n, &v};
    cr_assert_eq(cudaLaunchKernel((const void *)add, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, t),
                 cudaSuccess);
    cr_assert_eq(cudaEventRecord(join, t), cudaSuccess);
    cr_assert_eq(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
    cr_assert_eq(cudaMemcpyAsync(h, d, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
    cudaGraph_t g = NULL;
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaGraphExec_t x;
    cr_assert_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);

    // other writes d, then records ext: the graph's external wait joins that
    // record at launch, so its kernel is ordered after the write.
    v = 1;
    void *oargs[3] = {&d, &n, &v};
    cr_assert_eq(
        cudaLaunchKernel((const void *)add, (dim3){1, 1, 1}, (dim3){1, 1, 1}, oargs, 0, other),
        cudaSuccess);
    cr_assert_eq(cudaEventRecord(ext, other), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    check_all(h, 8);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.races, 0);

    // Without the re-record, other's next write is not ordered before the
    // graph's read-modify-write: a race.
    cr_assert_eq(
        cudaLaunchKernel((const void *)add, (dim3){1, 1, 1}, (dim3){1, 1, 1}, oargs, 0, other),
        cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(x, s), cudaSuccess);
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_geq(st.races, 1);

    // The externally waited event is gone: the launch fails and does nothing.
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(simrtGetStats(&st), 0);
    uint64_t before = st.launches;
    cr_assert_eq(cudaEventDestroy(ext), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(x, s), cudaErrorInvalidValue);
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.launches, before);
}

// A driver entry point of the loaded libcuda.so.1 (this test links only the
// runtime), by cuda.h's name of it (cuStreamGetCaptureInfo: its _v3).
#define DRV_STR(x)  #x
#define DRV_NAME(x) DRV_STR(x)
#define DRV(name)   ((__typeof__(&name))drv_sym(DRV_NAME(name)))
static void *drv_sym(const char *name)
{
    cr_assert_eq(cudaFree(NULL), cudaSuccess); // the runtime loads the driver
    void *f = dlsym(RTLD_DEFAULT, name);
    cr_assert_not_null(f, "%s", name);
    return f;
}

// cuStreamGetCaptureInfo (cuda.h's name for _v3): the status always; the id
// (unique, never reused) and graph only while the capture is active; the
// graph it names is the one cuStreamEndCapture returns.
Test(graph, capture_info_names_the_capture_and_its_graph)
{
    uint8_t *d, *h;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    cuuint64_t id = 0, id2 = 0;
    CUgraph g = NULL, ended = NULL;
    cr_assert_eq(DRV(cuStreamGetCaptureInfo)((CUstream)s, &cs, &id, &g, NULL, NULL, NULL),
                 CUDA_SUCCESS);
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    cr_assert_eq(DRV(cuStreamGetCaptureInfo)((CUstream)s, NULL, &id, NULL, NULL, NULL, NULL),
                 CUDA_ERROR_INVALID_VALUE, "the status is required");
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
        const CUgraphNode *deps = (const CUgraphNode *)1;
        size_t ndeps = 7;
        cr_assert_eq(
            DRV(cuStreamGetCaptureInfo)((CUstream)s, &cs, k ? &id2 : &id, &g, &deps, NULL, &ndeps),
            CUDA_SUCCESS);
        cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        cr_assert_eq(ndeps, 0);
        const CUgraphEdgeData *edges;
        cr_assert_eq(DRV(cuStreamGetCaptureInfo)((CUstream)s, &cs, NULL, NULL, NULL, &edges, NULL),
                     CUDA_ERROR_INVALID_VALUE, "edge data without the dependencies");
        cr_assert_eq(cudaMemcpyAsync(h, d, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
        cr_assert_eq(DRV(cuStreamEndCapture)((CUstream)s, &ended), CUDA_SUCCESS);
        cr_assert_eq(ended, g);
        cr_assert_eq(DRV(cuGraphDestroy)(ended), CUDA_SUCCESS);
    }
    cr_assert_neq(id, 0);
    cr_assert_neq(id2, 0);
    cr_assert_neq(id, id2, "a capture id is unique in the process");
}

// cuGraphInstantiateWithParams (legacy and per-thread, runtime too): the
// result code, the upload stream checked; a clone replays like its original
// and outlives it.
Test(graph, instantiate_with_params_and_clone)
{
    uint8_t *d, *h;
    cudaStream_t s;
    cr_assert_eq(cudaMalloc((void **)&d, N), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 0, N), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h, N), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cudaGraph_t g = capture_add_copy(d, h, s), c = NULL;
    cr_assert_eq(cudaGraphClone(&c, g), cudaSuccess);
    cr_assert_not_null(c);
    cr_assert_neq(c, g);
    cr_assert_eq(cudaGraphDestroy(g), cudaSuccess);
    CUgraphExec x1 = NULL, x2 = NULL;
    CUDA_GRAPH_INSTANTIATE_PARAMS p = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD,
                                       .hUploadStream = (CUstream)s,
                                       .result_out = CUDA_GRAPH_INSTANTIATE_ERROR};
    cr_assert_eq(DRV(cuGraphInstantiateWithParams)(&x1, (CUgraph)c, &p), CUDA_SUCCESS);
    cr_assert_eq(p.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
    cr_assert_null(p.hErrNode_out);
    p.flags = 1ull << 40;
    cr_assert_eq(DRV(cuGraphInstantiateWithParams)(&x2, (CUgraph)c, &p), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(p.result_out, CUDA_GRAPH_INSTANTIATE_ERROR);
    cr_assert_eq(DRV(cuGraphInstantiateWithParams)(&x2, (CUgraph)g, &p), CUDA_ERROR_INVALID_VALUE,
                 "a destroyed graph");
    cudaGraphInstantiateParams rp = {.flags = 0};
    cr_assert_eq(cudaGraphInstantiateWithParams((cudaGraphExec_t *)&x2, c, &rp), cudaSuccess);
    cr_assert_eq(rp.result_out, cudaGraphInstantiateSuccess);
    cr_assert_eq(cudaGraphClone(&g, NULL), cudaErrorInvalidValue);
    cr_assert_eq(cudaGraphDestroy(c), cudaSuccess);
    memset(h, 0xee, N);
    cr_assert_eq(cudaGraphLaunch((cudaGraphExec_t)x1, s), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch((cudaGraphExec_t)x2, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    check_all(h, 10);
    cr_assert_eq(DRV(cuGraphExecDestroy)(x1), CUDA_SUCCESS);
    cr_assert_eq(DRV(cuGraphExecDestroy)(x2), CUDA_SUCCESS);
}
