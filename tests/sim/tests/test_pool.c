// SPDX-License-Identifier: MIT
// The memory pool as the driver runs it: freed memory stays reserved and
// counts in cuMemGetInfo, a synchronisation releases what is above the
// release threshold, cuMemPoolTrimTo releases at once, allocations reuse the
// reserve first (in 2 MiB chunks), an allocation that does not fit releases
// the reserve before failing, and the attributes and statistics agree.
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "simgpu.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static CUcontext ctx;
static CUmemoryPool pool;
static CUstream s, s2;

// Criterion runs each test in its own process: the environment set here is
// what cuInit reads.
static void setup(void)
{
    setenv("SIM_CAPACITY", "1G", 1);
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    cr_assert_eq(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
}

static sim_stats_t stats(void)
{
    sim_stats_t st;
    cr_assert_eq(simGetStats(&st), CUDA_SUCCESS);
    return st;
}

// cuMemGetInfo's view: total - free.
static uint64_t in_use(void)
{
    size_t fr = 0, tot = 0;
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(tot, GiB);
    return tot - fr;
}

static cuuint64_t attr(CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    cr_assert_eq(cuMemPoolGetAttribute(pool, a, &v), CUDA_SUCCESS);
    return v;
}
#define RESERVED() attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
#define USED()     attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)

static void threshold(cuuint64_t v)
{
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v), CUDA_SUCCESS);
}

static CUdeviceptr alloc_on(CUstream st, size_t n)
{
    CUdeviceptr p = 0;
    cr_assert_eq(cuMemAllocAsync(&p, n, st), CUDA_SUCCESS, "cuMemAllocAsync(%zu)", n);
    return p;
}

// --- freed memory stays reserved ------------------------------------------------------------
Test(pool, freed_memory_stays_reserved_and_counts, .init = setup)
{
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0, "cuda.h: default 0");
    CUdeviceptr a = alloc_on(s, 3 * MiB);
    cr_assert_eq(in_use(), 4 * MiB, "the reserve, not the 3 MiB asked for");
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(USED(), 3 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 4 * MiB, "freed to the pool, not to the device");
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(USED(), 0);
    sim_stats_t st = stats();
    cr_assert_eq(st.current_device_bytes, 4 * MiB);
    cr_assert_eq(st.pool_reserved_bytes, 4 * MiB);
    // It counts against capacity: the rest of the device is all a plain
    // allocation can have (cuMemAlloc does not trim pools).
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, GiB - 4 * MiB + 4096), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 0, "the sync released it (threshold 0)");
    cr_assert_eq(RESERVED(), 0);
    cr_assert_eq(stats().pool_reserved_bytes, 0);
    cr_assert_eq(cuMemAlloc(&p, GiB - 4 * MiB + 4096), CUDA_SUCCESS);
}

// cuMemFree of pool memory gives it to the pool too (no synchronisation).
Test(pool, cumemfree_returns_pool_memory_to_the_pool, .init = setup)
{
    CUdeviceptr a = alloc_on(s, 1 * MiB);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree(a), CUDA_SUCCESS);
    cr_assert_eq(USED(), 0);
    cr_assert_eq(RESERVED(), 2 * MiB, "cuMemFree is not a synchronisation of the pool");
    cr_assert_eq(in_use(), 2 * MiB);
    cr_assert_eq(alloc_on(s, 1 * MiB), a, "reused by work the thread enqueues next");
    cr_assert_eq(stats().races, 0);
}

// cuMemFreeAsync of cuMemAlloc memory: the device gets it back once the host
// has seen the free, not when it is enqueued.
Test(pool, async_free_of_plain_memory_counts_until_seen, .init = setup)
{
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 8 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(p, s), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 8 * MiB);
    cr_assert_eq(RESERVED(), 0, "not the pool's");
    cr_assert_eq(cuStreamSynchronize(s2), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 8 * MiB, "another stream's sync did not see the free");
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 0);
}

