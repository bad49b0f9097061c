// SPDX-License-Identifier: MIT
// The safety net on the pitched, peer and 16-bit/2D copy and set paths: a
// buffer of layer 0 is offloaded (as in launch_paths.c), then touched through
// one path outside the schedule. Prints per path:
//   path=<label> hook=<aoshim entry point expected to catch it> late=<n> sum=<hex>
// sum: a checksum of the bytes the path produced (the copy's destination, or
// the set buffer), to compare with a run without aoshim. late: late reloads
// aoshim counted for it. The hook is what aoshim's "late reload: <hook>
// touched" warning must name (the runtime's own calls into the driver pass
// through aoshim's driver wrappers, so a missing runtime hook would show as a
// driver name there).
//   copy_paths            every path, one after another
//   copy_paths <label>    that path only
//   copy_paths --list     the labels
//   copy_paths --two-layers
//                         one cuMemcpy2D whose two rows lie in two layers'
//                         buffers, a pitch apart wider than a granule (run
//                         with layers 0 and 1 offloaded): both are reloaded,
//                         not just the first row's (late=2)
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define PROG "copy_paths"
#include "check.h"

// The buffer: 4 MiB (two 2 MiB granules), seen as H rows of P bytes, of
// which the paths touch W; 3D: slices of YS rows, DH rows each.
#define BYTES ((size_t)4 << 20)
#define P     4096u
#define W     3000u
#define H     ((unsigned)(BYTES / P))
#define YS    256u
#define DH    200u
#define DEPTH (H / YS)

// Per-thread twins: exported by both libraries, declared by the headers only
// in per-thread builds.
cudaError_t cudaMemcpy2D_ptds(void *, size_t, const void *, size_t, size_t, size_t,
                              enum cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync_ptsz(void *, size_t, const void *, size_t, size_t, size_t,
                                   enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *);
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *, cudaStream_t);
cudaError_t cudaMemset2D_ptds(void *, size_t, int, size_t, size_t);
cudaError_t cudaMemset2DAsync_ptsz(void *, size_t, int, size_t, size_t, cudaStream_t);
cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr, int, struct cudaExtent);
cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr, int, struct cudaExtent, cudaStream_t);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *);
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *);
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *, CUstream);
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *);
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *, CUstream);
CUresult cuMemcpyPeer_ptds(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr, unsigned short, size_t);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr, unsigned short, size_t, CUstream);
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr, size_t, unsigned char, size_t, size_t);
CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr, size_t, unsigned short, size_t, size_t);
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr, size_t, unsigned, size_t, size_t);
CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream);
CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream);
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr, size_t, unsigned, size_t, size_t, CUstream);

// What a path does, by the shape of its function.
enum kind {
    RT_2D,
    RT_2D_A,
    RT_3D,
    RT_3D_A,
    RT_PEER,
    RT_PEER_A,
    RT_SET2D,
    RT_SET2D_A,
    RT_SET3D,
    RT_SET3D_A,
    CU_2D,
    CU_2D_A,
    CU_3D,
    CU_3D_A,
    CU_PEER,
    CU_PEER_A,
    CU_D16,
    CU_D16_A,
    CU_D2D8,
    CU_D2D8_A,
    CU_D2D16,
    CU_D2D16_A,
    CU_D2D32,
    CU_D2D32_A,
};

typedef struct path_s {
    const char *label, *hook;
    enum kind kind;
    void *fn;         // NULL: looked up by `base` through cuGetProcAddress
    const char *base; // the name cuGetProcAddress is asked for
    bool ptds;        // per-thread: default stream NULL, lookup flag
} path_t;

#define RT(fn, kind, ptds)                                                                         \
    {                                                                                              \
#fn, #fn, kind, (void *)fn, NULL, ptds                                                     \
    }
#define CU(fn, kind, ptds)                                                                         \
    {                                                                                              \
#fn, #fn, kind, (void *)fn, NULL, ptds                                                     \
    }
#define GPA(base, hook, kind, ptds)                                                                \
    {                                                                                              \
        "cuGetProcAddress:" hook, hook, kind, NULL, base, ptds                                     \
    }
#define GPA2(base, legacy, ptsym, kind) GPA(base, legacy, kind, false), GPA(base, ptsym, kind, true)

