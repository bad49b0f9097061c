// SPDX-License-Identifier: MIT
#include "vmm.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "extent.h"
#include "cuda/real.h"
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
    if (ao_vmm.granule == 0 || (ao_vmm.granule & (ao_vmm.granule - 1)))
        return CUDA_ERROR_NOT_SUPPORTED;
    ao_vmm.shift = (unsigned)__builtin_ctzll(ao_vmm.granule);

    // Virtual space is cheap; four times the device leaves room for every
    // offloaded buffer plus fragmentation.
    size_t free_b = 0, total = 0;
    r = ao_real.cuMemGetInfo_v2(&free_b, &total);
    if (r != CUDA_SUCCESS) return r;
    // A small device still gets a range of 64 granules; and a loop that
    // tried no size has reserved nothing (a device under 32 MiB once left
    // the range empty, and nothing was tracked, without a word).
    size_t want = ao_vmm_round(total * 4);
    if (want < ao_vmm.granule * 64) want = ao_vmm.granule * 64;
    CUdeviceptr base = 0;
    r = CUDA_ERROR_OUT_OF_MEMORY;
    for (; want >= ao_vmm.granule * 64; want = ao_vmm_round(want / 2)) {
        r = ao_real.cuMemAddressReserve(&base, want, 0, 0, 0);
        ao_stat_add(AO_STAT_ADDRESS_RESERVE_CALLS, 1);
        if (r == CUDA_SUCCESS) break;
    }
    if (r != CUDA_SUCCESS) return r;
    size_t n = want >> ao_vmm.shift;
    ao_vmm.state = calloc(n, 1);
    ao_vmm.owner = calloc(n, sizeof *ao_vmm.owner);
    if (!ao_vmm.state || !ao_vmm.owner || ao_extents_give(&va_free, base, want) < 0) {
        free(ao_vmm.state);
        free(ao_vmm.owner);
        ao_real.cuMemAddressFree(base, want);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ao_vmm.base = base;
    // Published last: a launch that sees size != 0 finds the tables ready.
    __atomic_store_n(&ao_vmm.size, want, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

void ao_vmm_mark(CUdeviceptr p, size_t size, uint8_t state, void *owner)
{
    size_t first = ao_vmm_index(p), n = size >> ao_vmm.shift;
    for (size_t i = 0; i < n; i++) {
        // Relaxed: the release store of the state after it publishes it.
        __atomic_store_n(&ao_vmm.owner[first + i], owner, __ATOMIC_RELAXED);
        __atomic_store_n(&ao_vmm.state[first + i], state, __ATOMIC_RELEASE);
    }
}

// --- physical memory: idle handles by size ----------------------------------------------
// A range is backed by an idle handle of its size if one is pooled, else
// by idle handles of other sizes tiled, and a new handle for the rest: one
// cuMemMap per handle, usually one (a layer's size comes back each step).
//
// Serving the program's own allocations too (AOSHIM_SERVE, offload/serve.c)
// needs any idle memory to back any range: a layer's memory freed in the
// backward must back the gradients, and theirs the next forward's layers.
// A handle maps whole, so one of a layer's size cannot back a smaller
// range, and memory aoshim held idle did not serve: the device grew beside
// it (the replayed H200 GPT under all: 16.98 GiB with 32 MiB handles, 10.27
// with granules). So then (ao_vmm.fine) memory is made in pages of AO_PAGE,
// a range's last one smaller: a range takes the pages lent to it
// (offload/chunk.c), then idle ones that fit, then for its last part under
// a page an idle handle of that size or smaller ones, then new ones, as
// many idle handles as they make given back first, the smallest first:
// idle memory never sits beside new memory, and only a range's last part
// is tiled from handles smaller than a page (pool_take_pages).
//
// Granules backed any range too, but on the H200 cuMemSetAccess and
// cuMemUnmap cost per mapping the range covers (29 and 19.5 us a granule;
// tests/sim/drv/core.c): served, the GPT under all spent 0.94 s a step in
// such calls (replayed; 1.40 s a step on the H200 against 0.44 s beside the
// pool). Handles of each range's own size, taken apart and made anew as the
// sizes the step asked for changed, cost as much again in cuMemRelease and
// cuMemCreate (0.5 and 0.1 us a MiB besides the calls): the replayed H200
// GPT, one layer offloaded, spent 105 ms of a 224 ms step so (153 ms
// without aoshim). Pages of 32 MiB cost about 1.8 us a MiB mapped, set
// accessible and unmapped, and nothing is made or given back once the step
// has its memory: that step took 1.05x the one without aoshim (pages of 64
// MiB 1.03x, but the Hugging Face GPT-2 held 1.4 GiB more at its peak, the
// program's allocations rounded up to them; offload/serve.c).
typedef struct idle_s {
    size_t size;
    CUmemGenericAllocationHandle h;
} idle_t;

static idle_t *pool;
static size_t npool, cappool;
// Handles lent for the next mapping (ao_phys_lend), kept apart from the
// idle ones: still mapped at their lender, they may back only that mapping,
// whose stream waits for their last uses (offload/chunk.c).
static idle_t *lent;
static size_t nlent, caplent;

static size_t idle_bytes;

// A handle back to the driver. A failed release is tried again (it may have
// been passing); one that fails twice is kept for exit, which tries again,
// rather than lost (the fault matrix found a handle left at exit when a
// trim's release failed once).
static CUmemGenericAllocationHandle *stuck;
static size_t nstuck, capstuck;

// The host's time in VMM calls, for the report: on the H200 each mapping
// a page of memory moves through costs about 50 us (docs/design.md), and
// when the host has no lead over the GPU, the GPU waits that long.
static void vmm_timed(uint64_t t0)
{
    ao_stat_add(AO_STAT_VMM_HOST_NS, (int64_t)(ao_mono_ns() - t0));
}

static void release(CUmemGenericAllocationHandle h)
{
    const uint64_t t0 = ao_mono_ns();
    const bool ok =
        ao_real.cuMemRelease(h) == CUDA_SUCCESS || ao_real.cuMemRelease(h) == CUDA_SUCCESS;
    vmm_timed(t0);
    if (ok) return;
    if (nstuck == capstuck) {
        size_t cap = capstuck ? capstuck * 2 : 16;
        CUmemGenericAllocationHandle *n = realloc(stuck, cap * sizeof *n);
        if (!n) return; // the driver frees it with the context
        stuck = n;
        capstuck = cap;
    }
    stuck[nstuck++] = h;
}

static void pool_put(size_t size, CUmemGenericAllocationHandle h)
{
    if (npool == cappool) {
        size_t cap = cappool ? cappool * 2 : 64;
        idle_t *n = realloc(pool, cap * sizeof *n);
        if (!n) {
            release(h); // cannot pool it: give it back now
            return;
        }
        pool = n;
        cappool = cap;
    }
    pool[npool++] = (idle_t){size, h};
    idle_bytes += size;
}

static idle_t pool_remove(size_t i)
{
    idle_t it = pool[i];
    pool[i] = pool[--npool];
    idle_bytes -= it.size;
    return it;
}

size_t ao_phys_idle(void)
{
    return idle_bytes;
}

void ao_phys_lend(size_t size, CUmemGenericAllocationHandle h)
{
    if (nlent == caplent) {
        size_t cap = caplent ? caplent * 2 : 64;
        idle_t *n = realloc(lent, cap * sizeof *n);
        if (!n) { // cannot lend it: it goes back (freed with its lender's mapping)
            release(h);
            return;
        }
        lent = n;
        caplent = cap;
    }
    lent[nlent++] = (idle_t){size, h};
    idle_bytes += size;
}

// Lent handles the next mapping did not take (it failed): to the driver; the
// memory is freed with their lender's mapping.
static void lent_drop(void)
{
    for (; nlent; nlent--) {
        idle_bytes -= lent[nlent - 1].size;
        release(lent[nlent - 1].h);
    }
}

// The i-th idle handle, appended to ph. Returns its size.
static size_t pool_move(size_t i, ao_phys_t *ph)
{
    idle_t it = pool_remove(i);
    ph->h[ph->n] = it.h;
    ph->size[ph->n++] = it.size;
    return it.size;
}

// Idle handles of at least least bytes into ph, the largest that still fit
// in turn, until size is covered, none fits or ph holds most. Returns the
// bytes covered (got, those ph had already, and theirs).
static size_t pool_take_fitting(size_t size, size_t got, ao_phys_t *ph, unsigned most, size_t least)
{
    while (got < size && ph->n < most) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < npool; i++)
            if (pool[i].size >= least && got + pool[i].size <= size &&
                (best == SIZE_MAX || pool[i].size > pool[best].size))
                best = i;
        if (best == SIZE_MAX) break;
        got += pool_move(best, ph);
    }
    return got;
}

