// SPDX-License-Identifier: MIT
// The safety net, path by path: for each way a program can launch a kernel
// or copy memory, a buffer of layer 0 is offloaded (layer 0 offloaded, then
// layers 1 and 2 run and the GPU catches up), then read through that path
// outside the schedule. Prints one line per path:
//   path=<name> ok=<0|1> late=<late reloads counted for it>
// ok: the bytes read back are the bytes written. Under LD_PRELOAD with
// AOSHIM_OFFLOAD_LAYERS=0 each path must be ok with late=1; without the
// safety net the read faults (the simulator stops the program, exit 86).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "aoshim.h"
#include "simgpu.h"

#define N (1u << 20) // floats: 4 MiB, above AOSHIM_MIN_BYTES
#define PROG "launch_paths"
#include "plus_one.h"

static cudaStream_t stream;
static float *host;
static float *out; // resident (allocated outside layers)

static uint64_t late(void)
{
    aoshim_stats_t st = {.size = sizeof st};
    return aoshim_try_get_stats(&st) == 0 ? st.late_reloads : 0;
}

// One step: layer 0 allocates and fills `in`, layers 1 and 2 run, the GPU
// catches up, a control call lets aoshim release layer 0. Returns `in`.
static float *offloaded_buffer(int step)
{
    float *in, *t1, *t2;
    for (unsigned i = 0; i < N; i++) host[i] = (float)(i % 1000) + (float)step;
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync((void **)&in, N * sizeof(float), stream));
    CHECK(cudaMemcpyAsync(in, host, N * sizeof(float), cudaMemcpyHostToDevice, stream));
    aoshim_try_layer_end(0);
    aoshim_try_layer_begin(1);
    CHECK(cudaMallocAsync((void **)&t1, N * sizeof(float), stream));
    aoshim_try_layer_end(1);
    aoshim_try_layer_begin(2);
    CHECK(cudaMallocAsync((void **)&t2, N * sizeof(float), stream));
    aoshim_try_layer_end(2);
    CHECK(cudaDeviceSynchronize());
    aoshim_try_set_microbatch(0); // a control call: aoshim polls its releases
    CHECK(cudaFreeAsync(t1, stream));
    CHECK(cudaFreeAsync(t2, stream));
    return in;
}

static int verify(int step, bool plus)
{
    static float back[N];
    CHECK(cudaMemcpy(back, out, N * sizeof(float), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < N; i++)
        if (back[i] != (float)(i % 1000) + (float)step + (plus ? 1.0f : 0.0f)) return 0;
    return 1;
}

// CUDA 13's nvcc host stubs (crt/host_runtime.h declares these for C++ only).
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t shm,
                               cudaStream_t s);

// tests/e2e/static_rt.c: a library that finds the driver with dlopen + dlsym.
int static_rt_launch(int via_gpa, CUfunction f, void **args, CUstream s);

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

int main(void)
{
    plus_one_register(2000);
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    aoshim_try_set_stream(stream);
    host = malloc(N * sizeof(float));
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    CUfunction f;
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&f, (const void *)plus_one));
    const dim3 one = {1, 1, 1};
    unsigned n = N;

    static const char *const paths[] = {
        "cudaLaunchKernel",    "cudaLaunchKernelExC",       "cuLaunchKernel",
        "cuLaunchKernel:extra", "cuLaunchKernelEx",         "cuGetProcAddress:cuLaunchKernel",
        "cudaGetDriverEntryPoint:cuLaunchKernel",           "cudaMemcpyAsync",
        "cuMemcpyDtoH",        "cudaMemcpy:DeviceToDevice",
        "static-runtime:dlsym:cuLaunchKernel",             "static-runtime:cuGetProcAddress:cuLaunchKernel",
        "__cudaLaunchKernel",  "ncclAllReduce",
    };
    for (int step = 0; step < (int)(sizeof paths / sizeof *paths); step++) {
        float *in = offloaded_buffer(step);
        uint64_t before = late();
        void *args[] = {&in, &out, &n};
        const char *p = paths[step];
        bool plus = true;
        if (!strcmp(p, "cudaLaunchKernel")) {
            CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, stream));
        } else if (!strcmp(p, "cudaLaunchKernelExC")) {
            cudaLaunchConfig_t c = {.gridDim = one, .blockDim = one, .stream = stream};
            CHECK(cudaLaunchKernelExC(&c, (const void *)plus_one, args));
        } else if (!strcmp(p, "cuLaunchKernel")) {
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, args, NULL));
        } else if (!strcmp(p, "cuLaunchKernel:extra")) {
            struct {
                const float *in;
                float *out;
                unsigned n;
            } packed = {in, out, n};
            size_t size = 20; // the kernel's packed parameter size: 8 + 8 + 4
            void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                             &size, CU_LAUNCH_PARAM_END};
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, NULL, extra));
        } else if (!strcmp(p, "cuLaunchKernelEx")) {
            CUlaunchConfig c = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                                .blockDimY = 1, .blockDimZ = 1, .hStream = (CUstream)stream};
            CHECK(cuLaunchKernelEx(&c, f, args, NULL));
        } else if (!strcmp(p, "cuGetProcAddress:cuLaunchKernel")) {
            void *fn = NULL;
            CUdriverProcAddressQueryResult q;
            CHECK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, 0, &q));
            CHECK(((launch_fn)fn)(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, args, NULL));
        } else if (!strcmp(p, "cudaGetDriverEntryPoint:cuLaunchKernel")) {
            void *fn = NULL;
            enum cudaDriverEntryPointQueryResult q;
            CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, cudaEnableDefault, &q));
            CHECK(((launch_fn)fn)(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, args, NULL));
        } else if (!strcmp(p, "ncclAllReduce")) {
            static ncclComm_t comm;
            if (!comm) {
                int dev = 0;
                CHECK(ncclCommInitAll(&comm, 1, &dev));
            }
            CHECK(ncclAllReduce(in, out, N, ncclFloat32, ncclSum, comm, stream));
            plus = false;
        } else if (!strcmp(p, "__cudaLaunchKernel")) {
            cudaKernel_t k = NULL;
            CHECK(__cudaGetKernel(&k, (const void *)plus_one));
            CHECK(__cudaLaunchKernel(k, one, one, args, 0, stream));
        } else if (!strncmp(p, "static-runtime:", 15)) {
            CHECK(static_rt_launch(strstr(p, "cuGetProcAddress") != NULL, f, args, (CUstream)stream));
        } else if (!strcmp(p, "cudaMemcpyAsync")) {
            CHECK(cudaMemcpyAsync(out, in, N * sizeof(float), cudaMemcpyDeviceToDevice, stream));
            plus = false;
        } else if (!strcmp(p, "cuMemcpyDtoH")) {
            static float back[N];
            CHECK(cuMemcpyDtoH_v2(back, (CUdeviceptr)in, N * sizeof(float)));
            CHECK(cudaMemcpy(out, back, N * sizeof(float), cudaMemcpyHostToDevice));
            plus = false;
        } else if (!strcmp(p, "cudaMemcpy:DeviceToDevice")) {
            CHECK(cudaMemcpy(out, in, N * sizeof(float), cudaMemcpyDeviceToDevice));
            plus = false;
        }
        CHECK(cudaStreamSynchronize(stream));
        printf("path=%s ok=%d late=%llu\n", p, verify(step, plus),
               (unsigned long long)(late() - before));
        fflush(stdout);
        CHECK(cudaFreeAsync(in, stream));
        aoshim_try_step_end();
    }
    CHECK(cudaStreamSynchronize(stream));
    return 0;
}
