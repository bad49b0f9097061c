// SPDX-License-Identifier: MIT
// A CUDA graph captured over a tracked buffer: while the graph lives, the
// buffer is never offloaded (a replay cannot wait for a reload aoshim would
// issue outside it), and every replay reads the right bytes. Prints
//   graph ok=<0|1> offloaded=<bytes> kept=<buffers kept resident>
// Run with AOSHIM_OFFLOAD_LAYERS=1 (layer 0 would be offloaded otherwise).
// With GRAPH_PIN_NO_CAPTURE=1 the kernel is launched directly instead of
// captured: then layer 0 is offloaded, which shows what the graph prevents.
//
// With --lifetimes: how long the pin lasts. Each step captures a kernel over
// layer 0's buffer, instantiates and replays it, then destroys some of the
// graph, its clone and the executable graph before layer 0's release point
// (the end of layer 1) and the rest after. The pin must last exactly while
// something that can replay the work is alive. One line per step:
//   step=<name> ok=<0|1> offloaded=<bytes this step> kept=<kept this step>
// then "lifetimes ok=<0|1>". The steps use the runtime, the driver, and the
// driver through cuGetProcAddress (the CUDA 11.0 cuGraphInstantiate ABI).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define N (1u << 20)
#define PROG "graph_pin"
#include "plus_one.h"

static int classic(void)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float)), *in, *out, *t;
    for (unsigned i = 0; i < N; i++) host[i] = (float)(i % 977);
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    int ok = 1;
    for (int step = 0; step < 2; step++) {
        aoshim_try_layer_begin(0);
        CHECK(cudaMallocAsync((void **)&in, N * sizeof(float), s));
        CHECK(cudaMemcpyAsync(in, host, N * sizeof(float), cudaMemcpyHostToDevice, s));
        // Capture a kernel over layer 0's buffer.
        cudaGraph_t g;
        cudaGraphExec_t x;
        unsigned n = N;
        void *args[] = {&in, &out, &n};
        const dim3 one = {1, 1, 1};
        bool capture = !getenv("GRAPH_PIN_NO_CAPTURE");
        if (capture) {
            CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
            CHECK(cudaStreamEndCapture(s, &g));
            CHECK(cudaGraphInstantiate(&x, g, 0));
        }
        aoshim_try_layer_end(0);
        for (int l = 1; l <= 2; l++) { // layer 0 would be offloaded by now
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync((void **)&t, N * sizeof(float), s));
            aoshim_try_layer_end(l);
            CHECK(cudaFreeAsync(t, s));
        }
        CHECK(cudaDeviceSynchronize());
        aoshim_try_set_microbatch(0); // a boundary: aoshim acts on what completed
        for (int replay = 0; replay < 2; replay++) {
            if (capture) CHECK(cudaGraphLaunch(x, s));
            else CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaMemcpy(back, out, N * sizeof(float), cudaMemcpyDeviceToHost));
            for (unsigned i = 0; i < N; i++)
                if (back[i] != host[i] + 1.0f) ok = 0;
        }
        if (capture) {
            CHECK(cudaGraphExecDestroy(x));
            CHECK(cudaGraphDestroy(g));
        }
        CHECK(cudaFreeAsync(in, s));
        aoshim_try_step_end();
    }
    aoshim_stats_t st = {.size = sizeof st};
    aoshim_try_get_stats(&st);
    printf("graph ok=%d offloaded=%llu kept=%llu\n", ok, (unsigned long long)st.offloaded_bytes,
           (unsigned long long)st.kept_resident);
    CHECK(cudaStreamSynchronize(s));
    return 0;
}

// --- --lifetimes ----------------------------------------------------------------------------
enum api { RT, DRV, PROC };
// What a step destroys before layer 0's release point: G graph, X exec, C
// clone, P the previous step's graph and exec (left alive by a step with
// leave). The rest goes after.
typedef struct step_s {
    const char *name;
    enum api api;
    const char *before;
    bool clone, exec_of_clone, leave;
} step_t;