// While serving: idle pages (handles of AO_PAGE or more) into ph, the
// largest that still fit; then, for what is left under a page, a handle of
// exactly that size if pooled, else the largest smaller ones that fit. Only
// that last part of a range is tiled from handles smaller than a page:
// mapping costs per handle (cuMemSetAccess 29 us, cuMemUnmap 19.5 us a
// mapping on the H200), and ranges tiled from the small last pages that
// other ranges left took up to 18 mappings for 128 MiB (train_step
// --pytorch under the budget its link hides), each moved at its cost again
// every step. Returns the bytes covered (got included).
static size_t pool_take_pages(size_t size, size_t got, ao_phys_t *ph, unsigned most)
{
    got = pool_take_fitting(size, got, ph, most, AO_PAGE);
    if (got == size || size - got >= AO_PAGE) return got;
    for (size_t i = 0; i < npool; i++)
        if (pool[i].size == size - got && ph->n < most) return got + pool_move(i, ph);
    return pool_take_fitting(size, got, ph, most, 0);
}

// Idle handles back to the driver, the smallest first, until at least
// bytes went (or none is left): new memory replaces idle memory rather
// than adds to it.
static void pool_release_smallest(size_t bytes)
{
    for (size_t gone = 0; npool && gone < bytes;) {
        size_t min = 0;
        for (size_t i = 1; i < npool; i++)
            if (pool[i].size < pool[min].size) min = i;
        idle_t it = pool_remove(min);
        release(it.h);
        gone += it.size;
    }
}

