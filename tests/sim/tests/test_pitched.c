// SPDX-License-Identifier: MIT
// Pitched and peer copies and sets of the simulated driver and runtime
// (drv/pitched.c, rt/pitched.c): the bytes of every row, the gaps between
// rows left alone, the error codes cuda.h documents, a fault on unmapped
// memory, capture and replay, and the per-thread twins.
#include <criterion/criterion.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "sim_test.h"
#include "simgpu.h"

// Per-thread twins, declared by the headers only in per-thread builds.
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p);
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h,
                                 CUstream s);
cudaError_t cudaMemcpy2D_ptds(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h,
                              enum cudaMemcpyKind k);

// driver_functions.h's constructors are C++-only inline helpers.
static struct cudaPitchedPtr pitched(void *p, size_t pitch, size_t xs, size_t ys)
{
    return (struct cudaPitchedPtr){.ptr = p, .pitch = pitch, .xsize = xs, .ysize = ys};
}
static struct cudaExtent extent(size_t w, size_t h, size_t d)
{
    return (struct cudaExtent){.width = w, .height = h, .depth = d};
}

#define ROK(x) cr_assert_eq((x), cudaSuccess, "%s", #x)

static CUcontext ctx;

static void start_pitched(void)
{
    ctx = start(); // the runtime's first call finds this context current and keeps it
}

TestSuite(pitched, .init = start_pitched);

// A W x H matrix of bytes in a pitched device buffer, filled from `src` by
// cuMemcpy2D; every row read back by the same call, the gaps never written.
Test(pitched, copy2d_moves_rows_and_leaves_the_gaps)
{
    enum { W = 100, H = 7, P = 128 };
    unsigned char src[W * H], back[P * H];
    for (int i = 0; i < W * H; i++)
        src[i] = (unsigned char)(i * 13 + 1);
    CUdeviceptr d;
    OK(cuMemAlloc(&d, P * H));
    OK(cuMemsetD8(d, 0xEE, P * H));
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                       .srcHost = src,
                       .srcPitch = W,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = d,
                       .dstPitch = P,
                       .WidthInBytes = W,
                       .Height = H};
    OK(cuMemcpy2D(&c));
    OK(cuMemcpyDtoH(back, d, P * H));
    for (int y = 0; y < H; y++) {
        cr_assert(memcmp(back + y * P, src + y * W, W) == 0, "row %d", y);
        for (int x = W; x < P; x++)
            cr_assert_eq(back[y * P + x], 0xEE, "gap byte %d of row %d written", x, y);
    }
    // Back out through the unified type and an offset (x 4, y 2), via the
    // per-thread twin.
    unsigned char out[10 * 3];
    CUDA_MEMCPY2D b = {.srcXInBytes = 4,
                       .srcY = 2,
                       .srcMemoryType = CU_MEMORYTYPE_UNIFIED,
                       .srcDevice = d,
                       .srcPitch = P,
                       .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
                       .dstDevice = (CUdeviceptr)(uintptr_t)out,
                       .dstPitch = 10,
                       .WidthInBytes = 10,
                       .Height = 3};
    OK(cuMemcpy2D_v2_ptds(&b));
    for (int y = 0; y < 3; y++)
        cr_assert(memcmp(out + y * 10, src + (y + 2) * W + 4, 10) == 0, "row %d", y);
    OK(cuMemFree(d));
}

