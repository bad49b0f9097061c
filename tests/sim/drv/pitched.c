// SPDX-License-Identifier: MIT
// Pitched copies and sets: cuMemcpy2D(Unaligned)/cuMemcpy3D (and Async),
// cuMemcpyPeer(Async), cuMemsetD16(Async), cuMemsetD2D8/16/32(Async), each
// with its per-thread twin.
//
// A pitched operation is a list of rows (width bytes each, pitch bytes
// apart, and for 3D `height` rows per slice, slice pitch = pitch * the
// allocation's height). It is one operation on its stream, as in CUDA: one
// schedule, one cost (latency + all rows' bytes over the link), but every row
// is classified (a row on unmapped memory faults; the gaps between rows are
// never touched, so unmapped gaps are fine) and race-checked on its own.
// Captured, it becomes one memcpy/memset node per row: a replay does the
// same rows (graph.c replays each like any captured copy or set).
//
// Not modelled: CUDA arrays (the simulator creates none, so every CUarray a
// program could pass is invalid: CU_MEMORYTYPE_ARRAY is
// CUDA_ERROR_INVALID_VALUE), and the pitch restrictions cuMemcpy2D may apply
// to device-to-device copies with pitches not from cuMemAllocPitch (cuda.h:
// "may fail"): cuMemcpy2D behaves as cuMemcpy2DUnaligned.
#include <string.h>

#include "internal.h"

// CU_DEVICE_ATTRIBUTE_MAX_PITCH as core.c reports it: a larger pitch is
// CUDA_ERROR_INVALID_VALUE (cuda.h: "returns an error if any pitch is
// greater than the maximum allowed").
#define MAX_PITCH 2147483647ull

enum { DIR_D2H, DIR_H2D, DIR_D2D, DIR_H2H };

typedef struct side_s {
    uint64_t start;     // first byte: base + (z * rows + y) * pitch + x
    uint64_t pitch;     // bytes between rows
    uint64_t slice;     // bytes between slices
    int type;           // CUmemorytype
    sim_memkind_t kind; // of the first row, once classified
} side_t;

static uint64_t row_addr(const side_t *s, uint64_t i, uint64_t k)
{
    return s->start + k * s->slice + i * s->pitch;
}

static bool is_host(sim_memkind_t k)
{
    return k == SIM_MEM_PINNED || k == SIM_MEM_PAGEABLE;
}

// The bytes from the first byte of a pitched region to its last + 1, or false
// when that does not fit in the address space (the caller's mistake).
static bool extent_ok(uint64_t start, uint64_t width, uint64_t height, uint64_t depth,
                      uint64_t pitch, uint64_t slice)
{
    uint64_t a, b, end;
    return !__builtin_mul_overflow(height - 1, pitch, &a) &&
           !__builtin_mul_overflow(depth - 1, slice, &b) && !__builtin_add_overflow(a, b, &a) &&
           !__builtin_add_overflow(a, width, &a) && !__builtin_add_overflow(start, a, &end);
}

// Classify every row of one side. The device side must be accessible device
// memory (else a fault: the copy engine would touch unmapped memory); the
// host side host memory; a unified side either, the same for all rows. A
// wrong kind is the caller's mistake: CUDA_ERROR_INVALID_VALUE.
static CUresult classify(side_t *sd, uint64_t width, uint64_t height, uint64_t depth,
                         const sim_stream_t *s, const char *what)
{
    for (uint64_t k = 0; k < depth; k++)
        for (uint64_t i = 0; i < height; i++) {
            uint64_t a = row_addr(sd, i, k);
            sim_memkind_t m = sim_mem_classify(a, width);
            if (m == SIM_MEM_INACCESSIBLE && sd->type != CU_MEMORYTYPE_HOST)
                sim_fault(what, NULL, s, a, width);
            if (i == 0 && k == 0) sd->kind = m;
            bool dev = m == SIM_MEM_DEVICE, first_dev = sd->kind == SIM_MEM_DEVICE;
            if (sd->type == CU_MEMORYTYPE_DEVICE && !dev) return CUDA_ERROR_INVALID_VALUE;
            if (sd->type == CU_MEMORYTYPE_HOST && !is_host(m)) return CUDA_ERROR_INVALID_VALUE;
            if (sd->type == CU_MEMORYTYPE_UNIFIED && dev != first_dev)
                return CUDA_ERROR_INVALID_VALUE; // one row on the device, another not
        }
    return CUDA_SUCCESS;
}