size_t ao_phys_idle_pages(void)
{
    size_t bytes = 0;
    for (size_t i = 0; i < npool; i++)
        if (pool[i].size >= AO_PAGE) bytes += pool[i].size;
    for (size_t i = 0; i < nlent; i++)
        bytes += lent[i].size;
    return bytes;
}

// Choose idle handles to tile `size`: an exact one if pooled, else the
// largest that still fit, in turn (at most ph's room less one, for a
// created remainder). Returns the bytes covered.
static size_t pool_take_tiles(size_t size, ao_phys_t *ph, unsigned room)
{
    for (size_t i = 0; i < npool; i++)
        if (pool[i].size == size) return pool_move(i, ph); // ph is empty
    return pool_take_fitting(size, 0, ph, room - 1, 0);    // a slot left for a created remainder
}

size_t ao_phys_trim_to(size_t keep)
{
    size_t bytes = 0;
    lent_drop();
    while (npool && idle_bytes > keep) {
        idle_t it = pool_remove(npool - 1);
        release(it.h);
        bytes += it.size;
    }
    return bytes;
}

size_t ao_phys_trim(void)
{
    return ao_phys_trim_to(0);
}

size_t ao_phys_trim_except(size_t *keep, size_t nkeep)
{
    size_t bytes = 0;
    lent_drop();
    for (size_t i = 0; i < npool;) {
        size_t j = 0;
        while (j < nkeep && keep[j] != pool[i].size)
            j++;
        if (j < nkeep) {
            keep[j] = 0; // spent: one handle per entry
            i++;
            continue;
        }
        idle_t it = pool_remove(i); // the last moves to i: looked at next
        release(it.h);
        bytes += it.size;
    }
    return bytes;
}

