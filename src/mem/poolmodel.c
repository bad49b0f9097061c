// SPDX-License-Identifier: MIT
#include "poolmodel.h"

#include <sched.h>

#include "mem/extent.h"
#include "mem/ptrmap.h"

#define ALIGN 512u         // a block's granularity (CUDA guarantees 256-byte alignment)
#define CHUNK (2ull << 20) // the reserve's
// The modelled address space: an offset / ALIGN fits 31 bits, a length / ALIGN 32.
#define OFF_MAX (1ull << 40)

#define PLAIN (1ull << 63)

// A spinlock, as the pointer maps have: every allocation and free of the
// program takes it, for a few dozen instructions (a first fit over the
// holes, usually few).
static int mu;
static void lock(void)
{
    while (__atomic_exchange_n(&mu, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&mu, __ATOMIC_RELAXED))
            sched_yield();
}
static void unlock(void)
{
    __atomic_store_n(&mu, 0, __ATOMIC_RELEASE);
}

// A first fit walks the holes: a real step has tens of them (the replayed
// H200 GPT and Llama, at most 93). Past this many, or once a hole could not
// be recorded, the model gives up and the report falls back to its other
// model (report/summary.c) rather than slow every allocation.
#define MAX_HOLES 4096
static bool gave_up;

static ao_extents_t holes; // free space in the reserve [0, reserved)
static uint64_t reserved, used, plain, peak;
static bool seen;
// addr -> a block: offset / ALIGN | length / ALIGN << 31; or another
// allocation: PLAIN | its size.
static ao_ptrmap_t blocks = AO_PTRMAP_INIT;

static void give_up(void)
{
    gave_up = true;
    ao_extents_clear(&holes);
    ao_ptrmap_clear(&blocks);
}

static void give(uint64_t off, uint64_t len)
{
    if (ao_extents_give(&holes, off, len) != 0 || holes.n > MAX_HOLES) give_up();
}

static uint64_t round_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

// First fit; else the free tail and the reserve grown at its end by what
// the tail lacks. Returns the block's offset, or UINT64_MAX past OFF_MAX.
static uint64_t take(uint64_t len)
{
    uint64_t off;
    if (ao_extents_take(&holes, len, &off) == 0) return off;
    uint64_t tail = 0;
    off = reserved;
    if (holes.n && holes.v[holes.n - 1].lo + holes.v[holes.n - 1].len == reserved) {
        tail = holes.v[--holes.n].len; // (the last extent: nothing to move)
        off = reserved - tail;
    }
    uint64_t grown = reserved + round_up(len - tail, CHUNK);
    if (grown > OFF_MAX) {
        if (tail) give(off, tail);
        return UINT64_MAX;
    }
    reserved = grown;
    if (off + len < reserved) give(off + len, reserved - off - len);
    return off;
}

void ao_poolmodel_alloc(uint64_t addr, uint64_t size, bool pool)
{
    lock();
    if (gave_up) {
        unlock();
        return;
    }
    if (!pool) {
        if (ao_ptrmap_put(&blocks, addr, PLAIN | size)) plain += size;
    } else {
        uint64_t len = round_up(size ? size : 1, ALIGN), off = take(len);
        if (off != UINT64_MAX && ao_ptrmap_put(&blocks, addr, off / ALIGN | (len / ALIGN) << 31)) {
            used += len;
            seen = true;
        } else if (off != UINT64_MAX) {
            give(off, len); // cannot record it: as if not made
        }
    }
    if (reserved + plain > peak) peak = reserved + plain;
    unlock();
}

void ao_poolmodel_free(uint64_t addr)
{
    lock();
    uint64_t v = gave_up ? 0 : ao_ptrmap_take(&blocks, addr);
    if (v & PLAIN) {
        plain -= v & ~PLAIN;
    } else if (v) {
        uint64_t off = (v & ((1ull << 31) - 1)) * ALIGN, len = (v >> 31) * ALIGN;
        give(off, len);
        used -= len;
    }
    unlock();
}

uint64_t ao_poolmodel_peak(bool *pool_seen)
{
    lock();
    uint64_t p = peak;
    if (pool_seen) *pool_seen = seen && !gave_up;
    unlock();
    return p;
}

void ao_poolmodel_now(uint64_t *res, uint64_t *u)
{
    lock();
    *res = reserved, *u = used;
    unlock();
}

void ao_poolmodel_reset(void)
{
    lock();
    ao_extents_clear(&holes);
    ao_ptrmap_clear(&blocks);
    reserved = used = plain = peak = 0;
    seen = gave_up = false;
    unlock();
}