static uint64_t copy_cost(uint64_t bytes, double gbps)
{
    return sim_cfg.copy_latency_ns + (gbps > 0 ? (uint64_t)((double)bytes / gbps) : 0);
}

// Validated geometry in, the copy done (or captured) out.
static CUresult pitched_copy(side_t *src, side_t *dst, uint64_t width, uint64_t height,
                             uint64_t depth, bool async, CUstream h, bool ptds, const char *what)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) SIM_RET(r);
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) SIM_RET(r);
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) SIM_RET(r);
    if (!width || !height || !depth) SIM_RET(CUDA_SUCCESS); // nothing to move
    if (!src->start || !dst->start) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if ((r = classify(src, width, height, depth, s, what)) != CUDA_SUCCESS) SIM_RET(r);
    if ((r = classify(dst, width, height, depth, s, what)) != CUDA_SUCCESS) SIM_RET(r);
    bool sdev = src->kind == SIM_MEM_DEVICE, ddev = dst->kind == SIM_MEM_DEVICE;
    int dir = sdev ? (ddev ? DIR_D2D : DIR_D2H) : (ddev ? DIR_H2D : DIR_H2H);
    if (!async && (r = sim_capture_unsafe_call()) != CUDA_SUCCESS) SIM_RET(r);

    sim_memkind_t host_kind = dir == DIR_D2H   ? dst->kind
                              : dir == DIR_H2D ? src->kind
                                               : SIM_MEM_DEVICE;
    bool pageable = host_kind == SIM_MEM_PAGEABLE || dir == DIR_H2H;
    int engine = dir == DIR_D2H   ? SIM_ENG_D2H
                 : dir == DIR_H2D ? SIM_ENG_H2D
                 : dir == DIR_D2D ? SIM_ENG_COMPUTE
                                  : SIM_ENG_NONE;
    double gbps = dir == DIR_D2D   ? sim_cfg.d2d_gbps
                  : pageable       ? sim_cfg.pageable_gbps
                  : dir == DIR_D2H ? sim_cfg.d2h_gbps
                                   : sim_cfg.h2d_gbps;
    uint64_t bytes = width * height * depth;
    if (async) {
        sim_graph_t *g = sim_capture_graph(s, &r);
        if (r != CUDA_SUCCESS) SIM_RET(r);
        if (g && !pageable) {
            for (uint64_t k = 0; k < depth; k++)
                for (uint64_t i = 0; i < height; i++) {
                    sim_node_t *n = sim_graph_add(g, SIM_NODE_MEMCPY, what, s->id);
                    n->dst = row_addr(dst, i, k);
                    n->src = row_addr(src, i, k);
                    n->bytes = width;
                    n->engine = engine;
                }
            SIM_RET(CUDA_SUCCESS);
        }
        // Pageable memory on a capturing stream: sim_op_begin fails and
        // invalidates the capture, as CUDA cannot capture such a copy.
    }
    sim_op_t op;
    uint64_t cost = dir == DIR_H2H ? 0 : copy_cost(bytes, gbps);
    if ((r = sim_op_begin(&op, s, engine, cost, what, NULL)) != CUDA_SUCCESS) SIM_RET(r);
    for (uint64_t k = 0; k < depth; k++)
        for (uint64_t i = 0; i < height; i++) {
            uint64_t sa = row_addr(src, i, k), da = row_addr(dst, i, k);
            if (src->kind != SIM_MEM_PAGEABLE) sim_hb_access(&op, sa, width, SIM_HB_READ);
            if (dst->kind != SIM_MEM_PAGEABLE) sim_hb_access(&op, da, width, SIM_HB_WRITE);
            if (!sim_cfg.nodata) {
                sim_fault_set_current(&op);
                memmove((void *)(uintptr_t)da, (const void *)(uintptr_t)sa, width);
                sim_fault_set_current(NULL);
            }
        }
    sim_st.copies++;
    // As exec.c's copies: synchronous ones return when done, except device
    // to device; pageable ones block the host (the stricter reading).
    if ((!async && dir != DIR_D2D) || pageable) sim_host_wait_op(&op);
    SIM_RET(CUDA_SUCCESS);
}