static CUresult create(size_t size, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = device_prop();
    ao_stat_add(AO_STAT_MEM_CREATE_CALLS, 1);
    const uint64_t t0 = ao_mono_ns();
    CUresult r = ao_real.cuMemCreate(h, size, &prop, 0);
    vmm_timed(t0);
    return r;
}

// An empty list with room for n handles and their sizes, in one block.
static bool phys_alloc(ao_phys_t *ph, unsigned n)
{
    memset(ph, 0, sizeof *ph);
    if (!n) n = 1;
    ph->h = malloc(n * (sizeof *ph->h + sizeof *ph->size));
    if (!ph->h) return false;
    ph->size = (size_t *)(ph->h + n);
    return true;
}

CUresult ao_phys_map(CUdeviceptr p, size_t size, ao_phys_t *ph, bool reshape)
{
    // Serving (fine): up to a handle per granule; else AO_PHYS_TILES at most.
    unsigned room = ao_vmm.fine ? (unsigned)(size >> ao_vmm.shift) : AO_PHYS_TILES;
    if (!phys_alloc(ph, room)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    size_t got = 0;
    if (ao_vmm.fine) {
        // Lent handles first (each fits: chunk.c's lend), then idle pages
        // and the last part (pool_take_pages), then new pages, as many idle
        // handles as they make given back first, the smallest first.
        for (; nlent && got + lent[nlent - 1].size <= size; nlent--) {
            idle_t it = lent[nlent - 1];
            idle_bytes -= it.size;
            ph->h[ph->n] = it.h;
            ph->size[ph->n++] = it.size;
            got += it.size;
        }
        lent_drop(); // none: each fits (chunk.c's lend)
        got = pool_take_pages(size, got, ph, room);
        if (got < size) pool_release_smallest(size - got);
    } else {
        got = pool_take_tiles(size, ph, room);
        // reshape: the idle handles left are each larger than what is missing
        // (a handle maps whole: cuMemMap's offset must be 0), as for the two
        // chunks of a layer offloaded in part: the smallest goes back first, so
        // that new memory replaces idle memory rather than adds to it.
        if (reshape && got < size && npool) {
            size_t best = 0;
            for (size_t i = 1; i < npool; i++)
                if (pool[i].size < pool[best].size) best = i;
            release(pool_remove(best).h);
        }
    }
    // What the pool did not cover, made: in pages while serving (the last
    // one smaller), else one handle.
    const size_t piece = ao_vmm.fine ? AO_PAGE : size;
    while (got < size) {
        size_t want = size - got < piece ? size - got : piece;
        CUmemGenericAllocationHandle h;
        r = create(want, &h);
        if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_phys_trim()) r = create(want, &h);
        if (r != CUDA_SUCCESS) break;
        ph->h[ph->n] = h;
        ph->size[ph->n++] = want;
        got += want;
    }
    unsigned mapped = 0;
    size_t off = 0;
    const uint64_t t0 = ao_mono_ns();
    while (r == CUDA_SUCCESS && mapped < ph->n) {
        r = ao_real.cuMemMap(p + off, ph->size[mapped], 0, ph->h[mapped], 0);
        if (r == CUDA_SUCCESS) off += ph->size[mapped++];
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc acc;
        memset(&acc, 0, sizeof acc);
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = ao_vmm.device;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = ao_real.cuMemSetAccess(p, size, &acc, 1);
    }
    ao_stat_add(AO_STAT_VMM_MAPPINGS, mapped);
    if (r == CUDA_SUCCESS) {
        ao_stat_add(AO_STAT_VMM_MAPPED_BYTES, (int64_t)size);
        vmm_timed(t0);
        return CUDA_SUCCESS;
    }
    // Undo: unmap what was mapped (each handle its own mapping), pool all.
    off = 0;
    for (unsigned i = 0; i < ph->n; off += ph->size[i++]) {
        if (i < mapped) ao_real.cuMemUnmap(p + off, ph->size[i]);
        pool_put(ph->size[i], ph->h[i]);
    }
    ao_stat_add(AO_STAT_VMM_UNMAPPINGS, mapped);
    vmm_timed(t0);
    free(ph->h);
    memset(ph, 0, sizeof *ph);
    return r;
}

