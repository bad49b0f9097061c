// SPDX-License-Identifier: MIT
// The nvcc host-stub ABI of the simulated runtime, called the way the code
// nvcc 13 generates calls it (crt/host_runtime.h), without needing nvcc:
// fat-binary and function registration, device-name implementations bound
// before or after, the <<<>>> configuration stack, __cudaGetKernel's handle
// and __cudaLaunchKernel[_ptsz].
#include <criterion/criterion.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "simgpu.h"

// The toolkit declares these for C++ only (crt/host_runtime.h,
// crt/device_functions.h).
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **h);
void __cudaUnregisterFatBinary(void **h);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim,
                            int *wSize);
char __cudaInitModule(void **h);
unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t shmem, struct CUstream_st *s);
cudaError_t __cudaPopCallConfiguration(dim3 *g, dim3 *b, size_t *shmem, void *s);
cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shmem,
                               cudaStream_t s);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shmem,
                                    cudaStream_t s);

#define NAME "_Z3incPhm"

static void inc_body(void **args, const sim_launch_t *l)
{
    (void)l;
    uint8_t *p = *(uint8_t **)args[0];
    uint64_t n = *(uint64_t *)args[1];
    for (uint64_t i = 0; i < n; i++)
        p[i]++;
}

static int register_impl(void)
{
    sim_kernel_desc_t d = {
        .name = NAME,
        .fn = inc_body,
        .nparams = 2,
        .param_size = {8, 8},
        .naccess = 1,
        .access = {{.param = 0, .mode = SIM_RW, .count_param = 1, .scale = 1}},
        .flops_param = -1,
    };
    return simrtRegisterDeviceKernel(NAME, &d);
}

// What nvcc generates: a host stub per kernel, registered in a constructor.
static void inc_stub(uint8_t *p, uint64_t n)
{
    (void)p, (void)n;
}
static void other_stub(void) {}

static int fake_fatbin[4]; // the wrapper's contents are never read
static void **register_module(void)
{
    void **h = __cudaRegisterFatBinary(fake_fatbin);
    cr_assert(h);
    cr_assert_eq(*h, (void *)fake_fatbin, "*handle is the wrapper, as in CUDA");
    __cudaRegisterFunction(h, (const char *)inc_stub, (char *)NAME, NAME, -1, NULL, NULL, NULL,
                           NULL, NULL);
    __cudaRegisterFunction(h, (const char *)other_stub, (char *)"_Z5otherv", "_Z5otherv", -1, NULL,
                           NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);
    return h;
}

// The expansion of inc<<<g, b, 0, s>>>(p, n) with nvcc 13's stub.
static cudaError_t launch_inc(uint8_t *p, uint64_t n, cudaStream_t s, bool ptds)
{
    if (__cudaPushCallConfiguration((dim3){1, 1, 1}, (dim3){32, 1, 1}, 0, s))
        return cudaErrorUnknown;
    void *args[2] = {&p, &n};
    cudaKernel_t k = NULL;
    (void)__cudaGetKernel(&k, (const void *)inc_stub);
    dim3 g, b;
    size_t shmem;
    cudaStream_t st;
    cudaError_t e = __cudaPopCallConfiguration(&g, &b, &shmem, &st);
    if (e != cudaSuccess) return e;
    return ptds ? __cudaLaunchKernel_ptsz(k, g, b, args, shmem, st)
                : __cudaLaunchKernel(k, g, b, args, shmem, st);
}

static void check_bytes(uint8_t *d, uint8_t want)
{
    uint8_t h[64];
    cr_assert_eq(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(h[i], want, "byte %d = %u, want %u", i, h[i], want);
}

Test(stubs, implementation_registered_after_the_module)
{
    register_module();
    cr_assert_eq(register_impl(), cudaSuccess);
    uint8_t *d;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 7, 64), cudaSuccess);
    cr_assert_eq(launch_inc(d, 64, NULL, false), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
    check_bytes(d, 8);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.launches, 1);

    // The handle is the kernel's CUfunction: the same object the runtime's
    // symbol calls find, with the registered name and parameter layout.
    cudaKernel_t k = NULL;
    cr_assert_eq(__cudaGetKernel(&k, (const void *)inc_stub), cudaSuccess);
    cudaFunction_t f = NULL;
    cr_assert_eq(cudaGetFuncBySymbol(&f, (const void *)inc_stub), cudaSuccess);
    cr_assert_eq((void *)f, (void *)k);
    const char *name = NULL;
    cr_assert_eq(cudaFuncGetName(&name, (const void *)inc_stub), cudaSuccess);
    cr_assert_str_eq(name, NAME);
    size_t off = 0, size = 0;
    cr_assert_eq(cudaFuncGetParamInfo((const void *)inc_stub, 1, &off, &size), cudaSuccess);
    cr_assert_eq(off, 8);
    cr_assert_eq(size, 8);
    // The legacy path (cudaLaunchKernel on the host stub) finds it too.
    void *args[2] = {&d, &(uint64_t){64}};
    cr_assert_eq(
        cudaLaunchKernel((const void *)inc_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
        cudaSuccess);
    check_bytes(d, 9);
    cr_assert_eq(__cudaInitModule(register_module()), 1);
}