Test(pitched, copy2d_errors)
{
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    unsigned char h[4096];
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                       .srcHost = h,
                       .srcPitch = 64,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = d,
                       .dstPitch = 64,
                       .WidthInBytes = 64,
                       .Height = 4};
    OK(cuMemcpy2D(&c));
    cr_expect_eq(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D e = c;
    e.dstXInBytes = 1; // pitch < width + x
    cr_expect_eq(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
    e = c;
    e.srcPitch = 1ull << 31; // above CU_DEVICE_ATTRIBUTE_MAX_PITCH
    cr_expect_eq(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
    e = c;
    e.dstMemoryType = CU_MEMORYTYPE_ARRAY; // no arrays exist here
    cr_expect_eq(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
    e = c;
    e.dstMemoryType = CU_MEMORYTYPE_HOST; // device memory named as host
    e.dstHost = (void *)(uintptr_t)d;
    cr_expect_eq(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
    e = c;
    e.Height = 1, e.srcPitch = 0, e.dstPitch = 0; // one row: the pitch is unused
    OK(cuMemcpy2D(&e));
    OK(cuMemFree(d));
}

// Rows on memory that is not mapped fault, as a real copy engine would.
Test(pitched, copy2d_on_freed_memory_faults, .exit_code = SIM_EXIT_FAULT)
{
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemFree(d));
    unsigned char h[256];
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                       .srcDevice = d,
                       .srcPitch = 128,
                       .dstMemoryType = CU_MEMORYTYPE_HOST,
                       .dstHost = h,
                       .dstPitch = 64,
                       .WidthInBytes = 64,
                       .Height = 4};
    cuMemcpy2D(&c);
}

// A 3D copy: slices srcHeight rows apart, rows pitch apart.
Test(pitched, copy3d_moves_every_row_of_every_slice)
{
    enum { W = 8, H = 3, D = 2, P = 16, R = 4 }; // allocation: R rows per slice
    unsigned char src[W * H * D], back[P * R * D];
    for (int i = 0; i < W * H * D; i++)
        src[i] = (unsigned char)(i + 1);
    CUdeviceptr d;
    OK(cuMemAlloc(&d, P * R * D));
    OK(cuMemsetD8(d, 0, P * R * D));
    CUDA_MEMCPY3D c = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                       .srcHost = src,
                       .srcPitch = W,
                       .srcHeight = H,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = d,
                       .dstPitch = P,
                       .dstHeight = R,
                       .WidthInBytes = W,
                       .Height = H,
                       .Depth = D};
    OK(cuMemcpy3D(&c));
    OK(cuMemcpyDtoH(back, d, sizeof back));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < R; y++)
            for (int x = 0; x < P; x++) {
                unsigned char want = y < H && x < W ? src[(z * H + y) * W + x] : 0;
                cr_assert_eq(back[(z * R + y) * P + x], want, "z %d y %d x %d", z, y, x);
            }
    CUDA_MEMCPY3D e = c;
    e.dstHeight = 2; // shorter than Height with Depth > 1
    cr_expect_eq(cuMemcpy3D(&e), CUDA_ERROR_INVALID_VALUE);
    e = c;
    e.srcLOD = 1;
    cr_expect_eq(cuMemcpy3D(&e), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(d));
}

Test(pitched, peer_copies_within_the_one_context)
{
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, 4096));
    OK(cuMemAlloc(&b, 4096));
    OK(cuMemsetD32(a, 0x01020304u, 1024));
    OK(cuMemcpyPeer(b, ctx, a, ctx, 4096));
    unsigned v[1024];
    OK(cuMemcpyDtoH(v, b, sizeof v));
    for (int i = 0; i < 1024; i++)
        cr_assert_eq(v[i], 0x01020304u);
    cr_expect_eq(cuMemcpyPeer(b, NULL, a, ctx, 4096), CUDA_ERROR_INVALID_CONTEXT);
    cr_expect_eq(cuMemcpyPeerAsync(b, ctx, a, (CUcontext)&v, 4096, NULL),
                 CUDA_ERROR_INVALID_CONTEXT);
    ROK(cudaMemcpyPeer((void *)(uintptr_t)a, 0, (void *)(uintptr_t)b, 0, 16));
    cr_expect_eq(cudaMemcpyPeer((void *)(uintptr_t)a, 1, (void *)(uintptr_t)b, 0, 16),
                 cudaErrorInvalidDevice);
    OK(cuMemFree(a));
    OK(cuMemFree(b));
}

// 16-bit and 2D sets: the values, the gaps, the alignment cuda.h requires.
Test(pitched, sets_write_rows_of_elements)
{
    enum { P = 64 };
    CUdeviceptr d;
    OK(cuMemAlloc(&d, P * 4));
    unsigned char b[P * 4];
    OK(cuMemsetD8(d, 0, P * 4));
    OK(cuMemsetD16(d, 0xBEEF, 3));
    OK(cuMemcpyDtoH(b, d, 8));
    uint16_t h16[4];
    memcpy(h16, b, 8);
    cr_expect(h16[0] == 0xBEEF && h16[1] == 0xBEEF && h16[2] == 0xBEEF && h16[3] == 0);
    cr_expect_eq(cuMemsetD16(d + 1, 1, 1), CUDA_ERROR_INVALID_VALUE);

    OK(cuMemsetD8(d, 0, P * 4));
    OK(cuMemsetD2D32Async_ptsz(d, P, 0xA1B2C3D4u, 5, 3, NULL));
    OK(cuMemsetD2D16(d + 20, P, 0x5566, 2, 2));
    OK(cuMemsetD2D8(d + 30, P, 0x77, 3, 4));
    OK(cuCtxSynchronize());
    OK(cuMemcpyDtoH(b, d, sizeof b));
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < P; x++) {
            unsigned char want = 0;
            if (y < 3 && x < 20) want = (unsigned char)(0xA1B2C3D4u >> (8 * (x % 4)));
            if (y < 2 && x >= 20 && x < 24) want = x % 2 ? 0x55 : 0x66;
            if (x >= 30 && x < 33) want = 0x77;
            cr_assert_eq(b[y * P + x], want, "y %d x %d", y, x);
        }
    cr_expect_eq(cuMemsetD2D32(d, 62, 0, 4, 2), CUDA_ERROR_INVALID_VALUE); // pitch not aligned
    cr_expect_eq(cuMemsetD2D32(d + 2, P, 0, 4, 2), CUDA_ERROR_INVALID_VALUE);
    cr_expect_eq(cuMemsetD2D8(d, 8, 0, 9, 2), CUDA_ERROR_INVALID_VALUE); // pitch < width
    OK(cuMemFree(d));
}

