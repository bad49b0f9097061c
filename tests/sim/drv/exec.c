// SPDX-License-Identifier: MIT
// Kernels, launches, copies and memsets of the simulated driver.
//
// Each operation is validated, classified (every range it touches must be
// accessible memory of the right kind, or the run stops with the fault
// diagnostic), scheduled on the virtual clock (stream.c), checked by the
// happens-before checker (hb.c), and then its effect runs at once, in program
// order, unless the simulator is in no-data mode.
#include <stdlib.h>
#include <string.h>

#include "internal.h"

// --- kernels ---------------------------------------------------------------------
// Every kernel ever created: there is no destroy call, and a program may drop
// its handle; the list keeps them reachable (leak checkers stay quiet).
static struct CUfunc_st **all_funcs;
static size_t n_funcs, cap_funcs;

static bool func_ok(CUfunction f)
{
    return f && f->magic == SIM_FUNC_MAGIC;
}

static bool int_param(const sim_kernel_desc_t *d, int p)
{
    return p >= 0 && p < d->nparams && (d->param_size[p] == 4 || d->param_size[p] == 8);
}

// Largest power of two <= min(size, 8): the natural alignment of a scalar
// parameter, and 8 for larger aggregates (structs of pointers and doubles).
static uint32_t param_align(uint32_t size)
{
    uint32_t a = size < 8 ? size : 8;
    while (a & (a - 1))
        a &= a - 1;
    return a ? a : 1;
}

SIM_EXPORT CUresult simKernelCreate(const sim_kernel_desc_t *desc, CUfunction *out)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    r = CUDA_ERROR_INVALID_VALUE;
    if (!desc || !out || !desc->name || desc->nparams < 0 || desc->nparams > SIM_MAX_PARAMS ||
        desc->naccess < 0 || desc->naccess > SIM_MAX_ACCESSES)
        goto out;
    for (int i = 0; i < desc->nparams; i++)
        if (desc->param_size[i] == 0 || desc->param_size[i] > 4096) // CUDA's 4 KiB param limit
            goto out;
    for (int i = 0; i < desc->naccess; i++) {
        const sim_access_t *a = &desc->access[i];
        // An access names a pointer parameter: anything else would make the
        // checker read garbage as an address.
        if (a->param < 0 || a->param >= desc->nparams || desc->param_size[a->param] != 8) goto out;
        if (a->mode < SIM_R || a->mode > SIM_RW) goto out;
        if (a->count_param != -1 && !int_param(desc, a->count_param)) goto out;
    }
    if (desc->flops_param != -1 && !int_param(desc, desc->flops_param)) goto out;

    struct CUfunc_st *f = calloc(1, sizeof *f);
    char *name = strdup(desc->name); // the caller's string may not outlive the kernel
    if (!f || !name) abort();
    f->desc = *desc;
    f->desc.name = name;
    uint32_t off = 0;
    for (int i = 0; i < desc->nparams; i++) {
        uint32_t a = param_align(desc->param_size[i]);
        off = (off + a - 1) & ~(a - 1);
        f->param_offset[i] = off;
        off += desc->param_size[i];
    }
    f->param_bytes = off;
    f->magic = SIM_FUNC_MAGIC;
    if (n_funcs == cap_funcs) {
        cap_funcs = cap_funcs ? cap_funcs * 2 : 64;
        all_funcs = realloc(all_funcs, cap_funcs * sizeof *all_funcs);
        if (!all_funcs) abort();
    }
    all_funcs[n_funcs++] = f;
    *out = f;
    r = CUDA_SUCCESS;
out:
    sim_leave();
    return r;
}

static CUresult param_info(CUfunction f, size_t index, size_t *off, size_t *size)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        if (!func_ok(f)) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else if (index >= (size_t)f->desc.nparams) {
            // Callers count parameters by asking until this happens.
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            if (off) *off = f->param_offset[index];
            if (size) *size = f->desc.param_size[index];
        }
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                       size_t *paramSize)
{
    return param_info(func, paramIndex, paramOffset, paramSize);
}

// In the simulator a CUkernel is the same object as a CUfunction (a kernel
// made by simKernelCreate): the context-independent handle and the
// per-context function are one thing when there is one device.
SIM_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                         size_t *paramSize)
{
    return param_info((CUfunction)(void *)kernel, paramIndex, paramOffset, paramSize);
}

static CUresult get_name(const char **name, CUfunction f)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        if (!name)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!func_ok(f))
            r = CUDA_ERROR_INVALID_HANDLE;
        else
            *name = f->desc.name;
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    return get_name(name, hfunc);
}
SIM_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    return get_name(name, (CUfunction)(void *)hfunc);
}