// --- release at a synchronisation -----------------------------------------------------------
Test(pool, stream_synchronize_releases, .init = setup)
{
    CUdeviceptr a = alloc_on(s, 6 * MiB);
    cr_assert_eq(cuMemsetD8Async(a, 1, 6 * MiB, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    // Queries are not synchronisations: the reserve stays even once the
    // query has seen the stream done.
    for (int i = 0; i < 1000000 && cuStreamQuery(s) == CUDA_ERROR_NOT_READY; i++)
        ; // each call advances the host clock
    cr_assert_eq(cuStreamQuery(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 6 * MiB, "a query releases nothing");
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0);
    cr_assert_eq(in_use(), 0);
}

Test(pool, event_synchronize_releases, .init = setup)
{
    CUevent e;
    cr_assert_eq(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    CUdeviceptr a = alloc_on(s, 2 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuEventRecord(e, s), CUDA_SUCCESS);
    CUdeviceptr b = alloc_on(s, 2 * MiB); // a's range again, now live
    cr_assert_eq(b, a);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    // The first chunk's range again and a second chunk after it, freed
    // after the record.
    CUdeviceptr c = alloc_on(s, 4 * MiB);
    cr_assert_eq(c, a);
    cr_assert_eq(cuMemFreeAsync(c, s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(cuEventSynchronize(e), CUDA_SUCCESS);
    // Only what the event covers was seen complete: b's free and c's came
    // after the record, so both chunks stay.
    cr_assert_eq(RESERVED(), 4 * MiB, "frees after the record are not seen by its sync");
    cr_assert_eq(cuEventRecord(e, s), CUDA_SUCCESS);
    cr_assert_eq(cuEventSynchronize(e), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0);
}

Test(pool, context_synchronize_releases, .init = setup)
{
    CUdeviceptr a = alloc_on(s, 2 * MiB), b = alloc_on(s2, 2 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(b, s2), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0, "the device sync saw both streams' frees");
}

// The stricter reading of cuMemPoolTrimTo's note: a free the host has not
// seen complete keeps its chunk, whichever stream was synchronised.
Test(pool, sync_releases_only_frees_the_host_saw, .init = setup)
{
    CUdeviceptr a = alloc_on(s, 2 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s2), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 2 * MiB, "s's free was not waited for");
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0);
}

// A live block keeps its chunk; the free chunks go.
Test(pool, sync_keeps_chunks_with_live_blocks, .init = setup)
{
    CUdeviceptr keep = alloc_on(s, 1 * MiB);
    CUdeviceptr gone = alloc_on(s, 1 * MiB); // same chunk as keep
    CUdeviceptr big = alloc_on(s, 8 * MiB);
    cr_assert_eq(RESERVED(), 10 * MiB);
    cr_assert_eq(cuMemFreeAsync(gone, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(big, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 2 * MiB, "the chunk holding keep stays, whole");
    cr_assert_eq(USED(), 1 * MiB);
    cr_assert_eq(in_use(), 2 * MiB);
    cr_assert_eq(cuMemFreeAsync(keep, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0);
}

// The pool keeps at least its threshold, releasing whole chunks above it.
Test(pool, sync_keeps_the_release_threshold, .init = setup)
{
    threshold(6 * MiB);
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++)
        p[i] = alloc_on(s, 4 * MiB);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cuMemFreeAsync(p[i], s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    // 12 -> 8 MiB; one more chunk would leave 4 MiB, under the threshold.
    cr_assert_eq(RESERVED(), 8 * MiB);
    cr_assert_eq(in_use(), 8 * MiB);
    threshold(8 * MiB);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 8 * MiB, "not above the threshold: nothing to release");
}

// PyTorch's backend:cudaMallocAsync sets UINT64_MAX: the pool keeps its
// high-water mark through every synchronisation.
Test(pool, uint64_max_threshold_keeps_the_high_water_mark, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr a = alloc_on(s, 100 * MiB), b = alloc_on(s, 50 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 150 * MiB);
    cr_assert_eq(USED(), 0);
    cr_assert_eq(in_use(), 150 * MiB);
    // The next step reuses it without growing.
    CUdeviceptr c = alloc_on(s2, 100 * MiB);
    cr_assert_eq(c, a, "the host saw the free: reusable from any stream");
    cr_assert_eq(RESERVED(), 150 * MiB);
}

// --- cuMemPoolTrimTo ------------------------------------------------------------------------
Test(pool, trim_to_releases_at_once, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++)
        p[i] = alloc_on(s, 4 * MiB);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cuMemFreeAsync(p[i], s), CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 12 * MiB, "the frees were not seen complete: outstanding");
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 12 * MiB, "threshold UINT64_MAX: the sync kept it");
    cr_assert_eq(cuMemPoolTrimTo(pool, 5 * MiB), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 8 * MiB, "at least 5 MiB kept, in whole chunks");
    cr_assert_eq(cuMemPoolTrimTo(pool, 100 * MiB), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 8 * MiB, "less reserved than to keep: a no-op");
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0);
    cr_assert_eq(in_use(), 0);
    cr_assert_eq(cuMemPoolTrimTo((CUmemoryPool)&ctx, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, trim_to_keeps_chunks_with_live_blocks, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr live = alloc_on(s, 3 * MiB), dead = alloc_on(s, 2 * MiB);
    cr_assert_eq(cuMemFreeAsync(dead, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 4 * MiB, "the live block's chunk");
    cr_assert_eq(USED(), 3 * MiB);
    (void)live;
}

// --- reuse and granularity ------------------------------------------------------------------
Test(pool, reserve_grows_in_2mib_chunks, .init = setup)
{
    CUdeviceptr a = alloc_on(s, 1);
    cr_assert_eq(RESERVED(), 2 * MiB);
    cr_assert_eq(USED(), 4096, "blocks are page-rounded");
    CUdeviceptr b = alloc_on(s, 4096);
    cr_assert_eq(b, a + 4096, "small blocks share the chunk");
    cr_assert_eq(RESERVED(), 2 * MiB);
    CUdeviceptr c = alloc_on(s, 2 * MiB + 1);
    cr_assert_eq(c, a + 8192, "the block takes the free tail of the reserve");
    cr_assert_eq(RESERVED(), 4 * MiB, "and the reserve grows at its end by what the tail lacked");
    alloc_on(s, 2 * MiB - 12288);
    cr_assert_eq(RESERVED(), 4 * MiB, "the rest of the second chunk");
    alloc_on(s, 1);
    cr_assert_eq(RESERVED(), 6 * MiB, "full: a third chunk");
    cr_assert_eq(USED(), 4 * MiB + 4096);
    cr_assert_eq(stats().current_device_bytes, 6 * MiB);
}

// The tail the reserve grows from is only what the allocating stream may
// reuse: fresh space is anyone's, a freed piece only the stream ordered
// after its free.
Test(pool, reserve_grows_at_its_end_over_the_tail_the_stream_may_reuse, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr a = alloc_on(s, 1 * MiB), b = alloc_on(s, 512 * 1024);
    cr_assert_eq(b, a + 1 * MiB);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    // s2 is not ordered after that free: the tail it may use is the fresh
    // half MiB at the chunk's end.
    CUdeviceptr c = alloc_on(s2, 2 * MiB);
    cr_assert_eq(c, a + 1536 * 1024, "the fresh end of the first chunk, then the new one");
    cr_assert_eq(RESERVED(), 4 * MiB, "grown by 2 MiB, not by a chunk for the whole block");
    cr_assert_eq(cuMemFreeAsync(c, s2), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s2), CUDA_SUCCESS);
    // s ordered after both frees (the host saw s2's, and s's is its own):
    // the freed piece and the block after it serve one block.
    CUdeviceptr d = alloc_on(s, 2 * MiB + 512 * 1024);
    cr_assert_eq(d, a + 1 * MiB);
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(stats().races, 0);
}

Test(pool, allocation_reuses_the_reserve_first, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr a = alloc_on(s, 1 * MiB), b = alloc_on(s, 1 * MiB);
    cr_assert_eq(b, a + 1 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    // Two adjacent frees serve one block spanning both, on the same stream.
    CUdeviceptr c = alloc_on(s, 2 * MiB);
    cr_assert_eq(c, a);
    cr_assert_eq(RESERVED(), 2 * MiB, "served from the reserve, no growth");
    cr_assert_eq(cuMemFreeAsync(c, s), CUDA_SUCCESS);
    // Another stream not ordered after the free: a new chunk, never c's range.
    CUdeviceptr d = alloc_on(s2, 1 * MiB);
    cr_assert_neq(d, c);
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(stats().races, 0);
}

// The pool's address space is one range: a block may span chunks whose
// addresses meet, and keeps every chunk it lies in.
Test(pool, allocation_spans_adjacent_chunks, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr a = alloc_on(s, 2 * MiB), b = alloc_on(s, 2 * MiB);
    cr_assert_eq(b, a + 2 * MiB, "two chunks, side by side");
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    CUdeviceptr c = alloc_on(s, 3 * MiB);
    cr_assert_eq(c, a, "served across both chunks");
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 4 * MiB, "the block holds both chunks");
    cr_assert_eq(cuMemFreeAsync(c, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 0);
    cr_assert_eq(USED(), 0);
}

// --- out of memory --------------------------------------------------------------------------
Test(pool, allocation_that_does_not_fit_releases_the_reserve_first, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr a = alloc_on(s, 600 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 600 * MiB);
    // 600 + 700 MiB > 1 GiB: the unused 600 MiB chunk goes first.
    CUdeviceptr b = alloc_on(s, 700 * MiB);
    cr_assert_eq(RESERVED(), 700 * MiB);
    cr_assert_eq(in_use(), 700 * MiB);
    cr_assert_eq(stats().peak_device_bytes, 700 * MiB, "never both at once");
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    // Not seen complete by the host: outstanding, so it cannot make room.
    CUdeviceptr c;
    cr_assert_eq(cuMemAllocAsync(&c, 400 * MiB, s2), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(RESERVED(), 700 * MiB, "a failed allocation adds nothing");
    // Once the host has seen it, the free 700 MiB serve the allocation.
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&c, 400 * MiB, s2), CUDA_SUCCESS);
    cr_assert_eq(c, b);
    cr_assert_eq(RESERVED(), 700 * MiB);
    // Plain allocations do not trim pools.
    cr_assert_eq(cuMemFreeAsync(c, s2), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s2), CUDA_SUCCESS);
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 700 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAlloc(&p, 700 * MiB), CUDA_SUCCESS);
}

Test(pool, failed_allocation_leaves_nothing, .init = setup)
{
    CUdeviceptr a;
    cr_assert_eq(cuMemAllocAsync(&a, 2 * GiB, s), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(cuMemAllocAsync(&a, (size_t)-1, s), CUDA_ERROR_OUT_OF_MEMORY, "no wrap-around");
    cr_assert_eq(RESERVED(), 0);
    cr_assert_eq(in_use(), 0);
    cr_assert_eq(stats().alloc_calls, 0);
}

// --- what cuMemGetInfo and the statistics say -----------------------------------------------
Test(pool, mem_get_info_counts_every_holder, .init = setup)
{
    CUdeviceptr plain, pooled;
    cr_assert_eq(cuMemAlloc(&plain, 10 * MiB + 1), CUDA_SUCCESS);
    pooled = alloc_on(s, 3 * MiB);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);
    uint64_t want = 10 * MiB + 4096 + 4 * MiB + 2 * MiB;
    cr_assert_eq(in_use(), want);
    cr_assert_eq(stats().current_device_bytes, want);
    cr_assert_eq(cuMemFreeAsync(pooled, s), CUDA_SUCCESS);
    cr_assert_eq(in_use(), want, "the pool still holds its chunk");
    cr_assert_eq(cuMemRelease(h), CUDA_SUCCESS);
    cr_assert_eq(in_use(), want - 2 * MiB);
    cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 10 * MiB + 4096);
    cr_assert_eq(cuMemFree(plain), CUDA_SUCCESS);
    cr_assert_eq(in_use(), 0);
}