static const path_t paths[] = {
    RT(cudaMemcpy2D, RT_2D, false),
    RT(cudaMemcpy2D_ptds, RT_2D, true),
    RT(cudaMemcpy2DAsync, RT_2D_A, false),
    RT(cudaMemcpy2DAsync_ptsz, RT_2D_A, true),
    RT(cudaMemcpy3D, RT_3D, false),
    RT(cudaMemcpy3D_ptds, RT_3D, true),
    RT(cudaMemcpy3DAsync, RT_3D_A, false),
    RT(cudaMemcpy3DAsync_ptsz, RT_3D_A, true),
    RT(cudaMemcpyPeer, RT_PEER, false),
    RT(cudaMemcpyPeerAsync, RT_PEER_A, false),
    RT(cudaMemset2D, RT_SET2D, false),
    RT(cudaMemset2D_ptds, RT_SET2D, true),
    RT(cudaMemset2DAsync, RT_SET2D_A, false),
    RT(cudaMemset2DAsync_ptsz, RT_SET2D_A, true),
    RT(cudaMemset3D, RT_SET3D, false),
    RT(cudaMemset3D_ptds, RT_SET3D, true),
    RT(cudaMemset3DAsync, RT_SET3D_A, false),
    RT(cudaMemset3DAsync_ptsz, RT_SET3D_A, true),
    CU(cuMemcpy2D_v2, CU_2D, false),
    CU(cuMemcpy2D_v2_ptds, CU_2D, true),
    CU(cuMemcpy2DUnaligned_v2, CU_2D, false),
    CU(cuMemcpy2DUnaligned_v2_ptds, CU_2D, true),
    CU(cuMemcpy2DAsync_v2, CU_2D_A, false),
    CU(cuMemcpy2DAsync_v2_ptsz, CU_2D_A, true),
    CU(cuMemcpy3D_v2, CU_3D, false),
    CU(cuMemcpy3D_v2_ptds, CU_3D, true),
    CU(cuMemcpy3DAsync_v2, CU_3D_A, false),
    CU(cuMemcpy3DAsync_v2_ptsz, CU_3D_A, true),
    CU(cuMemcpyPeer, CU_PEER, false),
    CU(cuMemcpyPeer_ptds, CU_PEER, true),
    CU(cuMemcpyPeerAsync, CU_PEER_A, false),
    CU(cuMemcpyPeerAsync_ptsz, CU_PEER_A, true),
    CU(cuMemsetD16_v2, CU_D16, false),
    CU(cuMemsetD16_v2_ptds, CU_D16, true),
    CU(cuMemsetD16Async, CU_D16_A, false),
    CU(cuMemsetD16Async_ptsz, CU_D16_A, true),
    CU(cuMemsetD2D8_v2, CU_D2D8, false),
    CU(cuMemsetD2D8_v2_ptds, CU_D2D8, true),
    CU(cuMemsetD2D8Async, CU_D2D8_A, false),
    CU(cuMemsetD2D8Async_ptsz, CU_D2D8_A, true),
    CU(cuMemsetD2D16_v2, CU_D2D16, false),
    CU(cuMemsetD2D16_v2_ptds, CU_D2D16, true),
    CU(cuMemsetD2D16Async, CU_D2D16_A, false),
    CU(cuMemsetD2D16Async_ptsz, CU_D2D16_A, true),
    CU(cuMemsetD2D32_v2, CU_D2D32, false),
    CU(cuMemsetD2D32_v2_ptds, CU_D2D32, true),
    CU(cuMemsetD2D32Async, CU_D2D32_A, false),
    CU(cuMemsetD2D32Async_ptsz, CU_D2D32_A, true),
    GPA2("cuMemcpy2D", "cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds", CU_2D),
    GPA2("cuMemcpy2DUnaligned", "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds", CU_2D),
    GPA2("cuMemcpy2DAsync", "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz", CU_2D_A),
    GPA2("cuMemcpy3D", "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds", CU_3D),
    GPA2("cuMemcpy3DAsync", "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz", CU_3D_A),
    GPA2("cuMemcpyPeer", "cuMemcpyPeer", "cuMemcpyPeer_ptds", CU_PEER),
    GPA2("cuMemcpyPeerAsync", "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz", CU_PEER_A),
    GPA2("cuMemsetD16", "cuMemsetD16_v2", "cuMemsetD16_v2_ptds", CU_D16),
    GPA2("cuMemsetD16Async", "cuMemsetD16Async", "cuMemsetD16Async_ptsz", CU_D16_A),
    GPA2("cuMemsetD2D8", "cuMemsetD2D8_v2", "cuMemsetD2D8_v2_ptds", CU_D2D8),
    GPA2("cuMemsetD2D8Async", "cuMemsetD2D8Async", "cuMemsetD2D8Async_ptsz", CU_D2D8_A),
    GPA2("cuMemsetD2D16", "cuMemsetD2D16_v2", "cuMemsetD2D16_v2_ptds", CU_D2D16),
    GPA2("cuMemsetD2D16Async", "cuMemsetD2D16Async", "cuMemsetD2D16Async_ptsz", CU_D2D16_A),
    GPA2("cuMemsetD2D32", "cuMemsetD2D32_v2", "cuMemsetD2D32_v2_ptds", CU_D2D32),
    GPA2("cuMemsetD2D32Async", "cuMemsetD2D32Async", "cuMemsetD2D32Async_ptsz", CU_D2D32_A),
};
#define NPATHS (sizeof paths / sizeof *paths)