Test(stubs, kernel_handle_accepted_where_the_runtime_takes_a_symbol)
{
    register_module();
    cr_assert_eq(register_impl(), cudaSuccess);
    cudaKernel_t k = NULL;
    cr_assert_eq(__cudaGetKernel(&k, (const void *)inc_stub), cudaSuccess);
    // cuda_runtime_api.h: cudaLaunchKernel, cudaFuncGetName and
    // cudaFuncGetParamInfo also take a cudaKernel_t cast to void *.
    const char *name = NULL;
    cr_assert_eq(cudaFuncGetName(&name, (const void *)k), cudaSuccess);
    cr_assert_str_eq(name, NAME);
    size_t off = 1, size = 0;
    cr_assert_eq(cudaFuncGetParamInfo((const void *)k, 0, &off, &size), cudaSuccess);
    cr_assert(off == 0 && size == 8);
    uint8_t *d;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 3, 64), cudaSuccess);
    void *args[2] = {&d, &(uint64_t){64}};
    cr_assert_eq(cudaLaunchKernel((const void *)k, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
                 cudaSuccess);
    check_bytes(d, 4);
    // Anything else readable is still no kernel.
    static int not_a_kernel[4];
    cr_assert_eq(cudaLaunchKernel((const void *)not_a_kernel, (dim3){1, 1, 1}, (dim3){1, 1, 1},
                                  args, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
}

Test(stubs, implementation_registered_before_the_module)
{
    cr_assert_eq(register_impl(), cudaSuccess);
    register_module();
    uint8_t *d;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 1, 64), cudaSuccess);
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(launch_inc(d, 64, s, false), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    check_bytes(d, 2);
}

Test(stubs, ptsz_launch_uses_the_per_thread_stream)
{
    cr_assert_eq(register_impl(), cudaSuccess);
    register_module();
    uint8_t *d;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    cr_assert_eq(cudaMemset(d, 0, 64), cudaSuccess);
    cr_assert_eq(launch_inc(d, 64, NULL, true), cudaSuccess);
    // Stream 0 under _ptsz is this thread's per-thread stream, a blocking
    // stream: the legacy-stream copy below is ordered after it.
    check_bytes(d, 1);
    cr_assert_eq(cudaStreamQuery(cudaStreamPerThread), cudaSuccess);
}

Test(stubs, kernel_without_implementation_is_invalid_device_function)
{
    register_module();
    cudaKernel_t k = (cudaKernel_t)(void *)1;
    cr_assert_eq(__cudaGetKernel(&k, (const void *)other_stub), cudaErrorInvalidDeviceFunction);
    cr_assert_null(k);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
    cr_assert_eq(__cudaLaunchKernel(NULL, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, NULL),
                 cudaErrorInvalidDeviceFunction);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
    // A host symbol nobody registered at all.
    cr_assert_eq(__cudaGetKernel(&k, (const void *)check_bytes), cudaErrorInvalidDeviceFunction);
    cr_assert_eq(__cudaGetKernel(NULL, (const void *)inc_stub), cudaErrorInvalidValue);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.launches, 0);
}

Test(stubs, configuration_is_a_per_thread_stack)
{
    dim3 g, b;
    size_t shmem;
    cudaStream_t s = (cudaStream_t)(void *)1;
    cr_assert_eq(__cudaPopCallConfiguration(&g, &b, &shmem, &s), cudaErrorMissingConfiguration);
    cr_assert_eq(cudaGetLastError(), cudaErrorMissingConfiguration);
    cudaStream_t s1 = (cudaStream_t)(void *)0x10, s2 = (cudaStream_t)(void *)0x20;
    cr_assert_eq(__cudaPushCallConfiguration((dim3){4, 2, 1}, (dim3){128, 1, 1}, 100, s1), 0);
    // An argument expression that launches: pushed after, popped first.
    cr_assert_eq(__cudaPushCallConfiguration((dim3){1, 1, 1}, (dim3){32, 1, 1}, 0, s2), 0);
    cr_assert_eq(__cudaPopCallConfiguration(&g, &b, &shmem, &s), cudaSuccess);
    cr_assert(g.x == 1 && b.x == 32 && shmem == 0 && s == s2);
    cr_assert_eq(__cudaPopCallConfiguration(&g, &b, &shmem, &s), cudaSuccess);
    cr_assert(g.x == 4 && g.y == 2 && g.z == 1 && b.x == 128 && shmem == 100 && s == s1);
    cr_assert_eq(__cudaPopCallConfiguration(&g, &b, &shmem, &s), cudaErrorMissingConfiguration);
}

Test(stubs, bad_configuration_is_reported_at_launch)
{
    cr_assert_eq(register_impl(), cudaSuccess);
    register_module();
    cudaKernel_t k;
    cr_assert_eq(__cudaGetKernel(&k, (const void *)inc_stub), cudaSuccess);
    uint8_t *d;
    uint64_t n = 1;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    void *args[2] = {&d, &n};
    cr_assert_eq(__cudaLaunchKernel(k, (dim3){1, 1, 1}, (dim3){2048, 1, 1}, args, 0, NULL),
                 cudaErrorInvalidConfiguration);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

Test(stubs, unregistered_module_no_longer_launches)
{
    cr_assert_eq(register_impl(), cudaSuccess);
    void **h = register_module();
    uint8_t *d;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    __cudaUnregisterFatBinary(h);
    cudaKernel_t k = NULL;
    cr_assert_eq(__cudaGetKernel(&k, (const void *)inc_stub), cudaErrorInvalidDeviceFunction);
    void *args[2] = {&d, &(uint64_t){64}};
    cr_assert_eq(
        cudaLaunchKernel((const void *)inc_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, NULL),
        cudaErrorInvalidDeviceFunction);
}

Test(stubs, launch_on_freed_buffer_faults, .exit_code = 86)
{
    cr_assert_eq(register_impl(), cudaSuccess);
    register_module();
    uint8_t *d;
    cr_assert_eq(cudaMalloc((void **)&d, 64), cudaSuccess);
    cr_assert_eq(cudaFree(d), cudaSuccess);
    launch_inc(d, 64, NULL, false);
    cr_assert_fail("the launch on a freed buffer returned");
}
