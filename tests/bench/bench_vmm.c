// SPDX-License-Identifier: MIT
// What the driver's virtual-memory calls cost, per call, made as aoshim makes
// them (src/mem/vmm.c): a range of SIZE backed granule by granule (one
// cuMemCreate and one cuMemMap per granule, as serving does: AOSHIM_SERVE)
// against one handle for the whole range (a layer's chunk otherwise), one
// cuMemSetAccess for the range, and cuMemUnmap of the granules' range in one
// call and granule by granule. It also says whether the driver unmaps a
// range made of several mappings in one call: aoshim does, and the simulated
// GPU accepts it, while cuda.h says only that the range must be "the entire
// contiguous address range that was mapped". Then the same range in pages
// of 32 MiB, as aoshim makes memory while serving (AO_PAGE, src/mem/vmm.h),
// and what the event calls aoshim makes around every served allocation
// cost (cuEventRecord, cuEventQuery of a completed event, cuStreamWaitEvent):
// the simulator charges 100 ns a call for them (tests/sim/drv/core.c,
// api_ns), a figure no GPU has given yet.
//
// On the simulated GPU the times are the simulator's own CPU time, not the
// costs it models (tests/sim/drv/core.c): the figures mean something on a
// real driver, where scripts/gpu-check builds and runs this file. The driver
// is opened at run time (dlopen, as libaoshim.so does): no link to libcuda.
//
//   bench_vmm [MiB]    (256 by default; the best of 3 rounds)
#define BENCH_NAME "bench_vmm"
#include "bench_driver.h"
#include <stdint.h>
#include <string.h>

FN(p_cuMemGetAllocationGranularity, size_t *, const CUmemAllocationProp *,
   CUmemAllocationGranularity_flags);
FN(p_cuMemAddressFree, CUdeviceptr, size_t);
FN(p_cuStreamDestroy, CUstream);
FN(p_cuEventCreate, CUevent *, unsigned);
FN(p_cuEventDestroy, CUevent);
FN(p_cuEventRecord, CUevent, CUstream);
FN(p_cuEventQuery, CUevent);
FN(p_cuStreamWaitEvent, CUstream, CUevent, unsigned);

