// SPDX-License-Identifier: MIT
// The kernel the end-to-end programs launch over tracked buffers, and their
// error check. out[i] = in[i] + 1 over n floats (params: in, out, n), reading
// and writing exactly those ranges. Define PROG (the program's name) before
// including.
#ifndef E2E_PLUS_ONE_H
#define E2E_PLUS_ONE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "simgpu.h"

#include "check.h"

// The host symbol launches name, as an nvcc stub would be.
static void plus_one(void) {}

static void plus_one_fn(void **args, const sim_launch_t *l)
{
    (void)l;
    const float *in = *(const float **)args[0];
    float *out = *(float **)args[1];
    unsigned n = *(unsigned *)args[2];
    for (unsigned i = 0; i < n; i++) out[i] = in[i] + 1.0f;
}

// Register it with the simulated runtime; ns: its fixed cost.
static void plus_one_register(uint64_t ns)
{
    sim_kernel_desc_t d = {.name = "plus_one",
                           .fn = plus_one_fn,
                           .nparams = 3,
                           .param_size = {8, 8, 4},
                           .naccess = 2,
                           .access = {{0, SIM_R, 2, 4}, {1, SIM_W, 2, 4}},
                           .ns_fixed = ns,
                           .flops_param = -1};
    CHECK(simrtRegisterKernel((const void *)plus_one, &d));
}

#endif // E2E_PLUS_ONE_H
