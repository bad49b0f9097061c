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

int ao_va_alloc(size_t size, CUdeviceptr *out)
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

// --- the reservation -------------------------------------------------------------
static CUmemAllocationProp device_prop(void)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ao_vmm.device;
    return prop;
}

int ao_vmm_init(void)
{
    CUresult r = ao_real.cuCtxGetDevice(&ao_vmm.device);
    if (r != CUDA_SUCCESS) return r;
    CUmemAllocationProp prop = device_prop();
    r = ao_real.cuMemGetAllocationGranularity(&ao_vmm.granule, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return r;
    if (ao_vmm.granule == 0 || (ao_vmm.granule & (ao_vmm.granule - 1))) return CUDA_ERROR_NOT_SUPPORTED;
    ao_vmm.granule_shift = (unsigned)__builtin_ctzll(ao_vmm.granule);

    // Virtual space is cheap; four times the device leaves room for every
    // offloaded buffer plus fragmentation.
    size_t free_b = 0, total = 0;
    r = ao_real.cuMemGetInfo_v2(&free_b, &total);
    if (r != CUDA_SUCCESS) return r;
    size_t want = ao_vmm_round(total * 4);
    CUdeviceptr base = 0;
    for (; want >= ao_vmm.granule * 64; want = ao_vmm_round(want / 2)) {
        r = ao_real.cuMemAddressReserve(&base, want, 0, 0, 0);
        if (r == CUDA_SUCCESS) break;
    }
    if (r != CUDA_SUCCESS) return r;
    ao_stat_add(AO_STAT_ADDRESS_RESERVE_CALLS, 1);
    size_t n = want >> ao_vmm.granule_shift;
    ao_vmm.handle_at = calloc(n, sizeof *ao_vmm.handle_at);
    ao_vmm.owner_at = calloc(n, sizeof *ao_vmm.owner_at);
    if (!ao_vmm.handle_at || !ao_vmm.owner_at || ao_extents_give(&va_free, base, want) < 0) {
        free(ao_vmm.handle_at);
        free(ao_vmm.owner_at);
        ao_real.cuMemAddressFree(base, want);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ao_vmm.base = base;
    ao_vmm.size = want;
    return CUDA_SUCCESS;
}

// --- physical memory ------------------------------------------------------------
static int pool_push(CUmemGenericAllocationHandle h)
{
    if (ao_vmm.pool_len == ao_vmm.pool_cap) {
        size_t cap = ao_vmm.pool_cap ? ao_vmm.pool_cap * 2 : 256;
        CUmemGenericAllocationHandle *n = realloc(ao_vmm.pool, cap * sizeof *n);
        if (!n) return -1;
        ao_vmm.pool = n;
        ao_vmm.pool_cap = cap;
    }
    ao_vmm.pool[ao_vmm.pool_len++] = h;
    return 0;
}

static void handle_drop(CUmemGenericAllocationHandle h)
{
    if (pool_push(h) < 0) {
        ao_real.cuMemRelease(h);
        ao_vmm.handles_total--;
    }
}

static int handle_get(CUmemGenericAllocationHandle *h)
{
    if (ao_vmm.pool_len) {
        *h = ao_vmm.pool[--ao_vmm.pool_len];
        return CUDA_SUCCESS;
    }
    CUmemAllocationProp prop = device_prop();
    CUresult r = ao_real.cuMemCreate(h, ao_vmm.granule, &prop, 0);
    ao_stat_add(AO_STAT_MEM_CREATE_CALLS, 1);
    if (r == CUDA_SUCCESS) ao_vmm.handles_total++;
    return r;
}

int ao_phys_map(CUdeviceptr p, size_t size)
{
    size_t first = ao_vmm_index(p), n = size >> ao_vmm.granule_shift, i;
    CUresult r = CUDA_SUCCESS;
    for (i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        r = handle_get(&h);
        if (r != CUDA_SUCCESS) break;
        r = ao_real.cuMemMap(p + (i << ao_vmm.granule_shift), ao_vmm.granule, 0, h, 0);
        if (r != CUDA_SUCCESS) {
            handle_drop(h);
            break;
        }
        ao_vmm.handle_at[first + i] = h;
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof acc);
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = ao_vmm.device;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = ao_real.cuMemSetAccess(p, size, &acc, 1);
        if (r == CUDA_SUCCESS) return CUDA_SUCCESS;
    }
    // Undo what was mapped, one granule at a time (each was its own mapping).
    while (i-- > 0) {
        ao_real.cuMemUnmap(p + (i << ao_vmm.granule_shift), ao_vmm.granule);
        handle_drop(ao_vmm.handle_at[first + i]);
        ao_vmm.handle_at[first + i] = 0;
    }
    return r;
}

int ao_phys_unmap(CUdeviceptr p, size_t size)
{
    // One call for the whole range: it covers whole mappings only, which is
    // what cuMemUnmap requires (no sub-range of a mapping).
    CUresult r = ao_real.cuMemUnmap(p, size);
    if (r != CUDA_SUCCESS) return r;
    size_t first = ao_vmm_index(p), n = size >> ao_vmm.granule_shift;
    for (size_t i = 0; i < n; i++) {
        handle_drop(ao_vmm.handle_at[first + i]);
        ao_vmm.handle_at[first + i] = 0;
    }
    return CUDA_SUCCESS;
}

size_t ao_phys_trim(void)
{
    size_t n = ao_vmm.pool_len;
    while (ao_vmm.pool_len) {
        ao_real.cuMemRelease(ao_vmm.pool[--ao_vmm.pool_len]);
        ao_vmm.handles_total--;
    }
    return n * ao_vmm.granule;
}
