// SPDX-License-Identifier: MIT
// The program's own allocations served from aoshim's memory (AOSHIM_SERVE=1,
// offload/serve.c), against the simulator's race checker (run with
// SIM_RACE_FATAL=1): a buffer freed on its own stream is reused by the next
// allocation of its size on that stream, in stream order (same address),
// while the work before the free still reads it; one freed from another
// stream, or by cudaFree, is not reused before that stream's work is done;
// aoshim_keep on a served buffer is a no-op; the same for small ones
// sharing a page; a range of pages freed and asked for again in two halves
// is split where its pages end (chunk.c's idle_take): each half at its
// place in the range, no memory mapped anew, the halves written only after
// the range's last read; a large allocation goes in the free space a live
// segment has (serve.c), not in a segment of its own; a kept range gives
// only the last pages a need takes (chunk.c's idle_unmap_tail); a new
// segment whose last page would be mostly unused has a last part of its own
// size instead (serve.c); where none is done, the host waits for the
// oldest kept mapping (chunk.c's idle_unmap_for). Prints
// `same_addr=<0|1> read_ok=<0|1> cross_ok=<0|1> shared=<0|1>
// shared_read_ok=<0|1> keep=<rc> split=<0|1> split_read_ok=<0|1>
// packed=<0|1> packed_read_ok=<0|1> tail=<0|1> lastpart=<0|1> oldest=<0|1>`,
// then `sim_map_calls=<n>`: the mappings the simulator saw made, which
// aoshim's report counts too.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define PROG "served_reuse"
#include "check.h"

#define SIZE  (40u << 20)  // a page or more: a segment of its own where none has room (serve.c)
#define SMALL (2u << 20)   // under a page: shares one
#define BIG   (128u << 20) // four pages

static cudaStream_t s1, s2;
static cudaEvent_t ready;
static char *pat;

// n bytes allocated on s1 and written there, read back into back on reader
// (after s1's write, by an event, when reader is s2) and freed on reader;
// then *next allocated on s1 and set to value at once. Returns the freed one.
static void *read_free_allocate(size_t n, char *back, cudaStream_t reader, void **next, int value)
{
    void *p;
    CHECK(cudaMallocAsync(&p, n, s1));
    CHECK(cudaMemcpyAsync(p, pat, n, cudaMemcpyHostToDevice, s1));
    if (reader != s1) {
        CHECK(cudaEventRecord(ready, s1));
        CHECK(cudaStreamWaitEvent(reader, ready, 0));
    }
    CHECK(cudaMemcpyAsync(back, p, n, cudaMemcpyDeviceToHost, reader));
    CHECK(cudaFreeAsync(p, reader));
    CHECK(cudaMallocAsync(next, n, s1));
    CHECK(cudaMemsetAsync(*next, value, n, s1));
    return p;
}

