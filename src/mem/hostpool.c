// SPDX-License-Identifier: MIT
#include "hostpool.h"

#include <stdlib.h>

#include "config.h"
#include "extent.h"
#include "cuda/real.h"
#include "stats.h"

// Slots never span chunks: a copy whose host side crosses two separate
// pinned allocations is not a pinned copy, so each chunk keeps its own list.
typedef struct chunk_s {
    uint64_t base, size;
    ao_extents_t free;
} chunk_t;

static chunk_t *chunks;
static size_t nchunks, capchunks;
static uint64_t pinned;

static size_t round_to(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

static int grow(size_t need)
{
    uint64_t size = need > AO_HOST_CHUNK ? round_to(need, 2u << 20) : AO_HOST_CHUNK;
    uint64_t limit = ao_config.host_limit;
    if (limit) {
        if (pinned + need > limit) return AO_HOST_LIMIT;
        if (pinned + size > limit) size = round_to(need, AO_HOST_ALIGN);
    }
    if (nchunks == capchunks) {
        size_t cap = capchunks ? capchunks * 2 : 16;
        chunk_t *n = realloc(chunks, cap * sizeof *n);
        if (!n) return AO_HOST_PIN_FAILED;
        chunks = n;
        capchunks = cap;
    }
    void *p = NULL;
    ao_stat_add(AO_STAT_PIN_CALLS, 1);
    if (ao_real.cuMemHostAlloc(&p, size, 0) != CUDA_SUCCESS || !p) return AO_HOST_PIN_FAILED;
    chunk_t *c = &chunks[nchunks];
    *c = (chunk_t){(uint64_t)(uintptr_t)p, size, {0}};
    if (ao_extents_give(&c->free, c->base, size) < 0) {
        ao_real.cuMemFreeHost(p);
        return AO_HOST_PIN_FAILED;
    }
    nchunks++;
    pinned += size;
    ao_stat_add(AO_STAT_PINNED_HOST_BYTES, (int64_t)size);
    return AO_HOST_OK;
}

int ao_host_alloc(size_t size, void **out)
{
    size = round_to(size ? size : 1, AO_HOST_ALIGN);
    for (int attempt = 0; attempt < 2; attempt++) {
        for (size_t i = 0; i < nchunks; i++) {
            uint64_t lo;
            if (ao_extents_take(&chunks[i].free, size, &lo) == 0) {
                *out = (void *)(uintptr_t)lo;
                return AO_HOST_OK;
            }
        }
        if (attempt == 0) {
            int r = grow(size);
            if (r != AO_HOST_OK) return r;
        }
    }
    return AO_HOST_PIN_FAILED;
}

void ao_host_free(void *p, size_t size)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    size = round_to(size ? size : 1, AO_HOST_ALIGN);
    for (size_t i = 0; i < nchunks; i++)
        if (a - chunks[i].base < chunks[i].size) {
            ao_extents_give(&chunks[i].free, a, size);
            return;
        }
}

uint64_t ao_host_trim(void)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < nchunks;) {
        chunk_t *c = &chunks[i];
        if (ao_extents_free_bytes(&c->free) != c->size ||
            ao_real.cuMemFreeHost((void *)(uintptr_t)c->base) != CUDA_SUCCESS) {
            i++;
            continue;
        }
        ao_extents_clear(&c->free);
        bytes += c->size;
        pinned -= c->size;
        ao_stat_add(AO_STAT_PINNED_HOST_BYTES, -(int64_t)c->size);
        chunks[i] = chunks[--nchunks];
    }
    return bytes;
}

int ao_host_fini(void)
{
    int first = CUDA_SUCCESS;
    for (size_t i = 0; i < nchunks; i++) {
        void *p = (void *)(uintptr_t)chunks[i].base;
        CUresult r = ao_real.cuMemFreeHost(p);
        if (r != CUDA_SUCCESS) r = ao_real.cuMemFreeHost(p); // may have been passing
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
        ao_extents_clear(&chunks[i].free);
    }
    nchunks = 0;
    pinned = 0;
    return first;
}
