// SPDX-License-Identifier: MIT
// The host-side data structures under the allocator: free extents (device
// address space, pinned chunks) and the pointer maps.
#include <criterion/criterion.h>
#include <stdint.h>

#include "mem/extent.h"
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
