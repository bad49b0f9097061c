// SPDX-License-Identifier: MIT
// aoshim's driver table (cuda/real.c) against the simulated driver, which
// exports both ABIs of the names CUDA 13 changed: every entry must be the
// ABI aoshim calls, never the newest one the driver has under that name.
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>

#include "cuda/real.h"
#include "mem/vmm.h"
#include "stats.h"

Test(real, driver_entry_points_have_the_abi_aoshim_calls)
{
    cr_assert(ao_real_driver(), "the simulated libcuda.so.1 is on LD_LIBRARY_PATH (meson env)");
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h);
    // Without CUDA 13's two-argument forms this test could not fail.
    cr_assert_not_null(dlsym(h, "cuCtxGetDevice_v2"));
    cr_assert_not_null(dlsym(h, "cuCtxSynchronize_v2"));
    cr_expect_eq((void *)ao_real.cuCtxGetDevice, dlsym(h, "cuCtxGetDevice"),
                 "cuCtxGetDevice(device) is called with one argument");
    cr_expect_eq((void *)ao_real.cuCtxSynchronize, dlsym(h, "cuCtxSynchronize"),
                 "cuCtxSynchronize() is called with none");
}

// A device smaller than 32 MiB (four times it is under 64 granules) still
// gets aoshim's address range: once it got none, and nothing was tracked.
Test(real, a_small_device_gets_an_address_range)
{
    setenv("SIM_CAPACITY", "16M", 1);
    cr_assert(ao_real_driver());
    CUcontext ctx;
    cr_assert_eq(ao_real.cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(ao_real.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    cr_assert_eq(ao_real.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    cr_assert_eq(ao_vmm_init(), CUDA_SUCCESS);
    cr_assert_geq(ao_vmm.size, 64 * ao_vmm.granule, "range %zu bytes", (size_t)ao_vmm.size);
    cr_assert_neq(ao_vmm.base, 0);
}

// While serving (ao_vmm.fine), a range takes idle pages, and handles
// smaller than a page only for what the pages leave: mapping and unmapping
// cost per handle (29 and 19.5 us a mapping on the H200), and a range tiled
// from the small last handles of other ranges took up to 18 mappings for
// 128 MiB. The small handles no range takes go back to the driver, the
// smallest first, as new memory is made.
static void sim_context(void)
{
    cr_assert(ao_real_driver(), "the simulated libcuda.so.1 is on LD_LIBRARY_PATH (meson env)");
    CUcontext ctx;
    cr_assert_eq(ao_real.cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(ao_real.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    cr_assert_eq(ao_real.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    cr_assert_eq(ao_vmm_init(), CUDA_SUCCESS);
    ao_vmm.fine = true;
}

#define MiB (1ull << 20)

static CUdeviceptr map_new(size_t size, ao_phys_t *ph)
{
    CUdeviceptr p;
    cr_assert_eq(ao_va_alloc(size, &p), CUDA_SUCCESS);
    cr_assert_eq(ao_phys_map(p, size, ph, false), CUDA_SUCCESS, "map %zu MiB", size / MiB);
    return p;
}

Test(real, a_served_range_tiles_only_its_last_page_from_small_handles)
{
    sim_context();
    // Small handles in the pool: the last pages of ranges of 142, 10, 4, 2
    // and 2 MiB, beside four pages.
    static const size_t sizes[] = {142 * MiB, 10 * MiB, 4 * MiB, 2 * MiB, 2 * MiB};
    ao_phys_t ph[5];
    CUdeviceptr at[5];
    for (int i = 0; i < 5; i++)
        at[i] = map_new(sizes[i], &ph[i]);
    cr_assert_eq(ph[0].n, 5, "142 MiB: 4 pages and 14 MiB, %u handles", ph[0].n);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ao_phys_unmap(at[i], sizes[i], &ph[i]), CUDA_SUCCESS);
    cr_assert_eq(ao_phys_idle(), 160 * MiB);
    cr_assert_eq(ao_phys_idle_pages(), 128 * MiB);

    // 160 MiB: the four pages and a new one, not 14+10+4+2+2 (nine
    // mappings); the 32 MiB of small handles went back for the new page.
    ao_phys_t big;
    uint64_t made = ao_stat_get(AO_STAT_MEM_CREATE_CALLS);
    CUdeviceptr p = map_new(160 * MiB, &big);
    cr_expect_eq(big.n, 5, "160 MiB in %u handles", big.n);
    for (unsigned k = 0; k < big.n; k++)
        cr_expect_eq(big.size[k], 32 * MiB, "handle %u: %zu MiB", k, big.size[k] / MiB);
    cr_expect_eq(ao_stat_get(AO_STAT_MEM_CREATE_CALLS) - made, 1, "one page made");
    cr_expect_eq(ao_phys_idle(), 0, "%zu MiB of small handles kept idle", ao_phys_idle() / MiB);
    cr_assert_eq(ao_phys_unmap(p, 160 * MiB, &big), CUDA_SUCCESS);

    // A range's last part comes from the small handles pooled: 142 MiB
    // again, four pages and a 14 MiB handle made once, then taken.
    ao_phys_t a, b;
    p = map_new(142 * MiB, &a);
    cr_assert_eq(ao_phys_unmap(p, 142 * MiB, &a), CUDA_SUCCESS);
    made = ao_stat_get(AO_STAT_MEM_CREATE_CALLS);
    p = map_new(142 * MiB, &b);
    cr_expect_eq(b.n, 5, "142 MiB in %u handles", b.n);
    cr_expect_eq(ao_stat_get(AO_STAT_MEM_CREATE_CALLS), made, "memory made for a pooled size");
    cr_assert_eq(ao_phys_unmap(p, 142 * MiB, &b), CUDA_SUCCESS);
}
