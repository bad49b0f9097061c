// SPDX-License-Identifier: MIT
// A program built by nvcc (CUDA 13, -cudart shared) against the simulated
// runtime: its <<<>>> launches go through the generated host stubs
// (__cudaRegisterFatBinary, __cudaRegisterFunction, __cudaPushCallConfiguration,
// __cudaGetKernel, __cudaPopCallConfiguration, __cudaLaunchKernel[_ptsz]).
// The fat binary's device code cannot run on the simulator, so main registers
// a host implementation under each kernel's device (mangled) name first.
//
// Usage: nvcc_prog        run, check the bytes, print one result line
//        nvcc_prog fault  launch on a freed buffer (the simulator exits 86)
// Prints: "nvcc_prog: ok sum=<S> launches=<L> missing=<E> libcudart=<path>"
// or "nvcc_prog: FAIL <why>" and exits 1.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "simgpu.h" // simrtRegisterDeviceKernel, extern "C"

// --- device code (compiled by nvcc, never run by the simulator) -------------------------
__global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void axpy3(const float *x, const float *y, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + 2.0f * y[i];
}

// Has no host implementation: its launch must fail, not run.
__global__ void missing(float *x)
{
    x[0] = 1.0f;
}

// --- host implementations -------------------------------------------------------------------
static void scale_host(void **args, const sim_launch_t *)
{
    float *x = *(float **)args[0];
    float a = *(float *)args[1];
    int n = *(int *)args[2];
    for (int i = 0; i < n; i++)
        x[i] *= a;
}

static void axpy3_host(void **args, const sim_launch_t *)
{
    const float *x = *(const float **)args[0];
    const float *y = *(const float **)args[1];
    float *out = *(float **)args[2];
    int n = *(int *)args[3];
    for (int i = 0; i < n; i++)
        out[i] = x[i] + 2.0f * y[i];
}

static int register_kernels(void)
{
    sim_kernel_desc_t s;
    memset(&s, 0, sizeof s);
    s.name = "_Z5scalePffi";
    s.fn = scale_host;
    s.nparams = 3;
    s.param_size[0] = 8, s.param_size[1] = 4, s.param_size[2] = 4;
    s.naccess = 1;
    s.access[0] = sim_access_t{0, SIM_RW, 2, sizeof(float)};
    s.flops_param = -1;
    s.ns_fixed = 2000;

    sim_kernel_desc_t a;
    memset(&a, 0, sizeof a);
    a.name = "_Z5axpy3PKfS0_Pfi";
    a.fn = axpy3_host;
    a.nparams = 4;
    a.param_size[0] = a.param_size[1] = a.param_size[2] = 8, a.param_size[3] = 4;
    a.naccess = 3;
    a.access[0] = sim_access_t{0, SIM_R, 3, sizeof(float)};
    a.access[1] = sim_access_t{1, SIM_R, 3, sizeof(float)};
    a.access[2] = sim_access_t{2, SIM_W, 3, sizeof(float)};
    a.flops_param = -1;
    a.ns_fixed = 3000;

    int e = simrtRegisterDeviceKernel(s.name, &s);
    if (e == 0) e = simrtRegisterDeviceKernel(a.name, &a);
    return e;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        printf("nvcc_prog: FAIL ");                                                                \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        return 1;                                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    bool fault = argc > 1 && strcmp(argv[1], "fault") == 0;
    if (register_kernels() != 0) FAIL("simrtRegisterDeviceKernel");

    const int n = 1000;
    static float hx[1000], hy[1000], hout[1000];
    for (int i = 0; i < n; i++) {
        hx[i] = (float)(i % 17);
        hy[i] = (float)(i % 5);
    }
    float *x, *y, *out;
    if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&y, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&out, n * sizeof(float)) != cudaSuccess)
        FAIL("cudaMalloc");
    cudaMemcpy(x, hx, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(y, hy, n * sizeof(float), cudaMemcpyHostToDevice);

    if (fault) {
        // The safety net's reason to exist: a kernel given a buffer that is
        // gone. The simulator stops the program here with exit status 86.
        cudaFree(x);
        scale<<<(n + 255) / 256, 256>>>(x, 3.0f, n);
        cudaDeviceSynchronize();
        FAIL("launch on a freed buffer returned");
    }

    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) FAIL("cudaStreamCreate");
    scale<<<(n + 255) / 256, 256>>>(x, 3.0f, n);
    if (cudaGetLastError() != cudaSuccess) FAIL("scale launch");
    // s must see scale's writes. The legacy default stream would order a
    // blocking stream after it implicitly, a per-thread default stream
    // (--default-stream per-thread) does not: the event orders both builds
    // (without it the simulator reports the race in the per-thread build).
    cudaEvent_t scaled;
    if (cudaEventCreate(&scaled) != cudaSuccess) FAIL("cudaEventCreate");
    cudaEventRecord(scaled, 0);
    cudaStreamWaitEvent(s, scaled, 0);
    axpy3<<<(n + 255) / 256, 256, 0, s>>>(x, y, out, n);
    if (cudaGetLastError() != cudaSuccess) FAIL("axpy3 launch");
    missing<<<1, 1>>>(out);
    cudaError_t missing_err = cudaGetLastError();
    if (cudaStreamSynchronize(s) != cudaSuccess) FAIL("sync");
    if (cudaMemcpy(hout, out, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
        FAIL("cudaMemcpy D2H");

    double sum = 0;
    for (int i = 0; i < n; i++) {
        float want = 3.0f * (float)(i % 17) + 2.0f * (float)(i % 5);
        if (hout[i] != want) FAIL("out[%d] = %g, want %g", i, hout[i], want);
        sum += hout[i];
    }
    sim_stats_t st;
    if (simrtGetStats(&st) != 0) FAIL("simrtGetStats");
    Dl_info info;
    const char *lib =
        dladdr((void *)&cudaDeviceSynchronize, &info) && info.dli_fname ? info.dli_fname : "?";
    printf("nvcc_prog: ok sum=%.0f launches=%llu missing=%d libcudart=%s\n", sum,
           (unsigned long long)st.launches, (int)missing_err, lib);
    cudaEventDestroy(scaled);
    cudaStreamDestroy(s);
    cudaFree(x);
    cudaFree(y);
    cudaFree(out);
    return 0;
}