Test(pool, attributes_and_watermarks_agree, .init = setup)
{
    CUdeviceptr a = alloc_on(s, 3 * MiB), b = alloc_on(s, 6 * MiB);
    cr_assert_eq(b, a + 3 * MiB, "the first chunk's tail and a second chunk");
    cr_assert_eq(USED(), 9 * MiB);
    cr_assert_eq(RESERVED(), 10 * MiB);
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 9 * MiB);
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 10 * MiB);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(USED(), 3 * MiB);
    cr_assert_eq(RESERVED(), 4 * MiB);
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 9 * MiB, "a high mark stays");
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 10 * MiB);
    // cuda.h: the high watermarks can only be reset, to zero; they then take
    // the current value.
    cuuint64_t zero = 0, one = 1;
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &one),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero),
                 CUDA_SUCCESS);
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), CUDA_SUCCESS);
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 4 * MiB);
    cr_assert_eq(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 3 * MiB);
    // The current figures are read-only.
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
                 CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(stats().pool_reserved_bytes, RESERVED());
    (void)a;
}

// peak_pool_unused_bytes: how much of the peak was the pool's slack (its
// reserve less its live blocks) when the peak was last raised.
Test(pool, peak_pool_unused_is_the_slack_at_the_peak, .init = setup)
{
    threshold(UINT64_MAX);
    // A new chunk raises the peak: its slack is what the block leaves of it.
    CUdeviceptr a = alloc_on(s, 3 * MiB);
    sim_stats_t st = stats();
    cr_assert_eq(st.peak_device_bytes, 4 * MiB);
    cr_assert_eq(st.peak_pool_unused_bytes, 1 * MiB, "the 4 MiB chunk less the 3 MiB block");
    // A peak reached while the pool holds the freed block: all its chunk.
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(RESERVED(), 4 * MiB, "kept: the threshold is above it");
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 2 * MiB), CUDA_SUCCESS);
    st = stats();
    cr_assert_eq(st.peak_device_bytes, 6 * MiB);
    cr_assert_eq(st.peak_pool_unused_bytes, 4 * MiB, "the freed block's chunk");
    // Reused for a block, the chunk is no slack, but the peak is not raised
    // again: the figure stays the one of the peak.
    CUdeviceptr b = alloc_on(s, 4 * MiB);
    st = stats();
    cr_assert_eq(st.peak_device_bytes, 6 * MiB);
    cr_assert_eq(st.peak_pool_unused_bytes, 4 * MiB);
    // simResetPeak sets it back with the peak: the peak is now, no slack.
    cr_assert_eq(simResetPeak(), CUDA_SUCCESS);
    cr_assert_eq(stats().peak_pool_unused_bytes, 0);
    cr_assert_eq(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(simResetPeak(), CUDA_SUCCESS);
    st = stats();
    cr_assert_eq(st.peak_device_bytes, 6 * MiB);
    cr_assert_eq(st.peak_pool_unused_bytes, 4 * MiB, "the peak is now, with the freed chunk");
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(simResetPeak(), CUDA_SUCCESS);
    st = stats();
    cr_assert_eq(st.peak_device_bytes, 2 * MiB);
    cr_assert_eq(st.peak_pool_unused_bytes, 0);
    cr_assert_eq(cuMemFree(p), CUDA_SUCCESS);
}

