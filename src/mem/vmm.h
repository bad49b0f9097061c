// SPDX-License-Identifier: MIT
// The VA-stable device allocator.
//
// Tracked buffers live in one virtual range that aoshim reserves once
// (cuMemAddressReserve). Each buffer owns a granule-aligned piece of it;
// physical memory is a set of one-granule cuMemCreate handles mapped there.
// Offload unmaps and pools the handles; reload maps pooled handles at the
// same address. The range stays reserved, so nothing else is ever placed
// where an offloaded buffer lives, and a stray touch faults instead of
// reading someone else's data.
//
// Not thread-safe: the engine calls it under its lock.
#ifndef AO_VMM_H
#define AO_VMM_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ao_vmm_s {
    CUdeviceptr base;      // the reservation
    size_t size;
    size_t granule;        // cuMemGetAllocationGranularity, minimum
    unsigned granule_shift;
    CUdevice device;
    CUmemGenericAllocationHandle *handle_at; // per granule of the reservation, 0 if unmapped
    void **owner_at;                         // per granule: the buffer there (engine's)
    // idle physical handles, ready to map
    CUmemGenericAllocationHandle *pool;
    size_t pool_len, pool_cap;
    size_t handles_total; // created and not released
} ao_vmm_t;

extern ao_vmm_t ao_vmm;

// Reserve the range (size: at least 4x device memory). 0 or a CUresult.
int ao_vmm_init(void);
static inline bool ao_vmm_owns(CUdeviceptr p)
{
    return p - ao_vmm.base < ao_vmm.size; // one subtraction and compare
}
static inline size_t ao_vmm_round(size_t n)
{
    return (n + ao_vmm.granule - 1) & ~(ao_vmm.granule - 1);
}
static inline size_t ao_vmm_index(CUdeviceptr p)
{
    return (size_t)(p - ao_vmm.base) >> ao_vmm.granule_shift;
}

// Virtual space: size a multiple of the granule. 0, or CUDA_ERROR_OUT_OF_MEMORY.
int ao_va_alloc(size_t size, CUdeviceptr *out);
void ao_va_free(CUdeviceptr p, size_t size);

// Back [p, p+size) with physical memory: pooled handles first, cuMemCreate
// for the rest, one cuMemMap per granule, one cuMemSetAccess for the range.
// On failure nothing stays mapped and the CUresult is returned.
int ao_phys_map(CUdeviceptr p, size_t size);
// One cuMemUnmap for the range; its handles go back to the pool.
int ao_phys_unmap(CUdeviceptr p, size_t size);
// Release every pooled handle (cuMemRelease). Returns the bytes given back.
size_t ao_phys_trim(void);

#endif // AO_VMM_H