// --- launch -----------------------------------------------------------------------
static uint64_t read_uint(const void *p, uint32_t size)
{
    if (size == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

// Run one launch on s (not capturing): footprint and cost from the
// descriptor, schedule, classify every range (fault), race-check, count, run
// the body. Shared by cuLaunchKernel and graph replay (graph.c). Lock held.
CUresult sim_kernel_exec(sim_stream_t *s, CUfunction f, void **args, const sim_launch_t *L)
{
    const sim_kernel_desc_t *d = &f->desc;
    CUresult r;
    // Footprint and cost from the descriptor.
    uint64_t addr[SIM_MAX_ACCESSES], bytes[SIM_MAX_ACCESSES];
    for (int i = 0; i < d->naccess; i++) {
        const sim_access_t *a = &d->access[i];
        addr[i] = read_uint(args[a->param], 8);
        uint64_t count = a->count_param >= 0
                             ? read_uint(args[a->count_param], d->param_size[a->count_param])
                             : 1;
        bytes[i] = a->scale * count;
    }
    double flops = d->flops_scale;
    if (d->flops_param >= 0)
        flops *= (double)read_uint(args[d->flops_param], d->param_size[d->flops_param]);
    uint64_t cost = d->ns_fixed;
    if (flops > 0 && sim_cfg.tflops > 0)
        cost += (uint64_t)(flops / (sim_cfg.tflops * 1e3)); // flops / (TFLOP/s * 1e12) s, in ns

    sim_op_t op;
    if ((r = sim_op_begin(&op, s, SIM_ENG_COMPUTE, cost, "kernel", d->name)) != CUDA_SUCCESS)
        return r;
    for (int i = 0; i < d->naccess; i++) {
        if (!bytes[i]) continue;
        // A kernel reaches device memory and zero-copy (pinned) host memory,
        // never pageable host memory.
        sim_memkind_t k = sim_mem_classify(addr[i], bytes[i]);
        if (k != SIM_MEM_DEVICE && k != SIM_MEM_PINNED)
            sim_fault("kernel", d->name, s, addr[i], bytes[i]);
    }
    for (int i = 0; i < d->naccess; i++)
        if (bytes[i])
            sim_hb_access(&op, addr[i], bytes[i],
                          d->access[i].mode & SIM_W ? SIM_HB_WRITE : SIM_HB_READ);
    sim_st.launches++;
    if (!sim_cfg.nodata && d->fn) {
        // The SIGSEGV backstop names this kernel if its body strays outside
        // what it declared.
        sim_fault_set_current(&op);
        d->fn(args, L);
        sim_fault_set_current(NULL);
    }
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, CUstream h, bool ptds, void **kernelParams, void **extra)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if (sim_cfg.launch_ns > sim_cfg.api_ns) sim_host_advance(sim_cfg.launch_ns - sim_cfg.api_ns);
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    if (!func_ok(f)) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; i++)
        if (!grid[i] || !block[i]) goto out;
    if ((uint64_t)block[0] * block[1] * block[2] > 1024) // every current part's limit
        goto out;
    const sim_kernel_desc_t *d = &f->desc;

    // Parameters: exactly one of kernelParams and extra (cuda.h).
    void *args[SIM_MAX_PARAMS];
    if (kernelParams && extra) goto out;
    if (extra) {
        void *buf = NULL;
        size_t *sizep = NULL;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                sizep = (size_t *)extra[i + 1];
            else
                goto out;
        }
        if (!buf || !sizep || *sizep != f->param_bytes) goto out;
        for (int i = 0; i < d->nparams; i++)
            args[i] = (char *)buf + f->param_offset[i];
    } else if (kernelParams) {
        for (int i = 0; i < d->nparams; i++)
            if (!(args[i] = kernelParams[i])) goto out;
    } else if (d->nparams > 0) {
        goto out;
    }

    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    sim_graph_t *g = sim_capture_graph(s, &r);
    if (r != CUDA_SUCCESS) goto out;
    if (g) {
        // Recorded, not run: keep a packed copy of the arguments, because the
        // caller's kernelParams may point at its stack.
        sim_node_t *n = sim_graph_add(g, SIM_NODE_KERNEL, "kernel", s->id);
        n->func = f;
        memcpy(n->launch.grid, grid, sizeof n->launch.grid);
        memcpy(n->launch.block, block, sizeof n->launch.block);
        n->launch.shared_bytes = shared;
        n->launch.stream = h;
        n->argbuf = calloc(1, f->param_bytes ? f->param_bytes : 1);
        if (!n->argbuf) abort();
        for (int i = 0; i < d->nparams; i++)
            memcpy((char *)n->argbuf + f->param_offset[i], args[i], d->param_size[i]);
        goto out;
    }

    sim_launch_t L;
    memcpy(L.grid, grid, sizeof L.grid);
    memcpy(L.block, block, sizeof L.block);
    L.shared_bytes = shared;
    L.stream = h;
    if ((r = sim_kernel_exec(s, f, args, &L)) != CUDA_SUCCESS) goto out;
    r = CUDA_SUCCESS;
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams, void **extra)
{
    SIM_FAIL_POINT(cuLaunchKernel);
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, false, kernelParams, extra);
}

SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams, void **extra)
{
    SIM_FAIL_POINT(cuLaunchKernel);
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, true, kernelParams, extra);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **kernelParams, void **extra,
                          bool ptds)
{
    if (!c) {
        // Validate under the lock like every other path, so an uninitialised
        // driver still answers CUDA_ERROR_NOT_INITIALIZED first.
        CUresult r = sim_enter();
        sim_leave();
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    }
    // Launch attributes (cluster dims, priority, ...) do not change what the
    // simulator computes or orders: ignored.
    unsigned g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ},
             b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch(f, g, b, c->sharedMemBytes, c->hStream, ptds, kernelParams, extra);
}

SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                     void **kernelParams, void **extra)
{
    SIM_FAIL_POINT(cuLaunchKernelEx);
    return launch_ex(config, f, kernelParams, extra, false);
}
SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                          void **kernelParams, void **extra)
{
    SIM_FAIL_POINT(cuLaunchKernelEx);
    return launch_ex(config, f, kernelParams, extra, true);
}

// --- copies --------------------------------------------------------------------------
enum copy_dir_e { DIR_D2H, DIR_H2D, DIR_D2D, DIR_ANY };

static bool is_host(sim_memkind_t k)
{
    return k == SIM_MEM_PINNED || k == SIM_MEM_PAGEABLE;
}

static uint64_t copy_cost(uint64_t bytes, double gbps)
{
    // latency + bytes / bandwidth; GB = 1e9 bytes, so bytes / (GB/s) is ns.
    return sim_cfg.copy_latency_ns + (gbps > 0 ? (uint64_t)((double)bytes / gbps) : 0);
}

