// SPDX-License-Identifier: MIT
// What moving memory between address ranges costs the host while the GPU
// works, against an idle GPU. On an H200 under real training steps
// (tests/replay/data/h200-2026-11-28) aoshim's virtual-memory calls took
// 117 to 207 us of host time per mapping, where bench_vmm.c, on an idle
// device, gives about 49 us per 32 MiB page mapped, made accessible and
// unmapped: this says which load makes the difference.
//
// Each round takes PAGES handles of 32 MiB (made once), maps each into a
// reserved range, sets access on the range, and unmaps it, as aoshim moves
// pages between a layer and the program's allocations (src/mem/vmm.c); then
// it makes and releases one handle, as a served segment's last part is. The
// mean over ROUNDS, per page, while another thread of the same process runs
// one of these loads (the default: all four, one after the other):
//
//   idle       nothing
//   busy       1 GiB cuMemsetD8Async, back to back on a stream: the GPU's
//              engines and memory busy, the host idle (a queue of long kernels)
//   launches   4 KiB cuMemsetD8Async, as fast as the host can issue them,
//              a stream synchronisation every 64: the launch path busy, as
//              PyTorch's host keeps it (a call every 15 to 20 us on the H200)
//   both       the two loads in two threads
//   copies     256 MiB copies device to host (pinned) and back, back to back
//              on two streams: both copy engines busy, as offloading keeps them
//
// The driver is opened at run time (dlopen): no link to libcuda. On the
// simulated GPU the times are this machine's, not the simulator's model.
//
// With LIVE (an environment variable, a number of pages) that many more
// pages stay mapped in the same reservation throughout, accessible, as a
// training step's memory is (aoshim's reservation held 600 pages and more):
// whether a call's cost grows with the mappings already there.
//
// PAGE_MIB (an environment variable) sets the page size (32 by default): does
// a larger mapping cost as little more as it does on an idle device?
// COPY_MIB sets the size of each copy of the copies load (256 by default):
// during copies a call cost about the link's time for 32 MiB on the H200, as
// if it waited for the copy under way to reach a boundary; with smaller
// copies, does it wait less?
//
//   [LIVE=N] [PAGE_MIB=M] bench_vmm_load [PAGES [ROUNDS [LOAD...]]]   (8 pages, 40 rounds)
#define BENCH_NAME "bench_vmm_load"
#include "bench_driver.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

FN(p_cuMemAlloc, CUdeviceptr *, size_t);
FN(p_cuMemsetD8Async, CUdeviceptr, unsigned char, size_t, CUstream);
FN(p_cuMemHostAlloc, void **, size_t, unsigned);
FN(p_cuMemcpyDtoHAsync, void *, CUdeviceptr, size_t, CUstream);
FN(p_cuMemcpyHtoDAsync, CUdeviceptr, const void *, size_t, CUstream);

static CUcontext ctx;
static atomic_bool stop;
static atomic_ullong issued;

typedef struct load_s {
    size_t bytes; // of each memset or copy
    int sync_every;
    bool copies;
} load_t;

