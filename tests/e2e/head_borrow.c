// SPDX-License-Identifier: MIT
// The program's own allocations that aoshim serves borrow memory in the
// head, after the forward's last layer and before the backward
// (offload/chunk.c, served_may_borrow, lend): a kept page whose last use is
// still queued on the allocation's own stream is mapped at the new address,
// the stream waiting for that use on the GPU, rather than the host waiting
// for it. The need here is under a page (idle memory covers all but 28 MiB
// of the 64 asked for), so a page is lent in place of an idle one. Two
// steps of four layers: the head is known once a backward has begun.
// Prints `host_wait_us=<n> ok=<0|1>`: the virtual host time the second
// step's head allocation spent blocked on the GPU (its mapping, 1.2 ms a
// page while the queued copies run, is not a wait), and whether the queued copies read the old
// bytes and the new allocation holds its own (the simulator stops the run
// at an unordered access: SIM_RACE_FATAL=1).
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define PROG "head_borrow"
#include "check.h"

#define MIB    (1u << 20)
#define PAGE   (32u * MIB) // AO_PAGE (mem/vmm.h)
#define LAYERS 4
#define READS  16 // copies of the kept page queued: its last use ~10 ms away

static cudaStream_t s, s2;

int main(void)
{
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    char *back, one[2];
    CHECK(cudaMallocHost((void **)&back, PAGE));
    unsigned long long wait_ns = 0;
    int ok = 1;
    for (int step = 0; step < 2; step++) {
        void *act[LAYERS];
        for (int l = 0; l < LAYERS; l++) {
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync(&act[l], 64 * MIB, s));
            CHECK(cudaMemsetAsync(act[l], 1, 64 * MIB, s));
            aoshim_try_layer_end(l);
        }
        if (step == 1) { // the head (in step 0 not yet known as such)
            // x: 36 MiB on s2 (a page and a last part of 4 MiB: serve.c),
            // freed and done; t: a page on s, freed with READS copies of it
            // still queued there.
            void *x, *t, *h;
            CHECK(cudaMallocAsync(&x, 36 * MIB, s2));
            CHECK(cudaMemsetAsync(x, 2, 36 * MIB, s2));
            CHECK(cudaMallocAsync(&t, PAGE, s));
            CHECK(cudaMemsetAsync(t, 0x3c, PAGE, s));
            for (int k = 0; k < READS; k++)
                CHECK(cudaMemcpyAsync(back, t, PAGE, cudaMemcpyDeviceToHost, s));
            CHECK(cudaFreeAsync(t, s));
            CHECK(cudaFreeAsync(x, s2));
            CHECK(cudaStreamSynchronize(s2));
            sim_stats_t a, b;
            CHECK(simGetStats(&a));
            CHECK(cudaMallocAsync(&h, 64 * MIB, s)); // two pages: x's and 28 MiB more
            CHECK(simGetStats(&b));
            wait_ns = b.host_wait_ns - a.host_wait_ns;
            CHECK(cudaMemsetAsync(h, 0x5e, 64 * MIB, s));
            CHECK(cudaMemcpyAsync(&one[0], h, 1, cudaMemcpyDeviceToHost, s));
            CHECK(cudaMemcpyAsync(&one[1], (char *)h + 64 * MIB - 1, 1, cudaMemcpyDeviceToHost, s));
            CHECK(cudaStreamSynchronize(s));
            ok &= one[0] == 0x5e && one[1] == 0x5e;
            for (unsigned k = 0; k < PAGE; k += 4096)
                ok &= back[k] == 0x3c;
            CHECK(cudaFreeAsync(h, s));
        }
        for (int l = LAYERS - 1; l >= 0; l--) {
            aoshim_try_backward_begin(l);
            CHECK(cudaMemsetAsync(act[l], 3, 64 * MIB, s)); // the backward uses the layer
            aoshim_try_backward_end(l);
            CHECK(cudaFreeAsync(act[l], s));
        }
        aoshim_try_step_end();
    }
    CHECK(cudaStreamSynchronize(s));
    printf("host_wait_us=%llu ok=%d\n", wait_ns / 1000, ok);
    return 0;
}