static CUresult copy(uint64_t dst, uint64_t src, uint64_t bytes, int dir, bool async, CUstream h,
                     bool ptds, const char *what)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    if (!bytes) goto out; // nothing to move; CUDA accepts it
    if (!src || !dst) {
        r = CUDA_ERROR_INVALID_VALUE; // before anything dereferences them
        goto out;
    }

    sim_memkind_t ks = sim_mem_classify(src, bytes), kd = sim_mem_classify(dst, bytes);
    // Unified cuMemcpy: the pointers say the direction. An unmapped device
    // range is a fault, whichever side it is on.
    if (dir == DIR_ANY) {
        if (ks == SIM_MEM_INACCESSIBLE) sim_fault(what, NULL, s, src, bytes);
        if (kd == SIM_MEM_INACCESSIBLE) sim_fault(what, NULL, s, dst, bytes);
        if (ks == SIM_MEM_DEVICE)
            dir = kd == SIM_MEM_DEVICE ? DIR_D2D : DIR_D2H;
        else
            dir = kd == SIM_MEM_DEVICE ? DIR_H2D : -1; // -1: host to host
    } else {
        // The device side must be accessible device memory (else a fault),
        // the host side host memory; the wrong kind on either side is the
        // caller's mistake: CUDA_ERROR_INVALID_VALUE.
        bool src_dev = dir == DIR_D2H || dir == DIR_D2D, dst_dev = dir == DIR_H2D || dir == DIR_D2D;
        if (src_dev && ks == SIM_MEM_INACCESSIBLE) sim_fault(what, NULL, s, src, bytes);
        if (dst_dev && kd == SIM_MEM_INACCESSIBLE) sim_fault(what, NULL, s, dst, bytes);
        r = CUDA_ERROR_INVALID_VALUE;
        if (src_dev ? ks != SIM_MEM_DEVICE : !is_host(ks)) goto out;
        if (dst_dev ? kd != SIM_MEM_DEVICE : !is_host(kd)) goto out;
        r = CUDA_SUCCESS;
    }

    // A synchronous copy is not stream-ordered w.r.t. a capture: forbidden
    // while one is open in a mode that prohibits unsafe calls.
    if (!async && (r = sim_capture_unsafe_call()) != CUDA_SUCCESS) goto out;

    sim_memkind_t host_kind = dir == DIR_D2H ? kd : dir == DIR_H2D ? ks : SIM_MEM_DEVICE;
    bool pageable = host_kind == SIM_MEM_PAGEABLE || dir == -1;
    int engine = dir == DIR_D2H   ? SIM_ENG_D2H
                 : dir == DIR_H2D ? SIM_ENG_H2D
                 : dir == DIR_D2D ? SIM_ENG_COMPUTE
                                  : SIM_ENG_NONE;
    double gbps = dir == DIR_D2D   ? sim_cfg.d2d_gbps
                  : pageable       ? sim_cfg.pageable_gbps
                  : dir == DIR_D2H ? sim_cfg.d2h_gbps
                                   : sim_cfg.h2d_gbps;
    uint64_t cost = dir == -1 ? 0 : copy_cost(bytes, gbps);

    if (async) {
        sim_graph_t *g = sim_capture_graph(s, &r);
        if (r != CUDA_SUCCESS) goto out;
        if (g && !pageable) {
            sim_node_t *n = sim_graph_add(g, SIM_NODE_MEMCPY, what, s->id);
            n->dst = dst;
            n->src = src;
            n->bytes = bytes;
            n->engine = engine;
            goto out;
        }
        // A capturing stream with pageable memory falls through to
        // sim_op_begin, which fails and invalidates the capture (CUDA cannot
        // capture a pageable copy either).
    }
    sim_op_t op;
    if ((r = sim_op_begin(&op, s, engine, cost, what, NULL)) != CUDA_SUCCESS) goto out;
    // Pageable host memory takes no part in the race check: the call blocks
    // the host, and no kernel or other stream may touch it.
    if (ks != SIM_MEM_PAGEABLE) sim_hb_access(&op, src, bytes, SIM_HB_READ);
    if (kd != SIM_MEM_PAGEABLE) sim_hb_access(&op, dst, bytes, SIM_HB_WRITE);
    if (!sim_cfg.nodata) {
        // A bad pageable pointer faults here: let the backstop name the copy.
        sim_fault_set_current(&op);
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
        sim_fault_set_current(NULL);
    }
    sim_st.copies++;
    // Synchronous copies return when done (except device-to-device, which
    // cuda.h's API sync notes leave asynchronous to the host). Async copies
    // from or to pageable memory are staged by real CUDA and may return early
    // only for small sizes; the simulator takes the stricter reading and
    // blocks the host until the copy is done.
    if ((!async && dir != DIR_D2D) || pageable) sim_host_wait_op(&op);
out:
    sim_leave();
    return r;
}

#define U(x) ((uint64_t)(uintptr_t)(x))
SIM_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpyDtoH);
    return copy(U(dstHost), srcDevice, ByteCount, DIR_D2H, false, NULL, false, "cuMemcpyDtoH");
}
SIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpyDtoH);
    return copy(U(dstHost), srcDevice, ByteCount, DIR_D2H, false, NULL, true, "cuMemcpyDtoH");
}
SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpyHtoD);
    return copy(dstDevice, U(srcHost), ByteCount, DIR_H2D, false, NULL, false, "cuMemcpyHtoD");
}
SIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                         size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpyHtoD);
    return copy(dstDevice, U(srcHost), ByteCount, DIR_H2D, false, NULL, true, "cuMemcpyHtoD");
}
SIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpyDtoD);
    return copy(dstDevice, srcDevice, ByteCount, DIR_D2D, false, NULL, false, "cuMemcpyDtoD");
}
SIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                         size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpyDtoD);
    return copy(dstDevice, srcDevice, ByteCount, DIR_D2D, false, NULL, true, "cuMemcpyDtoD");
}
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                         CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyDtoHAsync);
    return copy(U(dstHost), srcDevice, ByteCount, DIR_D2H, true, hStream, false,
                "cuMemcpyDtoHAsync");
}
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                              size_t ByteCount, CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyDtoHAsync);
    return copy(U(dstHost), srcDevice, ByteCount, DIR_D2H, true, hStream, true,
                "cuMemcpyDtoHAsync");
}
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                         size_t ByteCount, CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyHtoDAsync);
    return copy(dstDevice, U(srcHost), ByteCount, DIR_H2D, true, hStream, false,
                "cuMemcpyHtoDAsync");
}
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                              size_t ByteCount, CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyHtoDAsync);
    return copy(dstDevice, U(srcHost), ByteCount, DIR_H2D, true, hStream, true,
                "cuMemcpyHtoDAsync");
}
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                         size_t ByteCount, CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyDtoDAsync);
    return copy(dstDevice, srcDevice, ByteCount, DIR_D2D, true, hStream, false,
                "cuMemcpyDtoDAsync");
}
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                              size_t ByteCount, CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyDtoDAsync);
    return copy(dstDevice, srcDevice, ByteCount, DIR_D2D, true, hStream, true, "cuMemcpyDtoDAsync");
}
#undef cuMemcpy
#undef cuMemcpyAsync
SIM_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpy);
    return copy(dst, src, ByteCount, DIR_ANY, false, NULL, false, "cuMemcpy");
}
SIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
SIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_FAIL_POINT(cuMemcpy);
    return copy(dst, src, ByteCount, DIR_ANY, false, NULL, true, "cuMemcpy");
}
SIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                  CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyAsync);
    return copy(dst, src, ByteCount, DIR_ANY, true, hStream, false, "cuMemcpyAsync");
}
SIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                       CUstream hStream);
SIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                       CUstream hStream)
{
    SIM_FAIL_POINT(cuMemcpyAsync);
    return copy(dst, src, ByteCount, DIR_ANY, true, hStream, true, "cuMemcpyAsync");
}