// One side of a CUDA_MEMCPY2D / CUDA_MEMCPY3D: the base address its type
// names, and the geometry checks cuda.h documents.
static CUresult side_of(side_t *sd, CUmemorytype type, const void *host, CUdeviceptr dev,
                        uint64_t x, uint64_t y, uint64_t z, uint64_t pitch, uint64_t rows,
                        uint64_t width, uint64_t height, uint64_t depth)
{
    uint64_t base;
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        base = (uint64_t)(uintptr_t)host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = dev;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE; // arrays (none exist here) or no type
    }
    if (pitch > MAX_PITCH) return CUDA_ERROR_INVALID_VALUE;
    // cuda.h: pitch >= WidthInBytes + XInBytes, and (3D) the allocation's
    // height >= Height + Y ("may be 0 if Depth==1"). A single row does not
    // use the pitch, a single slice not the height.
    uint64_t need;
    if (__builtin_add_overflow(width, x, &need)) return CUDA_ERROR_INVALID_VALUE;
    if ((height > 1 || depth > 1) && pitch < need) return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_add_overflow(height, y, &need)) return CUDA_ERROR_INVALID_VALUE;
    if (depth > 1 && rows < need) return CUDA_ERROR_INVALID_VALUE;
    uint64_t off, slice;
    if (__builtin_mul_overflow(rows, pitch, &slice)) return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_mul_overflow(z, slice, &off) || __builtin_add_overflow(off, y * pitch, &off) ||
        __builtin_add_overflow(off, x, &off) || __builtin_add_overflow(base, off, &sd->start))
        return CUDA_ERROR_INVALID_VALUE;
    if (width && height && depth && !extent_ok(sd->start, width, height, depth, pitch, slice))
        return CUDA_ERROR_INVALID_VALUE;
    if (!base) sd->start = 0; // a NULL base stays NULL: checked before use
    sd->pitch = pitch;
    sd->slice = slice;
    sd->type = type;
    return CUDA_SUCCESS;
}

// Argument errors are answered under the lock like every other call, so an
// uninitialised driver still says CUDA_ERROR_NOT_INITIALIZED first.
static CUresult refuse(CUresult e)
{
    CUresult r = sim_enter();
    sim_leave();
    return r != CUDA_SUCCESS ? r : e;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, bool async, CUstream h, bool ptds, const char *what)
{
    if (!p) return refuse(CUDA_ERROR_INVALID_VALUE);
    side_t src, dst;
    CUresult r = side_of(&src, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                         0, p->srcPitch, 0, p->WidthInBytes, p->Height, 1);
    if (r == CUDA_SUCCESS)
        r = side_of(&dst, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, 0,
                    p->dstPitch, 0, p->WidthInBytes, p->Height, 1);
    if (r != CUDA_SUCCESS) return refuse(r);
    return pitched_copy(&src, &dst, p->WidthInBytes, p->Height, 1, async, h, ptds, what);
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, bool async, CUstream h, bool ptds, const char *what)
{
    // cuda.h: the LODs must be 0, the reserved pointers NULL.
    if (!p || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1)
        return refuse(CUDA_ERROR_INVALID_VALUE);
    side_t src, dst;
    CUresult r = side_of(&src, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                         p->srcZ, p->srcPitch, p->srcHeight, p->WidthInBytes, p->Height, p->Depth);
    if (r == CUDA_SUCCESS)
        r = side_of(&dst, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                    p->dstZ, p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth);
    if (r != CUDA_SUCCESS) return refuse(r);
    return pitched_copy(&src, &dst, p->WidthInBytes, p->Height, p->Depth, async, h, ptds, what);
}