Test(pitched, set2d_on_freed_memory_faults, .exit_code = SIM_EXIT_FAULT)
{
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemFree(d));
    cuMemsetD2D8(d, 128, 1, 16, 4);
}

// Captured, a 2D copy and a 2D set replay row by row.
Test(pitched, capture_replays_pitched_work)
{
    enum { W = 32, H = 4, P = 64 };
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, P * H));
    OK(cuMemAlloc(&b, P * H));
    OK(cuMemsetD8(a, 0, P * H));
    OK(cuMemsetD8(b, 0, P * H));
    OK(cuCtxSynchronize());
    CUgraph g;
    CUgraphExec x;
    OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuMemsetD2D16Async(a, P, 0x1234, W / 2, H, s));
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                       .srcDevice = a,
                       .srcPitch = P,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                       .dstDevice = b,
                       .dstPitch = P,
                       .WidthInBytes = W,
                       .Height = H};
    OK(cuMemcpy2DAsync(&c, s));
    OK(cuStreamEndCapture(s, &g));
    unsigned char back[P * H];
    OK(cuMemcpyDtoH(back, b, sizeof back));
    for (size_t i = 0; i < sizeof back; i++)
        cr_assert_eq(back[i], 0, "captured work ran at capture");
    OK(cuGraphInstantiate(&x, g, 0));
    OK(cuGraphLaunch(x, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(back, b, sizeof back));
    for (int y = 0; y < H; y++)
        for (int i = 0; i < P; i++)
            cr_assert_eq(back[y * P + i], i < W ? (i % 2 ? 0x12 : 0x34) : 0, "y %d x %d", y, i);
    sim_stats_t st;
    OK(simGetStats(&st));
    cr_expect_eq(st.races, 0);
    OK(cuGraphExecDestroy(x));
    OK(cuGraphDestroy(g));
}

// The runtime's forms decode into the driver's.
Test(pitched, runtime_2d_3d_copies_and_sets)
{
    enum { W = 24, H = 5, P = 32 };
    unsigned char src[W * H], back[W * H];
    for (int i = 0; i < W * H; i++)
        src[i] = (unsigned char)(3 * i + 7);
    void *d;
    size_t bytes = P * H * 2;
    ROK(cudaMalloc(&d, bytes));
    ROK(cudaMemset(d, 0, bytes));
    ROK(cudaMemcpy2D(d, P, src, W, W, H, cudaMemcpyHostToDevice));
    memset(back, 0, sizeof back);
    ROK(cudaMemcpy2D_ptds(back, W, d, P, W, H, cudaMemcpyDefault));
    cr_expect(memcmp(back, src, sizeof back) == 0);
    cr_expect_eq(cudaMemcpy2D(d, 16, src, W, W, H, cudaMemcpyHostToDevice),
                 cudaErrorInvalidPitchValue);
    cr_expect_eq(cudaMemcpy2D(d, P, src, W, W, H, (enum cudaMemcpyKind)9),
                 cudaErrorInvalidMemcpyDirection);
    // 3D: the second slice (z 1) of a P x H x 2 volume, read back as 2D.
    struct cudaMemcpy3DParms q = {0};
    q.srcPtr = pitched(src, W, W, H);
    q.dstPtr = pitched(d, P, W, H);
    q.dstPos = (struct cudaPos){.x = 0, .y = 0, .z = 1};
    q.extent = extent(W, H, 1);
    q.kind = cudaMemcpyHostToDevice;
    ROK(cudaMemcpy3D(&q));
    memset(back, 0, sizeof back);
    ROK(cudaMemcpy2D(back, W, (char *)d + P * H, P, W, H, cudaMemcpyDeviceToHost));
    cr_expect(memcmp(back, src, sizeof back) == 0);
    q.dstArray = (cudaArray_t)&q; // no arrays here
    cr_expect_eq(cudaMemcpy3D(&q), cudaErrorInvalidValue);
    // Sets: 2D rows, then a 3D set of 2 slices x 2 rows x 3 bytes.
    ROK(cudaMemset(d, 0, bytes));
    ROK(cudaMemset2D(d, P, 0x42, 4, 2));
    ROK(cudaMemset3D(pitched(d, P, W, H), 0x43, extent(3, 2, 2)));
    unsigned char all[P * H * 2];
    ROK(cudaMemcpy(all, d, bytes, cudaMemcpyDeviceToHost));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < P; x++) {
                unsigned char want = 0;
                if (z == 0 && y < 2 && x < 4) want = 0x42;
                if (y < 2 && x < 3) want = 0x43;
                cr_assert_eq(all[(z * H + y) * P + x], want, "z %d y %d x %d", z, y, x);
            }
    ROK(cudaFree(d));
}
