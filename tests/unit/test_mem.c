// SPDX-License-Identifier: MIT
// The host-side data structures under the allocator: free extents (device
// address space, pinned chunks) and the pointer maps.
#include <criterion/criterion.h>
#include <stdint.h>

#include "mem/extent.h"
#include "mem/poolmodel.h"
#include "mem/ptrmap.h"

Test(extents, first_fit_and_coalescing)
{
    ao_extents_t e = {0};
    uint64_t a, b, c, d;
    cr_assert_eq(ao_extents_give(&e, 0x1000, 0x4000), 0);
    cr_assert_eq(ao_extents_take(&e, 0x1000, &a), 0);
    cr_assert_eq(ao_extents_take(&e, 0x1000, &b), 0);
    cr_assert_eq(ao_extents_take(&e, 0x2000, &c), 0);
    cr_assert_eq(a, 0x1000);
    cr_assert_eq(b, 0x2000);
    cr_assert_eq(c, 0x3000);
    cr_assert_eq(ao_extents_take(&e, 0x1000, &d), -1, "full");
    // Give back out of order: the middle first, then its neighbours; the
    // list must end as one extent again.
    cr_assert_eq(ao_extents_give(&e, b, 0x1000), 0);
    cr_assert_eq(e.n, 1);
    cr_assert_eq(ao_extents_give(&e, c, 0x2000), 0);
    cr_assert_eq(e.n, 1, "joined with the previous extent");
    cr_assert_eq(ao_extents_give(&e, a, 0x1000), 0);
    cr_assert_eq(e.n, 1);
    cr_assert_eq(e.v[0].lo, 0x1000);
    cr_assert_eq(e.v[0].len, 0x4000);
    cr_assert_eq(ao_extents_free_bytes(&e), 0x4000);
    ao_extents_clear(&e);
}

Test(extents, many_holes_stay_sorted)
{
    ao_extents_t e = {0};
    uint64_t got[64];
    cr_assert_eq(ao_extents_give(&e, 0, 64 * 512), 0);
    for (int i = 0; i < 64; i++) cr_assert_eq(ao_extents_take(&e, 512, &got[i]), 0);
    for (int i = 0; i < 64; i += 2) cr_assert_eq(ao_extents_give(&e, got[i], 512), 0);
    cr_assert_eq(e.n, 32);
    for (size_t i = 1; i < e.n; i++) cr_assert_lt(e.v[i - 1].lo, e.v[i].lo);
    uint64_t x;
    cr_assert_eq(ao_extents_take(&e, 1024, &x), -1, "no two adjacent holes");
    for (int i = 1; i < 64; i += 2) cr_assert_eq(ao_extents_give(&e, got[i], 512), 0);
    cr_assert_eq(e.n, 1);
    cr_assert_eq(ao_extents_take(&e, 64 * 512, &x), 0);
    cr_assert_eq(x, 0);
    ao_extents_clear(&e);
}

Test(ptrmap, put_get_take_with_tombstones_and_growth)
{
    ao_ptrmap_t m = AO_PTRMAP_INIT;
    const uint64_t n = 5000; // past several rehashes
    for (uint64_t i = 0; i < n; i++) cr_assert(ao_ptrmap_put(&m, 0x7f0000000000ull + i * 512, i + 1));
    cr_assert_eq(ao_ptrmap_count(&m), n);
    for (uint64_t i = 0; i < n; i += 2) cr_assert_eq(ao_ptrmap_take(&m, 0x7f0000000000ull + i * 512), i + 1);
    cr_assert_eq(ao_ptrmap_count(&m), n / 2);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = ao_ptrmap_get(&m, 0x7f0000000000ull + i * 512);
        cr_assert_eq(v, i % 2 ? i + 1 : 0, "key %lu", (unsigned long)i);
    }
    // Re-insert over tombstones; an update must not duplicate the key.
    for (uint64_t i = 0; i < n; i += 2) cr_assert(ao_ptrmap_put(&m, 0x7f0000000000ull + i * 512, 7));
    cr_assert(ao_ptrmap_put(&m, 0x7f0000000000ull + 512, 9));
    cr_assert_eq(ao_ptrmap_count(&m), n);
    cr_assert_eq(ao_ptrmap_take(&m, 0x7f0000000000ull + 512), 9);
    cr_assert_eq(ao_ptrmap_take(&m, 0x7f0000000000ull + 512), 0, "taken once only");
    cr_assert_eq(ao_ptrmap_get(&m, 12345), 0);
    ao_ptrmap_clear(&m);
    cr_assert_eq(ao_ptrmap_count(&m), 0);
}

