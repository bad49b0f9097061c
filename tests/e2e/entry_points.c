// SPDX-License-Identifier: MIT
// Allocates inside a layer through every path aoshim's allocation hooks
// cover: runtime calls, the driver's exported symbols, and driver entry
// points obtained through cuGetProcAddress (v1 and v2, legacy and per-thread)
// and cudaGetDriverEntryPoint(ByVersion). Prints one line per path:
//   path=<name> rc=<CUresult> tracked=<0|1> bytes_ok=<0|1>
// tracked: aoshim counted a new tracked buffer; bytes_ok: a pattern written
// through the pointer reads back. Run under LD_PRELOAD=libaoshim.so.
// Then the runtime's version, and cuCtxSynchronize from
// cudaGetDriverEntryPoint called with the ABI that version gets (CUDA 13:
// cuCtxSynchronize_v2, with a context; CUDA 12: none):
//   runtime=<version> abi=<v1|v2|other> rc=<CUresult>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "aoshim.h"

#define SIZE (4u << 20)

static cudaStream_t stream;

static uint64_t tracked(void)
{
    aoshim_stats_t st = {.size = sizeof st};
    return aoshim_try_get_stats(&st) == 0 ? st.tracked_buffers : 0;
}

static int bytes_ok(void *p)
{
    static unsigned char out[SIZE], in[SIZE];
    for (size_t i = 0; i < SIZE; i++)
        out[i] = (unsigned char)(i * 7 + 3);
    memset(in, 0, sizeof in);
    if (cudaMemcpy(p, out, SIZE, cudaMemcpyHostToDevice) != cudaSuccess) return 0;
    if (cudaMemcpy(in, p, SIZE, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    return memcmp(in, out, SIZE) == 0;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static int layer;

static void report(const char *path, CUresult rc, uint64_t before, void *p)
{
    int ok = rc == CUDA_SUCCESS ? bytes_ok(p) : 0;
    printf("path=%s rc=%d tracked=%d bytes_ok=%d\n", path, (int)rc, tracked() == before + 1, ok);
}

// Allocate (and later free) through a sync pair inside a fresh layer scope.
static void try_sync(const char *path, alloc_fn a, free_fn f)
{
    if (!a || !f) {
        printf("path=%s rc=-1 tracked=0 bytes_ok=0\n", path);
        return;
    }
    aoshim_try_layer_begin(layer);
    uint64_t before = tracked();
    CUdeviceptr p = 0;
    CUresult rc = a(&p, SIZE);
    aoshim_try_layer_end(layer++);
    report(path, rc, before, (void *)p);
    if (rc == CUDA_SUCCESS) f(p);
}

static void try_async(const char *path, alloc_async_fn a, free_async_fn f, CUstream s)
{
    if (!a || !f) {
        printf("path=%s rc=-1 tracked=0 bytes_ok=0\n", path);
        return;
    }
    aoshim_try_layer_begin(layer);
    uint64_t before = tracked();
    CUdeviceptr p = 0;
    CUresult rc = a(&p, SIZE, s);
    aoshim_try_layer_end(layer++);
    report(path, rc, before, (void *)p);
    if (rc == CUDA_SUCCESS) f(p, s);
}

static void *proc(const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    return cuGetProcAddress_v2(name, &fn, version, flags, &st) == CUDA_SUCCESS ? fn : NULL;
}

int main(void)
{
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
    aoshim_try_set_stream(stream);

    // Runtime.
    aoshim_try_layer_begin(layer);
    uint64_t before = tracked();
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, SIZE);
    aoshim_try_layer_end(layer++);
    report("cudaMalloc", e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN, before, p);
    cudaFree(p);
    aoshim_try_layer_begin(layer);
    before = tracked();
    e = cudaMallocAsync(&p, SIZE, stream);
    aoshim_try_layer_end(layer++);
    report("cudaMallocAsync", e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN, before, p);
    cudaFreeAsync(p, stream);

    // The driver's exported symbols.
    try_sync("cuMemAlloc_v2", cuMemAlloc_v2, cuMemFree_v2);
    try_async("cuMemAllocAsync", cuMemAllocAsync, cuMemFreeAsync, (CUstream)stream);

    // cuGetProcAddress_v2, legacy and per-thread, and the v1 it returns.
    try_sync("cuGetProcAddress_v2:cuMemAlloc", (alloc_fn)proc("cuMemAlloc", 12000, 0),
             (free_fn)proc("cuMemFree", 12000, 0));
    try_async("cuGetProcAddress_v2:cuMemAllocAsync",
              (alloc_async_fn)proc("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
              (free_async_fn)proc("cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
              (CUstream)stream);
    try_async(
        "cuGetProcAddress_v2:cuMemAllocAsync_ptsz",
        (alloc_async_fn)proc("cuMemAllocAsync", 12000,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
        (free_async_fn)proc("cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
        NULL);
    CUresult (*gpa1)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))proc("cuGetProcAddress", 11030, 0);
    void *a1 = NULL, *f1 = NULL;
    if (gpa1) {
        gpa1("cuMemAlloc", &a1, 11030, 0);
        gpa1("cuMemFree", &f1, 11030, 0);
    }
    try_sync("cuGetProcAddress_v1:cuMemAlloc", (alloc_fn)a1, (free_fn)f1);

    // The runtime's driver entry points.
    void *a = NULL, *f = NULL;
    enum cudaDriverEntryPointQueryResult q;
    cudaGetDriverEntryPointByVersion("cuMemAlloc", &a, 12000, cudaEnableDefault, &q);
    cudaGetDriverEntryPointByVersion("cuMemFree", &f, 12000, cudaEnableDefault, &q);
    try_sync("cudaGetDriverEntryPointByVersion:cuMemAlloc", (alloc_fn)a, (free_fn)f);
    a = f = NULL;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    cudaGetDriverEntryPoint("cuMemAllocAsync", &a, cudaEnableDefault, &q);
    cudaGetDriverEntryPoint("cuMemFreeAsync", &f, cudaEnableDefault, &q);
#pragma GCC diagnostic pop
    try_async("cudaGetDriverEntryPoint:cuMemAllocAsync", (alloc_async_fn)a, (free_async_fn)f,
              (CUstream)stream);

    // The version-less entry point answers with the runtime's own ABI. The
    // simulated driver refuses a stray context, so calling with the other
    // ABI's arguments fails whoever handed the pointer out.
    int version = 0;
    cudaRuntimeGetVersion(&version);
    void *sync = NULL;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    cudaGetDriverEntryPoint("cuCtxSynchronize", &sync, cudaEnableDefault, &q);
#pragma GCC diagnostic pop
    const char *abi = !sync                                                ? "none"
                      : sync == dlsym(RTLD_DEFAULT, "cuCtxSynchronize")    ? "v1"
                      : sync == dlsym(RTLD_DEFAULT, "cuCtxSynchronize_v2") ? "v2"
                                                                           : "other";
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    CUcontext ctx = NULL;
    if (sync && version >= 13000 && cuCtxGetCurrent(&ctx) == CUDA_SUCCESS)
        rc = ((CUresult(*)(CUcontext))sync)(ctx);
    else if (sync)
        rc = ((CUresult(*)(void))sync)();
    printf("runtime=%d abi=%s rc=%d\n", version, abi, (int)rc);

    // Outside a layer: never tracked.
    before = tracked();
    e = cudaMalloc(&p, SIZE);
    printf("path=outside_layer rc=%d tracked=%d bytes_ok=%d\n", (int)e, tracked() != before,
           e == cudaSuccess ? bytes_ok(p) : 0);
    cudaFree(p);
    cudaStreamSynchronize(stream);
    return 0;
}