static cudaStream_t stream;
static unsigned char *host;

static uint64_t late(void)
{
    aoshim_stats_t st = {.size = sizeof st};
    return aoshim_try_get_stats(&st) == 0 ? st.late_reloads : 0;
}

// Layer 0 allocates and fills `in`; layers 1 and 2 run; the GPU catches up;
// a control call lets aoshim release layer 0 (AOSHIM_OFFLOAD_LAYERS=1).
static void *t1;        // layer 1's buffer, filled like `in`, freed after the path
static int nlayers = 3; // --two-layers: one more, so that layer 1 is released too

static unsigned char *offloaded_buffer(int step)
{
    unsigned char *in;
    for (size_t i = 0; i < BYTES; i++)
        host[i] = (unsigned char)(i * 31 + (i >> 12) * 7 + (size_t)step);
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync((void **)&in, BYTES, stream));
    CHECK(cudaMemcpyAsync(in, host, BYTES, cudaMemcpyHostToDevice, stream));
    aoshim_try_layer_end(0);
    aoshim_try_layer_begin(1);
    CHECK(cudaMallocAsync(&t1, BYTES, stream));
    CHECK(cudaMemcpyAsync(t1, host, BYTES, cudaMemcpyHostToDevice, stream));
    aoshim_try_layer_end(1);
    void *tl[8];
    for (int l = 2; l < nlayers; l++) {
        aoshim_try_layer_begin(l);
        CHECK(cudaMallocAsync(&tl[l], BYTES, stream));
        aoshim_try_layer_end(l);
    }
    CHECK(cudaDeviceSynchronize());
    aoshim_try_set_microbatch(0);
    for (int l = 2; l < nlayers; l++)
        CHECK(cudaFreeAsync(tl[l], stream));
    return in;
}

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void *lookup(const path_t *p)
{
    if (p->fn) return p->fn;
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CHECK(cuGetProcAddress_v2(p->base, &fn, 12000,
                              p->ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                      : CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                              &q));
    if (!fn) {
        fprintf(stderr, PROG ": %s not found\n", p->base);
        exit(1);
    }
    return fn;
}

typedef cudaError_t (*rt2d_t)(void *, size_t, const void *, size_t, size_t, size_t,
                              enum cudaMemcpyKind);
typedef cudaError_t (*rt2da_t)(void *, size_t, const void *, size_t, size_t, size_t,
                               enum cudaMemcpyKind, cudaStream_t);
typedef cudaError_t (*rt3d_t)(const struct cudaMemcpy3DParms *);
typedef cudaError_t (*rt3da_t)(const struct cudaMemcpy3DParms *, cudaStream_t);
typedef cudaError_t (*rtpeer_t)(void *, int, const void *, int, size_t);
typedef cudaError_t (*rtpeera_t)(void *, int, const void *, int, size_t, cudaStream_t);
typedef cudaError_t (*rtset2d_t)(void *, size_t, int, size_t, size_t);
typedef cudaError_t (*rtset2da_t)(void *, size_t, int, size_t, size_t, cudaStream_t);
typedef cudaError_t (*rtset3d_t)(struct cudaPitchedPtr, int, struct cudaExtent);
typedef cudaError_t (*rtset3da_t)(struct cudaPitchedPtr, int, struct cudaExtent, cudaStream_t);
typedef CUresult (*cu2d_t)(const CUDA_MEMCPY2D *);
typedef CUresult (*cu2da_t)(const CUDA_MEMCPY2D *, CUstream);
typedef CUresult (*cu3d_t)(const CUDA_MEMCPY3D *);
typedef CUresult (*cu3da_t)(const CUDA_MEMCPY3D *, CUstream);
typedef CUresult (*cupeer_t)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
typedef CUresult (*cupeera_t)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
typedef CUresult (*cud16_t)(CUdeviceptr, unsigned short, size_t);
typedef CUresult (*cud16a_t)(CUdeviceptr, unsigned short, size_t, CUstream);
typedef CUresult (*cud2d8_t)(CUdeviceptr, size_t, unsigned char, size_t, size_t);
typedef CUresult (*cud2d8a_t)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream);
typedef CUresult (*cud2d16_t)(CUdeviceptr, size_t, unsigned short, size_t, size_t);
typedef CUresult (*cud2d16a_t)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream);
typedef CUresult (*cud2d32_t)(CUdeviceptr, size_t, unsigned, size_t, size_t);
typedef CUresult (*cud2d32a_t)(CUdeviceptr, size_t, unsigned, size_t, size_t, CUstream);