int main(void)
{
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    aoshim_try_set_stream(s1);
    char *back, *back2, *back3, *back4;
    CHECK(cudaMallocHost((void **)&pat, SIZE));
    CHECK(cudaMallocHost((void **)&back, SIZE));
    CHECK(cudaMallocHost((void **)&back2, SIZE));
    CHECK(cudaMallocHost((void **)&back3, SMALL));
    CHECK(cudaMallocHost((void **)&back4, SMALL));
    for (unsigned i = 0; i < SIZE; i++)
        pat[i] = (char)(i * 13 + 5);
    // A layer, so that aoshim tracks and offloads (serving is on only then).
    void *act;
    aoshim_try_layer_begin(0);
    CHECK(cudaMallocAsync(&act, SIZE, s1));
    CHECK(cudaMemsetAsync(act, 1, SIZE, s1));
    aoshim_try_layer_end(0);

    // A segment's last part of its own size where a whole last page would
    // be mostly unused (serve.c): 36 MiB takes 36 from the device, not the
    // 64 of two pages; 48 MiB, its last page half used, takes two pages.
    // Both written and read back at their ends.
    size_t fr0, fr1, fr2, total;
    void *p36, *p48;
    char last[2];
    CHECK(cudaMemGetInfo(&fr0, &total));
    CHECK(cudaMallocAsync(&p36, 36u << 20, s1));
    CHECK(cudaMemGetInfo(&fr1, &total));
    CHECK(cudaMallocAsync(&p48, 48u << 20, s1));
    CHECK(cudaMemGetInfo(&fr2, &total));
    CHECK(cudaMemsetAsync(p36, 0x36, 36u << 20, s1));
    CHECK(cudaMemsetAsync(p48, 0x48, 48u << 20, s1));
    CHECK(cudaMemcpyAsync(&last[0], (char *)p36 + (36u << 20) - 1, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaMemcpyAsync(&last[1], (char *)p48 + (48u << 20) - 1, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    int lastpart =
        fr0 - fr1 == 36u << 20 && fr1 - fr2 == 64u << 20 && last[0] == 0x36 && last[1] == 0x48;
    if (!lastpart)
        fprintf(stderr, "served_reuse: 36 MiB took %zu MiB, 48 took %zu\n", (fr0 - fr1) >> 20,
                (fr1 - fr2) >> 20);
    CHECK(cudaFreeAsync(p36, s1));
    CHECK(cudaFreeAsync(p48, s1));
    CHECK(cudaStreamSynchronize(s1));

    // Four pages freed on s2 and done, kept; then two pages asked for on s1,
    // with no memory idle: the kept range gives its last two pages
    // (unmapped, mapped for s1), not all four, and keeps its first two at
    // their place, which the next two pages asked for on s2 take whole;
    // both written and read back, each its own bytes.
    void *t, *u, *w;
    sim_stats_t st0, st1;
    CHECK(cudaMallocAsync(&t, BIG, s2));
    CHECK(cudaMemsetAsync(t, 0x21, BIG, s2));
    CHECK(cudaFreeAsync(t, s2));
    CHECK(cudaStreamSynchronize(s2));
    CHECK(simGetStats(&st0));
    CHECK(cudaMallocAsync(&u, BIG / 2, s1));
    CHECK(simGetStats(&st1));
    CHECK(cudaMallocAsync(&w, BIG / 2, s2));
    int tail = st1.live_mappings == st0.live_mappings && w == t;
    CHECK(simGetStats(&st0));
    tail &= st0.map_calls == st1.map_calls;
    CHECK(cudaMemsetAsync(u, 0x22, BIG / 2, s1));
    CHECK(cudaMemsetAsync(w, 0x23, BIG / 2, s2));
    CHECK(cudaDeviceSynchronize());
    // Each its own memory: the tail's pages now u's, the head still w's.
    char ends[4];
    CHECK(cudaMemcpy(&ends[0], u, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&ends[1], (char *)u + BIG / 2 - 1, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&ends[2], w, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&ends[3], (char *)w + BIG / 2 - 1, 1, cudaMemcpyDeviceToHost));
    tail &= ends[0] == 0x22 && ends[1] == 0x22 && ends[2] == 0x23 && ends[3] == 0x23;
    CHECK(cudaFreeAsync(u, s1));
    CHECK(cudaFreeAsync(w, s2));
    CHECK(cudaDeviceSynchronize());

    // Four pages written, their last 40 MiB read back, freed; then asked for
    // again in halves on the same stream, and the halves written at once.
    void *big, *lo, *hi;
    char *back5, head[2];
    CHECK(cudaMallocHost((void **)&back5, SIZE));
    CHECK(cudaMallocAsync(&big, BIG, s1));
    CHECK(cudaMemsetAsync(big, 0x44, BIG, s1));
    CHECK(cudaMemcpyAsync(back5, (char *)big + BIG - SIZE, SIZE, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(big, s1));
    CHECK(simGetStats(&st0));
    CHECK(cudaMallocAsync(&lo, BIG / 2, s1));
    CHECK(cudaMallocAsync(&hi, BIG / 2, s1));
    CHECK(simGetStats(&st1));
    CHECK(cudaMemsetAsync(lo, 0x55, BIG / 2, s1));
    CHECK(cudaMemsetAsync(hi, 0x66, BIG / 2, s1));
    CHECK(cudaMemcpyAsync(&head[0], lo, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaMemcpyAsync(&head[1], (char *)hi + BIG / 2 - 1, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    int split = lo == big && (char *)hi == (char *)big + BIG / 2 &&
                st1.map_calls == st0.map_calls && st1.set_access_calls == st0.set_access_calls;
    int split_ok = head[0] == 0x55 && head[1] == 0x66;
    for (unsigned k = 0; k < SIZE; k++)
        split_ok &= back5[k] == 0x44;
    CHECK(cudaFreeAsync(lo, s1));
    CHECK(cudaFreeAsync(hi, s1));

    // 94 MiB (a segment of three pages) and 2 MiB in the segment's last
    // 2 MiB; the 94 freed leave free space in a live segment, where the
    // next 40 MiB goes (not in the 64 MiB the halves above left kept),
    // written after the 94's last read.
    void *a, *tail2, *c40;
    char edge[3];
    CHECK(cudaMallocAsync(&a, 94u << 20, s1));
    CHECK(cudaMallocAsync(&tail2, SMALL, s1));
    CHECK(cudaMemsetAsync(a, 0x71, 94u << 20, s1));
    CHECK(cudaMemsetAsync(tail2, 0x73, SMALL, s1));
    CHECK(cudaMemcpyAsync(&edge[0], a, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(a, s1));
    CHECK(simGetStats(&st0));
    CHECK(cudaMallocAsync(&c40, SIZE, s1));
    CHECK(simGetStats(&st1));
    CHECK(cudaMemsetAsync(c40, 0x72, SIZE, s1));
    CHECK(cudaMemcpyAsync(&edge[1], (char *)c40 + SIZE - 1, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaMemcpyAsync(&edge[2], tail2, 1, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    int packed = c40 == a && (char *)tail2 == (char *)a + (94u << 20) &&
                 st1.map_calls == st0.map_calls && st1.set_access_calls == st0.set_access_calls;
    int packed_ok = edge[0] == 0x71 && edge[1] == 0x72 && edge[2] == 0x73;
    CHECK(cudaFreeAsync(c40, s1));
    CHECK(cudaFreeAsync(tail2, s1));

    // Same stream: written, read back, freed, allocated again at once.
    void *d, *c = read_free_allocate(SIZE, back, s1, &d, 0x5a);
    int same = c == d;

    // Another stream: allocated on s1, read on s2, freed on s2; then a new
    // allocation on s1 written at once: not the memory s2 still reads.
    void *f;
    read_free_allocate(SIZE, back2, s2, &f, 0x33);
    // Small ones share a page (serve.c): g stays live beside h; h, read
    // back and freed on s1, is reused at once by the next of its size on s1
    // (its space in the page), after the read in stream order; i, read on
    // s2 and freed there, keeps its space until the page empties.
    void *g, *h2, *j;
    CHECK(cudaMallocAsync(&g, SMALL, s1));
    void *h = read_free_allocate(SMALL, back3, s1, &h2, 0x11);
    void *i = read_free_allocate(SMALL, back4, s2, &j, 0x22);
    int shared_same = h == h2 && i != j;
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFreeAsync(g, s1));
    CHECK(cudaFreeAsync(h2, s1));
    CHECK(cudaFreeAsync(j, s1));
    int keep = aoshim_try_keep(f);
    CHECK(cudaFree(f)); // a served buffer freed by cudaFree
    CHECK(cudaFreeAsync(d, s1));
    CHECK(cudaFreeAsync(act, s1));
    CHECK(cudaStreamSynchronize(s1));
    // The host waits for the oldest kept mapping when none is done
    // (chunk.c, idle_unmap_for): o (three pages) and n (two) live at once,
    // o read back and freed first, then n, with 16 copies of it queued; a
    // page then asked for on s2 (neither taken whole nor lent) unmaps o's
    // last page, waiting only for o's copy, not n's 16 (chosen by size, n
    // came first: the smaller of two ranges larger than the need).
    void *o, *n, *q;
    char *ob, *nb; // their copies
    CHECK(cudaMallocHost((void **)&ob, SIZE));
    CHECK(cudaMallocHost((void **)&nb, SIZE));
    sim_stats_t w0, w1;
    CHECK(cudaMallocAsync(&o, 96u << 20, s1));
    CHECK(cudaMallocAsync(&n, 64u << 20, s1));
    CHECK(cudaMemsetAsync(o, 0x0d, 96u << 20, s1));
    CHECK(cudaMemcpyAsync(ob, o, SIZE, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(o, s1));
    CHECK(cudaMemsetAsync(n, 0x0e, 64u << 20, s1));
    for (int k = 0; k < 16; k++)
        CHECK(cudaMemcpyAsync(nb, n, SIZE, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaFreeAsync(n, s1));
    CHECK(simGetStats(&w0));
    CHECK(cudaMallocAsync(&q, 32u << 20, s2));
    CHECK(simGetStats(&w1));
    CHECK(cudaMemsetAsync(q, 0x0f, 32u << 20, s2));
    CHECK(cudaDeviceSynchronize());
    const unsigned long long oldest_us = (w1.host_ns - w0.host_ns) / 1000;
    int oldest = oldest_us < 4000 && nb[0] == 0x0e && nb[SIZE - 1] == 0x0e && ob[0] == 0x0d &&
                 ob[SIZE - 1] == 0x0d;
    if (!oldest) fprintf(stderr, "served_reuse: the host waited %llu us\n", oldest_us);
    CHECK(cudaFreeAsync(q, s2));
    CHECK(cudaDeviceSynchronize());

    printf("same_addr=%d read_ok=%d cross_ok=%d shared=%d shared_read_ok=%d keep=%d split=%d "
           "split_read_ok=%d packed=%d packed_read_ok=%d tail=%d lastpart=%d oldest=%d\n",
           same, memcmp(back, pat, SIZE) == 0, memcmp(back2, pat, SIZE) == 0, shared_same,
           memcmp(back3, pat, SMALL) == 0 && memcmp(back4, pat, SMALL) == 0, keep, split, split_ok,
           packed, packed_ok, tail, lastpart, oldest);
    CHECK(simGetStats(&st1));
    printf("sim_map_calls=%llu\n", (unsigned long long)st1.map_calls);
    return 0;
}
