// SPDX-License-Identifier: MIT
// aoshim's driver table (cuda/real.c) against the simulated driver, which
// exports both ABIs of the names CUDA 13 changed: every entry must be the
// ABI aoshim calls, never the newest one the driver has under that name.
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>

#include "cuda/real.h"
#include "mem/vmm.h"

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