// Run one path over `in` (offloaded); the result lands in `out` (copies)
// or in `in` (sets). Returns the buffer the checksum is over.
static void *run(const path_t *p, unsigned char *in, unsigned char *out)
{
    void *fn = lookup(p);
    // Per-thread entry points get the per-thread default stream (NULL);
    // the others the program's stream (async) or none (sync).
    cudaStream_t s = p->ptds ? NULL : stream;
    CUstream cs = (CUstream)s;
    CUdeviceptr din = (CUdeviceptr)(uintptr_t)in, dout = (CUdeviceptr)(uintptr_t)out;
    CUcontext ctx = NULL;
    CHECK(cuCtxGetCurrent(&ctx));
    struct cudaMemcpy3DParms q = {0};
    q.srcPtr = (struct cudaPitchedPtr){in, P, W, YS};
    q.dstPtr = (struct cudaPitchedPtr){out, P, W, YS};
    q.srcPos = (struct cudaPos){8, 4, 0};
    q.dstPos = (struct cudaPos){0, 1, 0};
    q.extent = (struct cudaExtent){W, DH, DEPTH};
    q.kind = cudaMemcpyDeviceToDevice;
    CUDA_MEMCPY2D c2 = {.srcXInBytes = 16,
                        .srcY = 1,
                        .srcMemoryType = CU_MEMORYTYPE_DEVICE,
                        .srcDevice = din,
                        .srcPitch = P,
                        .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
                        .dstDevice = dout,
                        .dstPitch = P,
                        .WidthInBytes = W,
                        .Height = H - 1};
    CUDA_MEMCPY3D c3 = {.srcXInBytes = 8,
                        .srcY = 4,
                        .srcMemoryType = CU_MEMORYTYPE_DEVICE,
                        .srcDevice = din,
                        .srcPitch = P,
                        .srcHeight = YS,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = dout,
                        .dstPitch = P,
                        .dstHeight = YS,
                        .WidthInBytes = W,
                        .Height = DH,
                        .Depth = DEPTH};
    struct cudaPitchedPtr pp = {in + 100, P, W, YS};
    struct cudaExtent ext = {W, DH, DEPTH};
    switch (p->kind) {
    case RT_2D:
        CHECK(((rt2d_t)fn)(out, P, in + 64, P, W, H - 1, cudaMemcpyDeviceToDevice));
        break;
    case RT_2D_A:
        CHECK(((rt2da_t)fn)(out, P, in + 64, P, W, H - 1, cudaMemcpyDefault, s));
        break;
    case RT_3D:
        CHECK(((rt3d_t)fn)(&q));
        break;
    case RT_3D_A:
        CHECK(((rt3da_t)fn)(&q, s));
        break;
    case RT_PEER:
        CHECK(((rtpeer_t)fn)(out, 0, in, 0, BYTES));
        break;
    case RT_PEER_A:
        CHECK(((rtpeera_t)fn)(out, 0, in, 0, BYTES, s));
        break;
    case RT_SET2D:
        CHECK(((rtset2d_t)fn)(in + 1, P, 0x5A, W, H));
        return in;
    case RT_SET2D_A:
        CHECK(((rtset2da_t)fn)(in + 1, P, 0x5A, W, H, s));
        return in;
    case RT_SET3D:
        CHECK(((rtset3d_t)fn)(pp, 0x3C, ext));
        return in;
    case RT_SET3D_A:
        CHECK(((rtset3da_t)fn)(pp, 0x3C, ext, s));
        return in;
    case CU_2D:
        CHECK(((cu2d_t)fn)(&c2));
        break;
    case CU_2D_A:
        CHECK(((cu2da_t)fn)(&c2, cs));
        break;
    case CU_3D:
        CHECK(((cu3d_t)fn)(&c3));
        break;
    case CU_3D_A:
        CHECK(((cu3da_t)fn)(&c3, cs));
        break;
    case CU_PEER:
        CHECK(((cupeer_t)fn)(dout, ctx, din + 4, ctx, BYTES - 4));
        break;
    case CU_PEER_A:
        CHECK(((cupeera_t)fn)(dout, ctx, din + 4, ctx, BYTES - 4, cs));
        break;
    // 16-bit sets: the second granule only (a set must reload its chunk
    // wherever in it the range starts).
    case CU_D16:
        CHECK(((cud16_t)fn)(din + (2u << 20) + 6, 0xC0DE, 1000));
        return in;
    case CU_D16_A:
        CHECK(((cud16a_t)fn)(din + (2u << 20) + 6, 0xC0DE, 1000, cs));
        return in;
    case CU_D2D8:
        CHECK(((cud2d8_t)fn)(din + 3, P, 0x11, W, H));
        return in;
    case CU_D2D8_A:
        CHECK(((cud2d8a_t)fn)(din + 3, P, 0x11, W, H, cs));
        return in;
    case CU_D2D16:
        CHECK(((cud2d16_t)fn)(din + 2, P, 0x2233, W / 2, H));
        return in;
    case CU_D2D16_A:
        CHECK(((cud2d16a_t)fn)(din + 2, P, 0x2233, W / 2, H, cs));
        return in;
    case CU_D2D32:
        CHECK(((cud2d32_t)fn)(din + 4, P, 0x44556677u, W / 4, H));
        return in;
    case CU_D2D32_A:
        CHECK(((cud2d32a_t)fn)(din + 4, P, 0x44556677u, W / 4, H, cs));
        return in;
    }
    return out;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < NPATHS; i++)
            printf("%s\n", paths[i].label);
        return 0;
    }
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    aoshim_try_set_stream(stream);
    host = malloc(BYTES);
    unsigned char *out;
    CHECK(cudaMalloc((void **)&out, BYTES)); // resident: allocated outside layers
    if (argc > 1 && !strcmp(argv[1], "--two-layers")) {
        // Row 0 in the lower of the two buffers, row 1 in the higher: the
        // rows hold the same bytes, so the result does not depend on which
        // layer's buffer is lower.
        CHECK(cudaMemset(out, 0, BYTES));
        nlayers = 4;
        unsigned char *in = offloaded_buffer(0), *lo = in, *hi = t1;
        if (hi < lo) lo = t1, hi = in;
        uint64_t pitch = (uint64_t)(hi - lo);
        if (pitch < W + (2u << 20) || pitch > 2147483647u) {
            fprintf(stderr, PROG ": buffers %p and %p: no pitch fits\n", (void *)in, t1);
            return 3;
        }
        CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                           .srcDevice = (CUdeviceptr)lo,
                           .srcPitch = pitch,
                           .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                           .dstDevice = (CUdeviceptr)out,
                           .dstPitch = P,
                           .WidthInBytes = W,
                           .Height = 2};
        uint64_t before = late();
        CHECK(cuMemcpy2D_v2(&c));
        uint64_t n = late() - before;
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(host, out, BYTES, cudaMemcpyDeviceToHost));
        printf("path=two-layers hook=cuMemcpy2D_v2 late=%llu sum=%016llx\n", (unsigned long long)n,
               (unsigned long long)fnv(host, BYTES));
        CHECK(cudaFreeAsync(in, stream));
        CHECK(cudaFreeAsync(t1, stream));
        CHECK(cudaDeviceSynchronize());
        return 0;
    }
    int found = 0;
    for (size_t i = 0; i < NPATHS; i++) {
        const path_t *p = &paths[i];
        if (argc > 1 && strcmp(argv[1], p->label)) continue;
        found++;
        CHECK(cudaMemset(out, 0, BYTES));
        unsigned char *in = offloaded_buffer((int)i);
        uint64_t before = late();
        void *res = run(p, in, out);
        uint64_t n = late() - before;
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(host, res, BYTES, cudaMemcpyDeviceToHost));
        printf("path=%s hook=%s late=%llu sum=%016llx\n", p->label, p->hook, (unsigned long long)n,
               (unsigned long long)fnv(host, BYTES));
        fflush(stdout);
        CHECK(cudaFreeAsync(in, stream));
        CHECK(cudaFreeAsync(t1, stream));
        aoshim_try_step_end();
    }
    CHECK(cudaDeviceSynchronize());
    free(host);
    if (!found) fprintf(stderr, PROG ": no path %s\n", argv[1]);
    return found ? 0 : 2;
}