static const step_t steps[] = {
    {"both-alive", RT, "", .clone = false},
    {"exec-gone", DRV, "X", .clone = false},
    {"both-gone", RT, "XG", .clone = false},
    {"graph-gone", DRV, "G", .clone = false},
    {"graph-then-exec", RT, "GX", .clone = false},
    {"clone-alive", RT, "XG", .clone = true},
    {"clone-gone", DRV, "GXC", .clone = true, .exec_of_clone = true},
    {"left-alive", PROC, "", .leave = true},
    {"stale-pins", PROC, "P", .clone = false}, // the previous graph's chunk was recycled for this one
};

static struct {
    CUresult (*end)(CUstream, CUgraph *);
    CUresult (*inst_v2)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    CUresult (*launch)(CUgraphExec, CUstream);
    CUresult (*exec_destroy)(CUgraphExec);
    CUresult (*destroy)(CUgraph);
} proc;

static void *lookup(const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    // A version above the driver's is refused (cuda.h): under a 12.x driver
    // ask at the driver's own.
    int driver = 0;
    CHECK(cuDriverGetVersion(&driver));
    if (version > driver) version = driver;
    CHECK(cuGetProcAddress_v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    return fn;
}

typedef struct graphs_s {
    CUgraph g, c;
    CUgraphExec x;
    enum api api;
} graphs_t;

static void destroy(graphs_t *h, char what)
{
    if (what == 'X' && h->x) {
        CHECK(h->api == RT    ? (int)cudaGraphExecDestroy(h->x)
              : h->api == DRV ? (int)cuGraphExecDestroy(h->x)
                              : (int)proc.exec_destroy(h->x));
        h->x = NULL;
    }
    CUgraph *g = what == 'G' ? &h->g : what == 'C' ? &h->c : NULL;
    if (g && *g) {
        CHECK(h->api == RT    ? (int)cudaGraphDestroy(*g)
              : h->api == DRV ? (int)cuGraphDestroy(*g)
                              : (int)proc.destroy(*g));
        *g = NULL;
    }
}

static bool same(const float *back, const float *host)
{
    for (unsigned i = 0; i < N; i++)
        if (back[i] != host[i] + 1.0f) return false;
    return true;
}

static int lifetimes(void)
{
    proc.end = (__typeof__(proc.end))lookup("cuStreamEndCapture", 13000);
    proc.inst_v2 = (__typeof__(proc.inst_v2))lookup("cuGraphInstantiate", 11000);
    proc.launch = (__typeof__(proc.launch))lookup("cuGraphLaunch", 13000);
    proc.exec_destroy = (__typeof__(proc.exec_destroy))lookup("cuGraphExecDestroy", 13000);
    proc.destroy = (__typeof__(proc.destroy))lookup("cuGraphDestroy", 13000);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float)), *in, *out, *t;
    for (unsigned i = 0; i < N; i++)
        host[i] = (float)(i % 977);
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    const dim3 one = {1, 1, 1};
    unsigned n = N;
    int all_ok = 1;
    graphs_t prev = {0};
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
        const step_t *st = &steps[k];
        aoshim_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
        aoshim_try_get_stats(&s0);
        aoshim_try_layer_begin(0);
        CHECK(cudaMallocAsync((void **)&in, N * sizeof(float), s));
        CHECK(cudaMemcpyAsync(in, host, N * sizeof(float), cudaMemcpyHostToDevice, s));
        void *args[] = {&in, &out, &n};
        graphs_t h = {.api = st->api};
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
        if (st->api == RT) {
            CHECK(cudaStreamEndCapture(s, (cudaGraph_t *)&h.g));
        } else if (st->api == DRV) {
            CHECK(cuStreamEndCapture((CUstream)s, &h.g));
        } else {
            CHECK(proc.end((CUstream)s, &h.g));
        }
        if (st->clone)
            CHECK(st->api == RT ? (int)cudaGraphClone((cudaGraph_t *)&h.c, h.g)
                                : (int)cuGraphClone(&h.c, h.g));
        CUgraph src = st->exec_of_clone ? h.c : h.g;
        // Every instantiation entry point, one step each (and the first twice).
        switch (k) {
        case 0:
        case 5:
            CHECK(cudaGraphInstantiate((cudaGraphExec_t *)&h.x, src, 0));
            break;
        case 1:
            CHECK(cuGraphInstantiate(&h.x, src, 0));
            break; // cuGraphInstantiateWithFlags
        case 2:
            CHECK(cudaGraphInstantiateWithFlags((cudaGraphExec_t *)&h.x, src, 0));
            break;
        case 3: {
            CUDA_GRAPH_INSTANTIATE_PARAMS p = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD,
                                               .hUploadStream = (CUstream)s};
            CHECK(cuGraphInstantiateWithParams(&h.x, src, &p));
            break;
        }
        case 4: {
            cudaGraphInstantiateParams p = {0};
            CHECK(cudaGraphInstantiateWithParams((cudaGraphExec_t *)&h.x, src, &p));
            break;
        }
        case 6:
            CHECK(cuGraphInstantiateWithFlags(&h.x, src, 0));
            break;
        default:
            CHECK(proc.inst_v2(&h.x, src, NULL, NULL, 0));
            break;
        }
        // Replay before the release point: the graph reads layer 0's buffer.
        CHECK(st->api == RT    ? (int)cudaGraphLaunch(h.x, s)
              : st->api == DRV ? (int)cuGraphLaunch(h.x, (CUstream)s)
                               : (int)proc.launch(h.x, (CUstream)s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(back, out, N * sizeof(float), cudaMemcpyDeviceToHost));
        int ok = same(back, host);
        CHECK(cudaMemset(out, 0, N * sizeof(float)));
        for (const char *b = st->before; *b; b++)
            if (*b == 'P') {
                destroy(&prev, 'X');
                destroy(&prev, 'G');
            } else {
                destroy(&h, *b);
            }
        aoshim_try_layer_end(0);
        for (int l = 1; l <= 2; l++) { // layer 0's release point: the end of layer 1
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync((void **)&t, N * sizeof(float), s));
            aoshim_try_layer_end(l);
            CHECK(cudaFreeAsync(t, s));
        }
        CHECK(cudaDeviceSynchronize());
        aoshim_try_set_microbatch(0); // a boundary: aoshim acts on what completed
        aoshim_try_get_stats(&s1);
        // The bytes: replayed if the executable graph is still there (the
        // simulator faults, exit 86, if the buffer is not on the device),
        // otherwise read by a kernel (which reloads it late if offloaded).
        if (h.x)
            CHECK(st->api == RT    ? (int)cudaGraphLaunch(h.x, s)
                  : st->api == DRV ? (int)cuGraphLaunch(h.x, (CUstream)s)
                                   : (int)proc.launch(h.x, (CUstream)s));
        else
            CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(back, out, N * sizeof(float), cudaMemcpyDeviceToHost));
        ok &= same(back, host);
        if (st->leave) {
            prev = h;
        } else {
            destroy(&h, 'X');
            destroy(&h, 'G');
            destroy(&h, 'C');
        }
        CHECK(cudaFreeAsync(in, s));
        CHECK(cudaStreamSynchronize(s)); // the chunk is released, and recycled next step
        aoshim_try_step_end();
        printf("step=%s ok=%d offloaded=%llu kept=%llu\n", st->name, ok,
               (unsigned long long)(s1.offloaded_bytes - s0.offloaded_bytes),
               (unsigned long long)(s1.kept_resident - s0.kept_resident));
        all_ok &= ok;
    }
    printf("lifetimes ok=%d\n", all_ok);
    return 0;
}

int main(int argc, char **argv)
{
    plus_one_register(2000);
    if (argc > 1 && strcmp(argv[1], "--lifetimes") == 0) return lifetimes();
    return classic();
}