static void *load_thread(void *arg)
{
    const load_t *l = arg;
    CHECK(p_cuCtxSetCurrent(ctx));
    CUstream s;
    CUdeviceptr buf;
    CHECK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(p_cuMemAlloc(&buf, l->bytes));
    void *host = NULL;
    CUstream s2 = NULL;
    if (l->copies) {
        CHECK(p_cuMemHostAlloc(&host, 2 * l->bytes, 0));
        CHECK(p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    }
    CUdeviceptr buf2 = 0;
    if (l->copies) CHECK(p_cuMemAlloc(&buf2, l->bytes));
    for (unsigned long long n = 1; !atomic_load(&stop); n++) {
        if (l->copies) {
            CHECK(p_cuMemcpyDtoHAsync(host, buf, l->bytes, s));
            CHECK(p_cuMemcpyHtoDAsync(buf2, (char *)host + l->bytes, l->bytes, s2));
            CHECK(p_cuStreamSynchronize(s2));
        } else {
            CHECK(p_cuMemsetD8Async(buf, (unsigned char)n, l->bytes, s));
        }
        atomic_fetch_add(&issued, 1);
        if (n % (unsigned long long)l->sync_every == 0) CHECK(p_cuStreamSynchronize(s));
    }
    CHECK(p_cuStreamSynchronize(s));
    return NULL;
}

int main(int argc, char **argv)
{
    size_t pages = argc > 1 ? strtoul(argv[1], NULL, 10) : 8;
    int rounds = argc > 2 ? atoi(argv[2]) : 40;
    if (!pages || rounds < 1) {
        fprintf(stderr,
                "usage: bench_vmm_load [PAGES [ROUNDS [idle|busy|launches|both|copies]...]]\n");
        return 2;
    }
    CUdevice dev;
    void *lib = bench_driver_open(&dev, &ctx);
    *(void **)&p_cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    *(void **)&p_cuMemsetD8Async = sym(lib, "cuMemsetD8Async");
    *(void **)&p_cuMemHostAlloc = sym(lib, "cuMemHostAlloc");
    *(void **)&p_cuMemcpyDtoHAsync = sym(lib, "cuMemcpyDtoHAsync_v2");
    *(void **)&p_cuMemcpyHtoDAsync = sym(lib, "cuMemcpyHtoDAsync_v2");

    CUmemAllocationProp prop = bench_prop(dev);
    CUmemAccessDesc acc = bench_rw(dev);
    const size_t page = (getenv("PAGE_MIB") ? strtoul(getenv("PAGE_MIB"), NULL, 10) : 32) << 20;
    if (!page || page % (2u << 20)) {
        fprintf(stderr, "bench_vmm_load: PAGE_MIB must be a multiple of 2\n");
        return 2;
    }
    const size_t size = pages * page;
    const size_t live = getenv("LIVE") ? strtoul(getenv("LIVE"), NULL, 10) : 0;
    CUdeviceptr base, va;
    CHECK(p_cuMemAddressReserve(&base, size + live * page, page, 0, 0));
    va = base + live * page; // the live pages below, the moved ones above
    for (size_t i = 0; i < live; i++) {
        CUmemGenericAllocationHandle l;
        CHECK(p_cuMemCreate(&l, page, &prop, 0));
        CHECK(p_cuMemMap(base + i * page, page, 0, l, 0));
        CHECK(p_cuMemSetAccess(base + i * page, page, &acc, 1));
    }
    CUmemGenericAllocationHandle *h = calloc(pages, sizeof *h);
    for (size_t i = 0; i < pages; i++)
        CHECK(p_cuMemCreate(&h[i], page, &prop, 0));

    static const char *all[] = {"idle", "busy", "launches", "both", "copies"};
    const char **loads = argc > 3 ? (const char **)argv + 3 : all;
    int nloads = argc > 3 ? argc - 3 : 5;
    load_t big = {(size_t)1 << 30, 4, false}, small = {4096, 64, false};
    const size_t copy_mib = getenv("COPY_MIB") ? strtoul(getenv("COPY_MIB"), NULL, 10) : 256;
    if (!copy_mib) {
        fprintf(stderr, "bench_vmm_load: COPY_MIB must be a number of MiB above 0\n");
        return 2;
    }
    load_t copy = {copy_mib << 20, 2, true};
    for (int li = 0; li < nloads; li++) {
        const char *name = loads[li];
        pthread_t th[2];
        int nth = 0;
        atomic_store(&stop, false);
        atomic_store(&issued, 0);
        if (!strcmp(name, "busy") || !strcmp(name, "both"))
            pthread_create(&th[nth++], NULL, load_thread, &big);
        if (!strcmp(name, "launches") || !strcmp(name, "both"))
            pthread_create(&th[nth++], NULL, load_thread, &small);
        if (!strcmp(name, "copies")) pthread_create(&th[nth++], NULL, load_thread, &copy);
        if (nth == 0 && strcmp(name, "idle")) {
            fprintf(stderr, "bench_vmm_load: unknown load '%s'\n", name);
            return 2;
        }
        struct timespec settle = {0, 50 * 1000 * 1000}; // the load under way
        nanosleep(&settle, NULL);
        double map = 0, access = 0, unmap = 0, create = 0, release = 0, t0 = now_us();
        for (int r = 0; r < rounds; r++) {
            double t = now_us();
            for (size_t i = 0; i < pages; i++)
                CHECK(p_cuMemMap(va + i * page, page, 0, h[i], 0));
            map += now_us() - t;
            t = now_us();
            CHECK(p_cuMemSetAccess(va, size, &acc, 1));
            access += now_us() - t;
            t = now_us();
            for (size_t i = 0; i < pages; i++)
                CHECK(p_cuMemUnmap(va + i * page, page));
            unmap += now_us() - t;
            CUmemGenericAllocationHandle one;
            t = now_us();
            CHECK(p_cuMemCreate(&one, page, &prop, 0));
            create += now_us() - t;
            t = now_us();
            CHECK(p_cuMemRelease(one));
            release += now_us() - t;
        }
        double wall = now_us() - t0;
        atomic_store(&stop, true);
        for (int i = 0; i < nth; i++)
            pthread_join(th[i], NULL);
        double n = (double)rounds * (double)pages;
        printf("bench_vmm_load_%s_live%zu_page%zuM_copy%zuM_us_per_page map=%.2f set_access=%.2f "
               "unmap=%.2f remap=%.2f create=%.2f release=%.2f load_calls_per_ms=%.1f\n",
               name, live, page >> 20, copy_mib, map / n, access / n, unmap / n,
               (map + access + unmap) / n, create / rounds, release / rounds,
               (double)atomic_load(&issued) / (wall / 1e3));
        fflush(stdout);
    }
    return 0;
}