static double min2(double a, double b)
{
    return a < b ? a : b;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    if (!mib) {
        fprintf(stderr, "bench_vmm: the size is a number of MiB above 0\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    void *lib = bench_driver_open(&dev, &ctx);
    *(void **)&p_cuMemGetAllocationGranularity = sym(lib, "cuMemGetAllocationGranularity");
    *(void **)&p_cuMemAddressFree = sym(lib, "cuMemAddressFree");
    *(void **)&p_cuStreamDestroy = sym(lib, "cuStreamDestroy_v2");
    *(void **)&p_cuEventCreate = sym(lib, "cuEventCreate");
    *(void **)&p_cuEventDestroy = sym(lib, "cuEventDestroy_v2");
    *(void **)&p_cuEventRecord = sym(lib, "cuEventRecord");
    *(void **)&p_cuEventQuery = sym(lib, "cuEventQuery");
    *(void **)&p_cuStreamWaitEvent = sym(lib, "cuStreamWaitEvent");
    CUmemAllocationProp prop = bench_prop(dev);
    size_t g = 0;
    CHECK(p_cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    const size_t size = (mib << 20) / g * g, n = size / g;
    if (!n) {
        fprintf(stderr, "bench_vmm: %zu MiB is less than a granule (%zu bytes)\n", mib, g);
        return 2;
    }
    CUmemAccessDesc acc = bench_rw(dev);
    CUdeviceptr va;
    CHECK(p_cuMemAddressReserve(&va, size, 0, 0, 0));
    CUmemGenericAllocationHandle *h = malloc(n * sizeof *h);
    if (!h) return 1;

    double create = 1e30, map = 1e30, access = 1e30, unmap_range = 1e30, unmap_each = 1e30,
           release = 1e30, create1 = 1e30, map1 = 1e30, access1 = 1e30, unmap1 = 1e30,
           release1 = 1e30;
    int range_ok = 1;
    for (int round = 0; round < 3; round++) {
        // Granule by granule (serving).
        double t = now_us();
        for (size_t i = 0; i < n; i++)
            CHECK(p_cuMemCreate(&h[i], g, &prop, 0));
        create = min2(create, (now_us() - t) / (double)n);
        for (int pass = 0; pass < 2; pass++) {
            t = now_us();
            for (size_t i = 0; i < n; i++)
                CHECK(p_cuMemMap(va + i * g, g, 0, h[i], 0));
            map = min2(map, (now_us() - t) / (double)n);
            t = now_us();
            CHECK(p_cuMemSetAccess(va, size, &acc, 1));
            access = min2(access, now_us() - t);
            if (pass == 0) { // the granules' range in one call, if the driver takes it
                t = now_us();
                CUresult r = p_cuMemUnmap(va, size);
                double dt = now_us() - t;
                if (r == CUDA_SUCCESS) {
                    unmap_range = min2(unmap_range, dt);
                    continue;
                }
                range_ok = 0;
            }
            t = now_us();
            for (size_t i = 0; i < n; i++)
                CHECK(p_cuMemUnmap(va + i * g, g));
            unmap_each = min2(unmap_each, (now_us() - t) / (double)n);
        }
        t = now_us();
        for (size_t i = 0; i < n; i++)
            CHECK(p_cuMemRelease(h[i]));
        release = min2(release, (now_us() - t) / (double)n);

        // One handle for the range (a layer's chunk beside the pool).
        CUmemGenericAllocationHandle one;
        t = now_us();
        CHECK(p_cuMemCreate(&one, size, &prop, 0));
        create1 = min2(create1, now_us() - t);
        t = now_us();
        CHECK(p_cuMemMap(va, size, 0, one, 0));
        map1 = min2(map1, now_us() - t);
        t = now_us();
        CHECK(p_cuMemSetAccess(va, size, &acc, 1));
        access1 = min2(access1, now_us() - t);
        t = now_us();
        CHECK(p_cuMemUnmap(va, size));
        unmap1 = min2(unmap1, now_us() - t);
        t = now_us();
        CHECK(p_cuMemRelease(one));
        release1 = min2(release1, now_us() - t);
    }
    // Pages (serving since 2026-11-28): the range in handles of 32 MiB.
    size_t page = (size_t)32 << 20;
    page = page < size ? page / g * g : size;
    const size_t np = size / page, psize = np * page;
    double pcreate = 1e30, pmap = 1e30, paccess = 1e30, punmap = 1e30, prelease = 1e30;
    for (int round = 0; round < 3; round++) {
        double t = now_us();
        for (size_t i = 0; i < np; i++)
            CHECK(p_cuMemCreate(&h[i], page, &prop, 0));
        pcreate = min2(pcreate, (now_us() - t) / (double)np);
        t = now_us();
        for (size_t i = 0; i < np; i++)
            CHECK(p_cuMemMap(va + i * page, page, 0, h[i], 0));
        pmap = min2(pmap, (now_us() - t) / (double)np);
        t = now_us();
        CHECK(p_cuMemSetAccess(va, psize, &acc, 1));
        paccess = min2(paccess, now_us() - t);
        t = now_us();
        if (range_ok) {
            CHECK(p_cuMemUnmap(va, psize));
        } else {
            for (size_t i = 0; i < np; i++)
                CHECK(p_cuMemUnmap(va + i * page, page));
        }
        punmap = min2(punmap, now_us() - t);
        t = now_us();
        for (size_t i = 0; i < np; i++)
            CHECK(p_cuMemRelease(h[i]));
        prelease = min2(prelease, (now_us() - t) / (double)np);
    }
    CHECK(p_cuMemAddressFree(va, size));
    free(h);

    // The event calls, each timed over 1000 calls, the best of 3 rounds.
    CUstream st;
    CUevent ev;
    CHECK(p_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    double record = 1e30, query = 1e30, wait = 1e30;
    enum { CALLS = 1000 };
    for (int round = 0; round < 3; round++) {
        double t = now_us();
        for (int i = 0; i < CALLS; i++)
            CHECK(p_cuEventRecord(ev, st));
        record = min2(record, (now_us() - t) / CALLS);
        CHECK(p_cuStreamSynchronize(st));
        t = now_us();
        for (int i = 0; i < CALLS; i++)
            CHECK(p_cuEventQuery(ev));
        query = min2(query, (now_us() - t) / CALLS);
        t = now_us();
        for (int i = 0; i < CALLS; i++)
            CHECK(p_cuStreamWaitEvent(st, ev, 0));
        wait = min2(wait, (now_us() - t) / CALLS);
        CHECK(p_cuStreamSynchronize(st));
    }
    CHECK(p_cuEventDestroy(ev));
    CHECK(p_cuStreamDestroy(st));
    // A range of n granules mapped, made accessible and unmapped, served
    // against one handle: what serving adds per mapping of that size.
    double served = n * map + access + (range_ok ? unmap_range : n * unmap_each);
    double whole = map1 + access1 + unmap1;
    printf("bench_vmm_granule_bytes=%zu\nbench_vmm_range_bytes=%zu\n", g, size);
    printf("bench_vmm_create_us_per_granule=%.2f\nbench_vmm_create_us_one_handle=%.2f\n", create,
           create1);
    printf("bench_vmm_map_us_per_granule=%.2f\nbench_vmm_map_us_one_handle=%.2f\n", map, map1);
    printf("bench_vmm_set_access_us_granules=%.2f\nbench_vmm_set_access_us_one_handle=%.2f\n",
           access, access1);
    printf("bench_vmm_unmap_range_in_one_call=%d\n", range_ok);
    if (range_ok) printf("bench_vmm_unmap_us_range=%.2f\n", unmap_range);
    printf("bench_vmm_unmap_us_per_granule=%.2f\nbench_vmm_unmap_us_one_handle=%.2f\n", unmap_each,
           unmap1);
    printf("bench_vmm_release_us_per_granule=%.2f\nbench_vmm_release_us_one_handle=%.2f\n", release,
           release1);
    printf("bench_vmm_remap_us_granules=%.2f\nbench_vmm_remap_us_one_handle=%.2f\n", served, whole);
    printf("bench_vmm_remap_granules_over_one_handle=%.2f\n", whole > 0 ? served / whole : 0.0);
    printf("bench_vmm_page_bytes=%zu\nbench_vmm_pages=%zu\n", page, np);
    printf("bench_vmm_create_us_per_page=%.2f\nbench_vmm_map_us_per_page=%.2f\n", pcreate, pmap);
    printf("bench_vmm_set_access_us_pages=%.2f\nbench_vmm_unmap_us_pages=%.2f\n", paccess, punmap);
    printf("bench_vmm_release_us_per_page=%.2f\n", prelease);
    printf("bench_vmm_remap_us_pages=%.2f\n", np * pmap + paccess + punmap);
    printf("bench_vmm_event_record_us=%.3f\nbench_vmm_event_query_us=%.3f\n", record, query);
    printf("bench_vmm_stream_wait_event_us=%.3f\n", wait);
    return 0;
}