// --- the program's pool, modelled (report/summary.c) ---------------------------------------
#define MiB (1ull << 20)

static uint64_t reserved_now(void)
{
    uint64_t r, u;
    ao_poolmodel_now(&r, &u);
    return r;
}

Test(poolmodel, grows_at_its_end_by_what_the_free_tail_lacks, .init = ao_poolmodel_reset)
{
    ao_poolmodel_alloc(0x1000, 3 * MiB, true);
    cr_assert_eq(reserved_now(), 4 * MiB, "2 MiB steps");
    ao_poolmodel_alloc(0x2000, 6 * MiB, true); // the 1 MiB tail and 6 MiB more
    cr_assert_eq(reserved_now(), 10 * MiB);
    ao_poolmodel_free(0x1000);
    ao_poolmodel_alloc(0x3000, 2 * MiB, true); // first fit: the first block's place
    cr_assert_eq(reserved_now(), 10 * MiB);
    ao_poolmodel_alloc(0x4000, 2 * MiB,
                       true); // the hole left is 1 MiB: the tail (1 MiB) and 2 more
    cr_assert_eq(reserved_now(), 12 * MiB);
    bool seen = false;
    cr_assert_eq(ao_poolmodel_peak(&seen), 12 * MiB);
    cr_assert(seen);
}

// Fragments: a hole too small for the next block stays, and the high-water
// mark counts it; one pool for everything needs only the largest moment.
Test(poolmodel, keeps_fragments_that_one_count_of_bytes_leaves_out, .init = ao_poolmodel_reset)
{
    ao_poolmodel_alloc(0x1000, 5 * MiB, true);
    ao_poolmodel_alloc(0x2000, 1 * MiB, true);
    ao_poolmodel_free(0x1000); // a 5 MiB hole below a live 1 MiB block
    ao_poolmodel_alloc(0x3000, 8 * MiB, true);
    uint64_t r, u;
    ao_poolmodel_now(&r, &u);
    cr_assert_eq(u, 9 * MiB, "in use: 1 + 8");
    cr_assert_eq(r, 14 * MiB, "reserve: the hole, the block, the new one at the end");
    ao_poolmodel_free(0x2000);
    ao_poolmodel_free(0x3000);
    ao_poolmodel_alloc(0x4000, 14 * MiB, true); // all of it free again: one block
    cr_assert_eq(reserved_now(), 14 * MiB, "frees coalesce");
    cr_assert_eq(ao_poolmodel_peak(NULL), 14 * MiB);
}

// Allocations outside the pool (cudaMalloc) count beside it, unfragmented;
// a free the model did not see is nothing.
Test(poolmodel, other_allocations_count_beside_the_pool, .init = ao_poolmodel_reset)
{
    ao_poolmodel_alloc(0x1000, 2 * MiB, true);
    ao_poolmodel_alloc(0x2000, 3 * MiB + 5, false);
    cr_assert_eq(ao_poolmodel_peak(NULL), 5 * MiB + 5);
    ao_poolmodel_free(0x9999000);
    ao_poolmodel_free(0x2000);
    ao_poolmodel_alloc(0x3000, 1 * MiB, false);
    cr_assert_eq(ao_poolmodel_peak(NULL), 5 * MiB + 5, "the high-water mark stays");
    bool seen = true;
    ao_poolmodel_reset();
    cr_assert_eq(ao_poolmodel_peak(&seen), 0);
    cr_assert(!seen);
}

// A reserve with more holes than a first fit should walk on every
// allocation: the model gives up, and says so (the report falls back).
Test(poolmodel, gives_up_past_4096_holes, .init = ao_poolmodel_reset)
{
    for (uint64_t i = 0; i < 8200; i++)
        ao_poolmodel_alloc(0x100000 + i * 0x1000, 512, true);
    bool seen = false;
    ao_poolmodel_peak(&seen);
    cr_assert(seen);
    for (uint64_t i = 0; i < 8200; i += 2)
        ao_poolmodel_free(0x100000 + i * 0x1000); // a hole between every two blocks
    ao_poolmodel_peak(&seen);
    cr_assert(!seen, "still modelling with 4100 holes");
    ao_poolmodel_alloc(0x9000000, 512, true); // ignored from now on
    ao_poolmodel_peak(&seen);
    cr_assert(!seen);
}