// n of ph's handles from the from-th on, in a list of their own.
static bool phys_slice(const ao_phys_t *ph, unsigned from, unsigned n, ao_phys_t *out)
{
    if (!phys_alloc(out, n)) return false;
    memcpy(out->h, ph->h + from, n * sizeof *out->h);
    memcpy(out->size, ph->size + from, n * sizeof *out->size);
    out->n = n;
    return true;
}

bool ao_phys_split(ao_phys_t *ph, unsigned n, ao_phys_t *head)
{
    ao_phys_t a, b;
    if (!phys_slice(ph, 0, n, &a)) return false;
    if (!phys_slice(ph, n, ph->n - n, &b)) {
        free(a.h);
        return false;
    }
    free(ph->h);
    *ph = b;
    *head = a;
    return true;
}

bool ao_phys_join(ao_phys_t *ph, ao_phys_t *tail)
{
    ao_phys_t j;
    if (!phys_alloc(&j, ph->n + tail->n)) return false;
    memcpy(j.h, ph->h, ph->n * sizeof *j.h);
    memcpy(j.h + ph->n, tail->h, tail->n * sizeof *j.h);
    memcpy(j.size, ph->size, ph->n * sizeof *j.size);
    memcpy(j.size + ph->n, tail->size, tail->n * sizeof *j.size);
    j.n = ph->n + tail->n;
    free(ph->h);
    free(tail->h);
    memset(tail, 0, sizeof *tail);
    *ph = j;
    return true;
}

CUresult ao_phys_unmap(CUdeviceptr p, size_t size, ao_phys_t *ph)
{
    const uint64_t t0 = ao_mono_ns();
    CUresult r = ao_real.cuMemUnmap(p, size);
    vmm_timed(t0);
    if (r != CUDA_SUCCESS) return r;
    ao_stat_add(AO_STAT_VMM_UNMAPPINGS, ph->n);
    for (unsigned i = 0; i < ph->n; i++)
        pool_put(ph->size[i], ph->h[i]);
    free(ph->h);
    memset(ph, 0, sizeof *ph);
    return CUDA_SUCCESS;
}

// --- exit -------------------------------------------------------------------------------
static CUdeviceptr retired_base;
static size_t retired_size;

bool ao_vmm_retired(CUdeviceptr p)
{
    size_t size = __atomic_load_n(&retired_size, __ATOMIC_ACQUIRE);
    return size && p - __atomic_load_n(&retired_base, __ATOMIC_RELAXED) < size;
}

CUresult ao_vmm_fini(bool free_range)
{
    CUresult first = CUDA_SUCCESS;
    lent_drop();
    while (npool) {
        CUmemGenericAllocationHandle h = pool_remove(npool - 1).h;
        CUresult r = ao_real.cuMemRelease(h);
        if (r != CUDA_SUCCESS) r = ao_real.cuMemRelease(h); // may have been passing
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
    }
    for (; nstuck; nstuck--) { // releases that failed twice on the way
        CUresult r = ao_real.cuMemRelease(stuck[nstuck - 1]);
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
    }
    size_t size = __atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE);
    if (!size) return first;
    // Nothing is aoshim's any more: a launch scan on another thread passes
    // through from here, and the range may be the driver's to reuse.
    __atomic_store_n(&retired_base, ao_vmm.base, __ATOMIC_RELAXED);
    __atomic_store_n(&retired_size, size, __ATOMIC_RELEASE);
    __atomic_store_n(&ao_vmm.size, 0, __ATOMIC_RELEASE);
    if (free_range) {
        CUresult r = ao_real.cuMemAddressFree(ao_vmm.base, size);
        if (r != CUDA_SUCCESS) r = ao_real.cuMemAddressFree(ao_vmm.base, size);
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
    }
    return first;
}