Test(pool, statistics_count_the_reserve, .init = setup)
{
    threshold(UINT64_MAX);
    CUdeviceptr a = alloc_on(s, 6 * MiB);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 2 * MiB), CUDA_SUCCESS);
    sim_stats_t st = stats();
    cr_assert_eq(st.current_device_bytes, 8 * MiB, "the reserve is the device's bytes");
    cr_assert_eq(st.peak_device_bytes, 8 * MiB);
    cr_assert_eq(st.pool_reserved_bytes, 6 * MiB);
    cr_assert_eq(st.peak_in_use_bytes, 8 * MiB);
    // simResetPeak starts a phase: peak_device_bytes falls to the current
    // value, the run's high-water mark of cuMemGetInfo stays.
    cr_assert_eq(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    cr_assert_eq(simResetPeak(), CUDA_SUCCESS);
    st = stats();
    cr_assert_eq(st.current_device_bytes, 2 * MiB);
    cr_assert_eq(st.peak_device_bytes, 2 * MiB);
    cr_assert_eq(st.peak_in_use_bytes, 8 * MiB);
    cr_assert_eq(st.pool_reserved_bytes, 0);
    cr_assert_eq(simResetStats(), CUDA_SUCCESS);
    st = stats();
    cr_assert_eq(st.peak_in_use_bytes, 2 * MiB, "simResetStats resets it");
    cr_assert_eq(st.live_handles, 0);
}
