// SPDX-License-Identifier: MIT
// The VA-stable device allocator.
//
// Tracked memory lives in one virtual range that aoshim reserves once
// (cuMemAddressReserve). It is carved into chunks (granule-aligned pieces of
// the range); each chunk is backed by one cuMemCreate handle of its own size,
// mapped with one cuMemMap and one cuMemSetAccess. Offload unmaps a chunk and
// pools its handle; reload maps a pooled handle of the same size at the same
// address. The range stays reserved, so nothing else is ever placed where an
// offloaded buffer lives, and a stray touch faults instead of reading someone
// else's data.
//
// Not thread-safe: the engine calls it under its lock.
#ifndef AO_VMM_H
#define AO_VMM_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// What a launch may do with a pointer into the reservation, per granule,
// read without a lock by the launch scan (the engine writes it, under its
// lock, before the change it describes can matter). See ao_vmm_mark for the
// order of a granule's state and owner.
enum ao_granule_state {
    AO_GS_NONE = 0,     // no chunk here: not aoshim's business
    AO_GS_RESIDENT = 1, // mapped, no copy in flight: any stream may use it
    AO_GS_STREAM = 2,   // being reloaded: safe on the chunk's safe_stream only
    AO_GS_AWAY = 3,     // being copied out, or offloaded: the engine must act
    // Resident, its copy out may have begun (early copies, engine.c): every
    // word into it goes to the engine, leftover places too (a write through
    // one would be lost to the copy).
    AO_GS_WATCHED = 4,
};

// Published once: every field is written before ao_vmm_init's release store
// of size and never after, so a reader that loaded size with acquire and
// found it nonzero may read the others plainly (the launch hooks do, before
// the scan). Only state[] and owner[] change later, and only atomically.
typedef struct ao_vmm_s {
    CUdeviceptr base; // the reservation
    size_t size;      // 0 until the reservation is ready
    size_t granule;   // cuMemGetAllocationGranularity, minimum
    unsigned shift;   // log2(granule)
    bool fine;        // serving: any idle memory backs any range (vmm.c)
    CUdevice device;
    uint8_t *state; // per granule: enum ao_granule_state
    void **owner;   // per granule: the engine's chunk
} ao_vmm_t;

extern ao_vmm_t ao_vmm;

// Reserve the range (four times the device memory, less if refused).
// CUDA_SUCCESS or the driver's error.
CUresult ao_vmm_init(void);
// Any thread, before or after ao_vmm_init: size first (acquire), and base
// only when size says it is published.
static inline bool ao_vmm_owns(CUdeviceptr p)
{
    size_t size = __atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE);
    return size && p - ao_vmm.base < size; // one subtraction and compare
}
static inline size_t ao_vmm_index(CUdeviceptr p)
{
    return (size_t)(p - ao_vmm.base) >> ao_vmm.shift;
}
// Mark [p, p+size) (granule-aligned) with a state and an owner (the engine,
// under its lock). Per granule the owner is stored before the state, the
// state with release: a reader that loads the state with acquire, then the
// owner, gets that state's owner or a later one (see ao_word_ok).
void ao_vmm_mark(CUdeviceptr p, size_t size, uint8_t state, void *owner);
static inline size_t ao_vmm_round(size_t n)
{
    return (n + ao_vmm.granule - 1) & ~(ao_vmm.granule - 1);
}
// n rounded up to whole pages (AO_PAGE, below).
#define AO_PAGE_ROUND(n) (((n) + AO_PAGE - 1) / AO_PAGE * AO_PAGE)

// Virtual space: size a multiple of the granule. CUDA_SUCCESS, or
// CUDA_ERROR_OUT_OF_MEMORY when the range is full.
CUresult ao_va_alloc(size_t size, CUdeviceptr *out);
void ao_va_free(CUdeviceptr p, size_t size);

// The physical memory behind one mapped range: the handles, in address
// order. Usually one (the same size comes back step after step); more when
// idle handles of other sizes are combined instead of creating memory
// (while serving, ao_vmm.fine, only exact or large ones: vmm.c).
#define AO_PHYS_TILES 32
// While serving (ao_vmm.fine), physical memory is made in pages of this
// size (a range's last one may be smaller): any page backs any range, so
// memory moves between the layers and the program's allocations by mapping
// pages anew, not by giving handles back and making others (mem/vmm.c). A
// multiple of the granule (2 MiB on every NVIDIA part with VMM so far).
#define AO_PAGE (32ull << 20)
typedef struct ao_phys_s {
    unsigned n;
    CUmemGenericAllocationHandle *h; // owned, with size: moves with the mapping
    size_t *size;
} ao_phys_t;

// Back [p, p+size) with physical memory: an idle handle of exactly size if
// one is pooled, else idle handles of other sizes tiled in a row, and
// cuMemCreate only for what the pool cannot cover (on out-of-memory the
// idle pool is given back and creation retried); when ao_vmm.fine, the
// handles lent for it, then idle pages that fit, largest first, and for
// what they leave under a page an idle handle of that size or smaller ones,
// and new pages of AO_PAGE (the last one smaller) for the rest, as many idle
// handles given back first, the smallest first. One cuMemMap per handle, one
// cuMemSetAccess for the range. On failure nothing stays mapped.
CUresult ao_phys_map(CUdeviceptr p, size_t size, ao_phys_t *out, bool reshape);
// One cuMemUnmap for the range (it covers whole mappings only); the handles
// go back to the pool and ph is empty.
CUresult ao_phys_unmap(CUdeviceptr p, size_t size, ao_phys_t *ph);
// ph's first n handles moved to head, a list of their own: a mapping split
// in two where a handle ends (each handle is a mapping of its own, so each
// part can be unmapped alone). False, both unchanged, when there is no
// memory for the lists.
bool ao_phys_split(ao_phys_t *ph, unsigned n, ao_phys_t *head);
// tail's handles after ph's (a range mapped right after ph's), tail empty.
// False, both unchanged, when there is no memory for the list.
bool ao_phys_join(ao_phys_t *ph, ao_phys_t *tail);
// Bytes of idle handles in the pool.
size_t ao_phys_idle(void);
// Bytes of idle pages (handles of AO_PAGE or more) and lent handles: what a
// mapping takes while serving without making memory, but for its last part
// under a page.
size_t ao_phys_idle_pages(void);
// A handle lent for the next ao_phys_map (while ao_vmm.fine), which takes it
// first: still mapped at its lender, it backs no other mapping.
void ao_phys_lend(size_t size, CUmemGenericAllocationHandle h);
// Release every idle handle (cuMemRelease). Returns the bytes given back.
size_t ao_phys_trim(void);
// Release idle handles until at most `keep` bytes stay idle. Returns the
// bytes given back.
size_t ao_phys_trim_to(size_t keep);
// The same, except one idle handle of each size in keep (a size may come
// more than once): those the next mappings will take. keep is consumed.
size_t ao_phys_trim_except(size_t *keep, size_t nkeep);

// At exit, with nothing mapped any more: every idle handle released and, if
// free_range, the reservation given back; nothing is aoshim's from then on
// (ao_vmm_owns answers false). Each call is tried twice; CUDA_SUCCESS or the
// first error that stayed (what it could not give back is left to the driver).
CUresult ao_vmm_fini(bool free_range);
// A pointer in the range ao_vmm_fini gave up: a buffer aoshim released at
// exit, which a program thread still running may free (that free has
// nothing left to do, and must not reach the real allocator).
bool ao_vmm_retired(CUdeviceptr p);

#endif // AO_VMM_H
