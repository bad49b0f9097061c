// SPDX-License-Identifier: MIT
// Kernel parameter layouts for the launch scan, cached per handle.
#include "scan.h"

#include <pthread.h>
#include <stdlib.h>

#include "cuda/guard.h"
#include "cuda/real.h"
#include "log.h"

// --- the cache: lock-free lookups, insertions under a mutex -------------------------------
// A slot's value is published before its key, so a reader that sees the key
// sees the layout. Layouts are never freed (kernels outlive any run report).
#define CACHE_SLOTS (1u << 14)

static struct {
    const void *key;
    const ao_layout_t *val;
} cache[CACHE_SLOTS];
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned cached;

static unsigned slot_of(const void *k)
{
    uint64_t x = (uint64_t)(uintptr_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return (unsigned)(x >> 40) & (CACHE_SLOTS - 1);
}

static const ao_layout_t *lookup(const void *k)
{
    for (unsigned i = slot_of(k), n = 0; n < CACHE_SLOTS; i = (i + 1) & (CACHE_SLOTS - 1), n++) {
        const void *key = __atomic_load_n(&cache[i].key, __ATOMIC_ACQUIRE);
        if (key == k) return cache[i].val;
        if (!key) return NULL;
    }
    return NULL;
}

// The layout now cached for k: v, or the one another thread cached first
// (v is then dropped), so that every thread shares one layout per handle
// (the step trace's kernel id lives in it). A full cache keeps v uncached.
static const ao_layout_t *insert(const void *k, ao_layout_t *v)
{
    pthread_mutex_lock(&cache_mu);
    const ao_layout_t *had = lookup(k);
    if (!had && cached < CACHE_SLOTS * 3 / 4) {
        unsigned i = slot_of(k);
        while (cache[i].key)
            i = (i + 1) & (CACHE_SLOTS - 1);
        cache[i].val = v;
        __atomic_store_n(&cache[i].key, k, __ATOMIC_RELEASE);
        cached++;
    }
    pthread_mutex_unlock(&cache_mu);
    if (!had) return v;
    free(v);
    return had;
}

// --- building a layout from the driver's parameter info ------------------------------------
// The driver says each parameter's offset and size, not its type, and has
// no count call before CUDA 13.2: ask until it reports an invalid index.
static ao_layout_t *build(const void *h, int kind, bool info)
{
    enum { MAXP = 1024 };
    uint32_t n = 0, nwords = 0, packed = 0;
    ao_word_t words[MAXP];
    for (; info; n++) {
        size_t o = 0, sz = 0;
        CUresult r = kind == AO_FN_KERNEL ? ao_real.cuKernelGetParamInfo((CUkernel)h, n, &o, &sz)
                                          : ao_real.cuFuncGetParamInfo((CUfunction)h, n, &o, &sz);
        if (r != CUDA_SUCCESS) break;
        if (o + sz > packed) packed = (uint32_t)(o + sz);
        // Every 8-byte-aligned word inside the parameter may be a pointer:
        // structs passed by value carry pointers too.
        for (size_t a = (o + 7) & ~(size_t)7; a + 8 <= o + sz && nwords < MAXP; a += 8)
            words[nwords++] = (ao_word_t){(uint16_t)n, (uint16_t)(a - o), (uint32_t)a};
    }
    size_t nbits = (nwords + 63) / 64 * sizeof(uint64_t);
    ao_layout_t *L = malloc(sizeof *L + nwords * sizeof *L->w + nbits);
    if (!L) return NULL;
    L->leftover = (uint64_t *)(L->w + nwords); // ao_word_t is 8 bytes: aligned
    memset(L->leftover, 0, nbits);
    L->nparams = n;
    L->packed_size = packed;
    L->trace_id = L->trace_launches = 0;
    L->nwords = nwords;
    memcpy(L->w, words, nwords * sizeof *words);
    const char *name = NULL;
    if (kind == AO_FN_KERNEL) {
        if (ao_real.cuKernelGetName) ao_real.cuKernelGetName(&name, (CUkernel)h);
    } else if (ao_real.cuFuncGetName) {
        ao_real.cuFuncGetName(&name, (CUfunction)h);
    }
    L->name = name ? name : "?";
    return L;
}

const ao_layout_t *ao_layout_get(const void *fn, int kind)
{
    const ao_layout_t *L = lookup(fn);
    if (L) return L;
    if (!ao_real_driver()) return NULL;
    const void *h = fn;
    if (kind == AO_FN_HOST) {
        // A runtime host stub: the runtime knows its function.
        cudaFunction_t f = NULL;
        if (!ao_real.cudaGetFuncBySymbol) ao_real_runtime_init();
        if (!ao_real.cudaGetFuncBySymbol ||
            AO_REAL_CALL(ao_real.cudaGetFuncBySymbol(&f, fn)) != cudaSuccess || !f)
            return NULL;
        h = f;
        kind = AO_FN_FUNC;
    }
    // Without parameter info (a driver before 12.4) the layout has no
    // words: the scan skips the kernel, the step trace still names it.
    bool info = ao_real.cuFuncGetParamInfo && ao_real.cuKernelGetParamInfo;
    ao_layout_t *built = build(h, kind, info);
    if (!built) return NULL;
    return insert(fn, built);
}

const ao_layout_t *ao_layout(const void *fn, int kind)
{
    const ao_layout_t *L = lookup(fn);
    if (!L) {
        if (!ao_real_driver()) return NULL;
        static int no_info;
        if (!ao_real.cuFuncGetParamInfo || !ao_real.cuKernelGetParamInfo) {
            ao_warn_once(&no_info, "the driver gives no kernel parameter info: launches are not "
                                   "checked, the layer schedule alone decides");
            return NULL;
        }
        L = ao_layout_get(fn, kind);
    }
    return L && (L->nwords || L->nparams) ? L : NULL;
}

// --- leftover words (scan.h) --------------------------------------------------------------------
void ao_leftover_mark(const ao_layout_t *L, uint32_t i)
{
    uint64_t bit = 1ull << (i & 63);
    if (!(__atomic_fetch_or(&L->leftover[i >> 6], bit, __ATOMIC_RELAXED) & bit))
        ao_stat_add(AO_STAT_LEFTOVER_PLACES, 1);
}