#define COPY2D(name, async, ptds, what)                                                            \
    SIM_EXPORT CUresult name(const CUDA_MEMCPY2D *pCopy CU_STREAM_PARAM_##async);                  \
    SIM_EXPORT CUresult name(const CUDA_MEMCPY2D *pCopy CU_STREAM_PARAM_##async)                   \
    {                                                                                              \
        return copy2d(pCopy, async, CU_STREAM_ARG_##async, ptds, what);                            \
    }
#define COPY3D(name, async, ptds, what)                                                            \
    SIM_EXPORT CUresult name(const CUDA_MEMCPY3D *pCopy CU_STREAM_PARAM_##async);                  \
    SIM_EXPORT CUresult name(const CUDA_MEMCPY3D *pCopy CU_STREAM_PARAM_##async)                   \
    {                                                                                              \
        return copy3d(pCopy, async, CU_STREAM_ARG_##async, ptds, what);                            \
    }
#define CU_STREAM_PARAM_0
#define CU_STREAM_PARAM_1 , CUstream hStream
#define CU_STREAM_ARG_0   NULL
#define CU_STREAM_ARG_1   hStream
#define CU_STREAM_PASS_0
#define CU_STREAM_PASS_1 , hStream

COPY2D(cuMemcpy2D_v2, 0, false, "cuMemcpy2D")
COPY2D(cuMemcpy2D_v2_ptds, 0, true, "cuMemcpy2D")
COPY2D(cuMemcpy2DUnaligned_v2, 0, false, "cuMemcpy2DUnaligned")
COPY2D(cuMemcpy2DUnaligned_v2_ptds, 0, true, "cuMemcpy2DUnaligned")
COPY2D(cuMemcpy2DAsync_v2, 1, false, "cuMemcpy2DAsync")
COPY2D(cuMemcpy2DAsync_v2_ptsz, 1, true, "cuMemcpy2DAsync")
COPY3D(cuMemcpy3D_v2, 0, false, "cuMemcpy3D")
COPY3D(cuMemcpy3D_v2_ptds, 0, true, "cuMemcpy3D")
COPY3D(cuMemcpy3DAsync_v2, 1, false, "cuMemcpy3DAsync")
COPY3D(cuMemcpy3DAsync_v2_ptsz, 1, true, "cuMemcpy3DAsync")

// --- peer copies ----------------------------------------------------------------------------
// One device and its primary context: a peer copy is a device-to-device copy
// between two contexts that must both be that one (cuda.h lists
// CUDA_ERROR_INVALID_CONTEXT for a bad one).
static CUresult peer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, bool async,
                     CUstream h, bool ptds, const char *what)
{
    if (dc != sim_primary_ctx() || sc != sim_primary_ctx())
        return refuse(CUDA_ERROR_INVALID_CONTEXT);
    side_t src = {.start = s, .type = CU_MEMORYTYPE_DEVICE},
           dst = {.start = d, .type = CU_MEMORYTYPE_DEVICE};
    if (n && (!extent_ok(s, n, 1, 1, 0, 0) || !extent_ok(d, n, 1, 1, 0, 0)))
        return refuse(CUDA_ERROR_INVALID_VALUE);
    return pitched_copy(&src, &dst, n, 1, 1, async, h, ptds, what);
}

#define PEER(name, async, ptds, what)                                                              \
    SIM_EXPORT CUresult name(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,   \
                             CUcontext srcContext, size_t ByteCount CU_STREAM_PARAM_##async);      \
    SIM_EXPORT CUresult name(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,   \
                             CUcontext srcContext, size_t ByteCount CU_STREAM_PARAM_##async)       \
    {                                                                                              \
        return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, async,                \
                    CU_STREAM_ARG_##async, ptds, what);                                            \
    }
PEER(cuMemcpyPeer, 0, false, "cuMemcpyPeer")
PEER(cuMemcpyPeer_ptds, 0, true, "cuMemcpyPeer")
PEER(cuMemcpyPeerAsync, 1, false, "cuMemcpyPeerAsync")
PEER(cuMemcpyPeerAsync_ptsz, 1, true, "cuMemcpyPeerAsync")

// --- sets ------------------------------------------------------------------------------------
// Height rows of width elements of elem bytes, pitch bytes apart. cuda.h:
// the address (and for 2D the pitch) aligned to the element size. Device
// memory only (stricter than UVA CUDA, as exec.c's memsets).
static CUresult pitched_set(CUdeviceptr dst, uint64_t pitch, unsigned value, unsigned elem,
                            uint64_t width, uint64_t height, bool async, CUstream h, bool ptds,
                            const char *what)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) SIM_RET(r);
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) SIM_RET(r);
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) SIM_RET(r);
    if (dst % elem || (height > 1 && pitch % elem)) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    uint64_t row;
    if (__builtin_mul_overflow(width, elem, &row)) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (height > 1 && (pitch < row || pitch > MAX_PITCH)) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (height <= 1) pitch = row;
    if (!width || !height) SIM_RET(CUDA_SUCCESS);
    if (!extent_ok(dst, row, height, 1, pitch, 0)) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    for (uint64_t i = 0; i < height; i++) {
        uint64_t a = dst + i * pitch;
        sim_memkind_t k = sim_mem_classify(a, row);
        if (k == SIM_MEM_INACCESSIBLE) sim_fault(what, NULL, s, a, row);
        if (k != SIM_MEM_DEVICE) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    }
    if (async) {
        sim_graph_t *g = sim_capture_graph(s, &r);
        if (r != CUDA_SUCCESS) SIM_RET(r);
        if (g) {
            for (uint64_t i = 0; i < height; i++) {
                sim_node_t *nd = sim_graph_add(g, SIM_NODE_MEMSET, what, s->id);
                nd->dst = dst + i * pitch;
                nd->bytes = width; // elements, as exec.c's memset nodes
                nd->value = value;
                nd->elem = elem;
            }
            SIM_RET(CUDA_SUCCESS);
        }
    }
    if (!async && (r = sim_capture_unsafe_call()) != CUDA_SUCCESS) SIM_RET(r);
    uint64_t bytes = row * height;
    uint64_t cost = sim_cfg.d2d_gbps > 0 ? (uint64_t)((double)bytes / sim_cfg.d2d_gbps) : 0;
    sim_op_t op;
    if ((r = sim_op_begin(&op, s, SIM_ENG_COMPUTE, cost, what, NULL)) != CUDA_SUCCESS) SIM_RET(r);
    for (uint64_t i = 0; i < height; i++) {
        uint64_t a = dst + i * pitch;
        sim_hb_access(&op, a, row, SIM_HB_WRITE);
        if (sim_cfg.nodata) continue;
        if (elem == 1) {
            memset((void *)(uintptr_t)a, (int)(value & 0xff), row);
        } else if (elem == 2) {
            uint16_t *p = (uint16_t *)(uintptr_t)a;
            for (uint64_t j = 0; j < width; j++)
                p[j] = (uint16_t)value;
        } else {
            uint32_t *p = (uint32_t *)(uintptr_t)a;
            for (uint64_t j = 0; j < width; j++)
                p[j] = value;
        }
    }
    // Asynchronous to the host even through the "synchronous" entry points
    // (cuda.h API sync notes), as exec.c's memsets.
    SIM_RET(CUDA_SUCCESS);
}

#define SET1D(name, vtype, elem, async, ptds, what)                                                \
    SIM_EXPORT CUresult name(CUdeviceptr dstDevice, vtype v, size_t N CU_STREAM_PARAM_##async);    \
    SIM_EXPORT CUresult name(CUdeviceptr dstDevice, vtype v, size_t N CU_STREAM_PARAM_##async)     \
    {                                                                                              \
        return pitched_set(dstDevice, 0, v, elem, N, 1, async, CU_STREAM_ARG_##async, ptds, what); \
    }
SET1D(cuMemsetD16_v2, unsigned short, 2, 0, false, "cuMemsetD16")
SET1D(cuMemsetD16_v2_ptds, unsigned short, 2, 0, true, "cuMemsetD16")
SET1D(cuMemsetD16Async, unsigned short, 2, 1, false, "cuMemsetD16Async")
SET1D(cuMemsetD16Async_ptsz, unsigned short, 2, 1, true, "cuMemsetD16Async")

#define SET2D(name, vtype, elem, async, ptds, what)                                                \
    SIM_EXPORT CUresult name(CUdeviceptr dstDevice, size_t dstPitch, vtype v, size_t Width,        \
                             size_t Height CU_STREAM_PARAM_##async);                               \
    SIM_EXPORT CUresult name(CUdeviceptr dstDevice, size_t dstPitch, vtype v, size_t Width,        \
                             size_t Height CU_STREAM_PARAM_##async)                                \
    {                                                                                              \
        return pitched_set(dstDevice, dstPitch, v, elem, Width, Height, async,                     \
                           CU_STREAM_ARG_##async, ptds, what);                                     \
    }
SET2D(cuMemsetD2D8_v2, unsigned char, 1, 0, false, "cuMemsetD2D8")
SET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, 0, true, "cuMemsetD2D8")
SET2D(cuMemsetD2D8Async, unsigned char, 1, 1, false, "cuMemsetD2D8Async")
SET2D(cuMemsetD2D8Async_ptsz, unsigned char, 1, 1, true, "cuMemsetD2D8Async")
SET2D(cuMemsetD2D16_v2, unsigned short, 2, 0, false, "cuMemsetD2D16")
SET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, 0, true, "cuMemsetD2D16")
SET2D(cuMemsetD2D16Async, unsigned short, 2, 1, false, "cuMemsetD2D16Async")
SET2D(cuMemsetD2D16Async_ptsz, unsigned short, 2, 1, true, "cuMemsetD2D16Async")
SET2D(cuMemsetD2D32_v2, unsigned int, 4, 0, false, "cuMemsetD2D32")
SET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, 0, true, "cuMemsetD2D32")
SET2D(cuMemsetD2D32Async, unsigned int, 4, 1, false, "cuMemsetD2D32Async")
SET2D(cuMemsetD2D32Async_ptsz, unsigned int, 4, 1, true, "cuMemsetD2D32Async")