// --- memset ------------------------------------------------------------------------------
static CUresult memset_op(uint64_t dst, unsigned value, size_t n, unsigned elem, bool async,
                          CUstream h, bool ptds, const char *what)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    if (elem == 4 && (dst & 3)) {
        r = CUDA_ERROR_INVALID_VALUE; // cuda.h: dstDevice must be 4-byte aligned
        goto out;
    }
    if (!n) goto out;
    uint64_t bytes = (uint64_t)n * elem;
    sim_memkind_t k = sim_mem_classify(dst, bytes);
    if (k == SIM_MEM_INACCESSIBLE) sim_fault(what, NULL, s, dst, bytes);
    if (k != SIM_MEM_DEVICE) {
        // Stricter than UVA CUDA, which also sets pinned host memory.
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (async) {
        sim_graph_t *g = sim_capture_graph(s, &r);
        if (r != CUDA_SUCCESS) goto out;
        if (g) {
            sim_node_t *nd = sim_graph_add(g, SIM_NODE_MEMSET, what, s->id);
            nd->dst = dst;
            nd->bytes = n;
            nd->value = value;
            nd->elem = elem;
            goto out;
        }
    }
    if (!async && (r = sim_capture_unsafe_call()) != CUDA_SUCCESS) goto out;
    uint64_t cost = sim_cfg.d2d_gbps > 0 ? (uint64_t)((double)bytes / sim_cfg.d2d_gbps) : 0;
    sim_op_t op;
    if ((r = sim_op_begin(&op, s, SIM_ENG_COMPUTE, cost, what, NULL)) != CUDA_SUCCESS) goto out;
    sim_hb_access(&op, dst, bytes, SIM_HB_WRITE);
    if (!sim_cfg.nodata) {
        if (elem == 1) {
            memset((void *)(uintptr_t)dst, (int)(value & 0xff), bytes);
        } else {
            uint32_t *p = (uint32_t *)(uintptr_t)dst;
            for (size_t i = 0; i < n; i++)
                p[i] = value;
        }
    }
    // Memsets of device memory are asynchronous to the host even through the
    // "synchronous" entry points (cuda.h API sync notes).
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_FAIL_POINT(cuMemsetD8);
    return memset_op(dstDevice, uc, N, 1, false, NULL, false, "cuMemsetD8");
}
SIM_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_FAIL_POINT(cuMemsetD8);
    return memset_op(dstDevice, uc, N, 1, false, NULL, true, "cuMemsetD8");
}
SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                    CUstream hStream)
{
    SIM_FAIL_POINT(cuMemsetD8Async);
    return memset_op(dstDevice, uc, N, 1, true, hStream, false, "cuMemsetD8Async");
}
SIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                         CUstream hStream)
{
    SIM_FAIL_POINT(cuMemsetD8Async);
    return memset_op(dstDevice, uc, N, 1, true, hStream, true, "cuMemsetD8Async");
}
SIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_FAIL_POINT(cuMemsetD32);
    return memset_op(dstDevice, ui, N, 4, false, NULL, false, "cuMemsetD32");
}
SIM_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_FAIL_POINT(cuMemsetD32);
    return memset_op(dstDevice, ui, N, 4, false, NULL, true, "cuMemsetD32");
}
SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                     CUstream hStream)
{
    SIM_FAIL_POINT(cuMemsetD32Async);
    return memset_op(dstDevice, ui, N, 4, true, hStream, false, "cuMemsetD32Async");
}
SIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                          CUstream hStream)
{
    SIM_FAIL_POINT(cuMemsetD32Async);
    return memset_op(dstDevice, ui, N, 4, true, hStream, true, "cuMemsetD32Async");
}
