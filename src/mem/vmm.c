// SPDX-License-Identifier: MIT
#include "vmm.h"

#include <stdlib.h>
#include <string.h>

#include "extent.h"
#include "hook/real.h"
#include "log.h"
#include "stats.h"

ao_vmm_t ao_vmm;

// --- virtual space -------------------------------------------------------------------
static ao_extents_t va_free;

CUresult ao_va_alloc(size_t size, CUdeviceptr *out)
{
    uint64_t lo;
    if (ao_extents_take(&va_free, size, &lo) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUdeviceptr)lo;
    return CUDA_SUCCESS;
}

void ao_va_free(CUdeviceptr p, size_t size)
{
    // Out of host memory for the list: the range is lost to reuse, never
    // handed out twice.
    static int once;
    if (ao_extents_give(&va_free, p, size) < 0)
        ao_warn_once(&once, "out of host memory tracking free device address space");
}

// --- the reservation -------------------------------------------------------------------
static CUmemAllocationProp device_prop(void)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ao_vmm.device;
    return prop;
}

CUresult ao_vmm_init(void)
{
    CUresult r = ao_real.cuCtxGetDevice(&ao_vmm.device);
    if (r != CUDA_SUCCESS) return r;
    CUmemAllocationProp prop = device_prop();
    r = ao_real.cuMemGetAllocationGranularity(&ao_vmm.granule, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return r;
    if (ao_vmm.granule == 0 || (ao_vmm.granule & (ao_vmm.granule - 1))) return CUDA_ERROR_NOT_SUPPORTED;

    // Virtual space is cheap; four times the device leaves room for every
    // offloaded buffer plus fragmentation.
    size_t free_b = 0, total = 0;
    r = ao_real.cuMemGetInfo_v2(&free_b, &total);
    if (r != CUDA_SUCCESS) return r;
    size_t want = ao_vmm_round(total * 4);
    CUdeviceptr base = 0;
    for (; want >= ao_vmm.granule * 64; want = ao_vmm_round(want / 2)) {
        r = ao_real.cuMemAddressReserve(&base, want, 0, 0, 0);
        ao_stat_add(AO_STAT_ADDRESS_RESERVE_CALLS, 1);
        if (r == CUDA_SUCCESS) break;
    }
    if (r != CUDA_SUCCESS) return r;
    if (ao_extents_give(&va_free, base, want) < 0) {
        ao_real.cuMemAddressFree(base, want);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ao_vmm.base = base;
    ao_vmm.size = want;
    return CUDA_SUCCESS;
}

// --- physical memory: idle handles by size ----------------------------------------------
typedef struct idle_s {
    size_t size;
    CUmemGenericAllocationHandle h;
} idle_t;

static idle_t *pool;
static size_t npool, cappool;

static bool pool_take(size_t size, CUmemGenericAllocationHandle *h)
{
    for (size_t i = npool; i-- > 0;)
        if (pool[i].size == size) {
            *h = pool[i].h;
            pool[i] = pool[--npool];
            return true;
        }
    return false;
}

static void pool_put(size_t size, CUmemGenericAllocationHandle h)
{
    if (npool == cappool) {
        size_t cap = cappool ? cappool * 2 : 64;
        idle_t *n = realloc(pool, cap * sizeof *n);
        if (!n) {
            ao_real.cuMemRelease(h); // cannot pool it: give it back now
            return;
        }
        pool = n;
        cappool = cap;
    }
    pool[npool++] = (idle_t){size, h};
}

bool ao_phys_pooled(size_t size)
{
    for (size_t i = 0; i < npool; i++)
        if (pool[i].size == size) return true;
    return false;
}

size_t ao_phys_trim(void)
{
    size_t bytes = 0;
    while (npool) {
        npool--;
        ao_real.cuMemRelease(pool[npool].h);
        bytes += pool[npool].size;
    }
    return bytes;
}

static CUresult create(size_t size, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = device_prop();
    ao_stat_add(AO_STAT_MEM_CREATE_CALLS, 1);
    return ao_real.cuMemCreate(h, size, &prop, 0);
}

CUresult ao_phys_map(CUdeviceptr p, size_t size, CUmemGenericAllocationHandle *out)
{
    CUmemGenericAllocationHandle h;
    CUresult r = CUDA_SUCCESS;
    if (!pool_take(size, &h)) {
        // Idle handles of other sizes are device memory too: give back as
        // much as this one adds, oldest first, so that the pool never grows
        // the device footprint by holding sizes nobody asks for any more.
        size_t freed = 0;
        while (npool && freed < size) {
            freed += pool[0].size;
            ao_real.cuMemRelease(pool[0].h);
            pool[0] = pool[--npool];
        }
        r = create(size, &h);
        if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_phys_trim()) r = create(size, &h);
        if (r != CUDA_SUCCESS) return r;
    }
    r = ao_real.cuMemMap(p, size, 0, h, 0);
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof acc);
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = ao_vmm.device;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = ao_real.cuMemSetAccess(p, size, &acc, 1);
        if (r == CUDA_SUCCESS) {
            *out = h;
            return CUDA_SUCCESS;
        }
        ao_real.cuMemUnmap(p, size);
    }
    pool_put(size, h);
    return r;
}

CUresult ao_phys_unmap(CUdeviceptr p, size_t size, CUmemGenericAllocationHandle h)
{
    CUresult r = ao_real.cuMemUnmap(p, size);
    if (r == CUDA_SUCCESS) pool_put(size, h);
    return r;
}
