// SPDX-License-Identifier: MIT
// The safety net's fast path: what a launch, copy or set touches, checked
// against what is offloaded, with the kernel-layout cache (scan.c) that
// says where a kernel's pointers are. The marks that keep a release from
// slipping between a check and its enqueue are the fence's (fence.h).
//
// Every pointer-sized, pointer-aligned word of a kernel's parameters is
// classified: one subtraction and compare rejects words outside aoshim's
// reservation; for the rest, one byte per granule says whether the memory is
// plainly resident. Only a word that points at memory being copied out,
// offloaded, or being reloaded for another stream leaves this path: the
// engine then cancels the release, or reloads now and makes the launching
// stream wait on the GPU (a "late reload"), before the launch is issued.
#ifndef AO_SCAN_H
#define AO_SCAN_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "offload/fence.h"
#include "stats.h"

// Where a kernel's pointer-sized words are: parameter index and offset in it
// (argument-array form), and offset in the packed buffer (extra form).
typedef struct ao_word_s {
    uint16_t param, off;
    uint32_t abs;
} ao_word_t;

typedef struct ao_layout_s {
    const char *name; // for the report; "?" if the driver could not say
    uint32_t nparams, packed_size;
    uint32_t nwords;
    // The step trace's (steptrace/): the kernel's id in AOSHIM_RECORD's
    // file, 0 until declared, and its launches recorded (for the sampled
    // timing). Atomics: the layout is shared by every launching thread.
    uint32_t trace_id, trace_launches;
    // One bit per word: a place found holding leftovers, never a pointer
    // (ao_leftover_note). Set once, read by every launching thread.
    uint64_t *leftover;
    ao_word_t w[];
} ao_layout_t;

// The layout of a kernel, cached per handle (host stub, CUfunction or
// CUkernel). NULL when the driver has no parameter info (said once) or the
// kernel has no parameters: nothing to scan.
enum ao_fn_kind { AO_FN_HOST, AO_FN_FUNC, AO_FN_KERNEL };
const ao_layout_t *ao_layout(const void *fn, int kind);
// The same cache entry whatever the kernel's parameters (the step trace
// names every kernel): with no parameter info, a layout with no words. NULL
// only when there is no driver or the runtime cannot say which function a
// host stub is.
const ao_layout_t *ao_layout_get(const void *fn, int kind);

// Slow path for one word: drop the busy mark, let the engine act, mark again.
// n: the bytes from w the work may touch (ao_engine_touch). stale (NULL for
// a copy's range): set when the word points at no live buffer of its chunk,
// and nothing was done for it.
static inline void ao_scan_slow(uint64_t w, uint64_t n, CUstream s, const char *what, bool *stale)
{
    ao_scan_end();
    unsigned gen = 0;
    const void *c = ao_engine_touch(w, n, s, what, stale, &gen);
    int i = ao_scan_slot - 1;
    __atomic_fetch_add(&ao_scan_busy[i], 1, __ATOMIC_SEQ_CST);
    if (c && ao_scan_nwaived < 8) {
        ao_scan_waived_gen[ao_scan_nwaived] = gen;
        ao_scan_waived[ao_scan_nwaived++] = c;
    }
}

// --- leftover words ----------------------------------------------------------------------------
// A kernel's parameters are not all set by the program: PyTorch's
// elementwise kernels take an OffsetCalculator of 25 dimensions by value,
// of which a few are filled, and the rest is the host stack's leftovers,
// among them addresses of tensors freed earlier. Read as a pointer, such a
// word is a touch of whatever lies there now: on an H200 (a Hugging Face
// Llama under `all`) 81 and 307 late reloads in two runs, for launches
// that never read those layers. A word that points where no live buffer
// is (a granule with no chunk, or a freed part of a chunk) is no pointer
// the kernel uses: the program would read freed memory. Nor is a word no
// pointer can have (ao_word_addressable). So its place in
// that kernel's parameters is marked, and from then on that place is not
// read as a pointer for that kernel (AOSHIM_SKIP_LEFTOVERS=0: always read).
// The assumption this rests on: a kernel that takes a pointer at some
// place takes a live one there in every launch (PyTorch's elementwise and
// reduction kernels do: their pointers lead the struct, the leftovers are
// the unused dimensions). A kernel that broke it (a pointer at a place
// that held freed memory's address in another launch) while touching a
// layer copied out or offloaded would fault on the GPU, the memory being
// unmapped, or, if a reload mapped the layer again before the kernel ran,
// read bytes not yet back: wrong bytes, without an error. Only words
// pointing at memory copied out or offloaded are skipped (not memory being
// reloaded, nor what a capture sees); AOSHIM_SKIP_LEFTOVERS=0 reads every
// word, for a program with kernels of its own that might break it.

// Whether w could be an address a kernel reads: not below the lowest page a
// process can map (Linux's mmap_min_addr, 64 KiB by default; the words of
// value 0, a NULL pointer or a zero size, are not leftovers) and not above
// the largest user address of any 64-bit CPU CUDA runs on (2^56 with five
// page-table levels). A word outside may be a size, a stride or a divisor's
// magic number: a place holding one is no pointer place.
static inline bool ao_word_addressable(uint64_t w)
{
    return w - 1 >= 0xffff && w < 1ull << 57;
}
static inline bool ao_is_leftover(const ao_layout_t *L, uint32_t i)
{
    return __atomic_load_n(&L->leftover[i >> 6], __ATOMIC_RELAXED) >> (i & 63) & 1;
}
void ao_leftover_mark(const ao_layout_t *L, uint32_t i);
// Place i of L holds a leftover. Inline, for the words of every launch that
// are sizes and strides: a place known already costs a load and a test.
static inline void ao_leftover_note(const ao_layout_t *L, uint32_t i)
{
    if (ao_config.skip_leftovers && !ao_is_leftover(L, i)) ao_leftover_mark(L, i);
}

// --- the lock-free reads, and why they suffice ------------------------------------------
// The caller has loaded ao_vmm.size with acquire and found it nonzero (every
// launch hook does before it scans): base, size, shift and the table
// pointers are then published and never change, so they are read plainly.
// A granule's state and owner change under the engine's lock, read here
// without it, so both are atomics:
//  - The state is loaded seq_cst: on x86-64 the same mov as a relaxed load
//    (on AArch64 an ldar instead of an ldr). It pairs with the release's
//    fence in ao_scan_quiesce: this thread's busy mark (seq_cst) precedes its
//    state load in the single order S; the engine's AWAY store precedes its fence,
//    which precedes its reads of the marks. Either the engine sees the mark
//    and waits for this launch to be enqueued, or the fence precedes the mark
//    in S and the load sees AWAY (or later): never a stale RESIDENT after a
//    release went ahead. A relaxed load would not be ordered after the mark
//    by C11 (only a fence or a seq_cst load is).
//  - The owner is loaded after the state, relaxed: ao_vmm_mark stores it
//    before the state's release store, so it is the owner of the state seen
//    or a later one. A later owner (the chunk was released and the address
//    reused meanwhile) only sends the word to the slow path, which looks the
//    chunk up again under the lock; a chunk struct is never freed (recycled),
//    so reading one is safe either way.
static inline uint8_t ao_granule_state(const uint8_t *state, uint64_t i)
{
    return __atomic_load_n(&state[i], __ATOMIC_SEQ_CST);
}

static inline const void *ao_granule_owner(uint64_t i)
{
    return __atomic_load_n(&ao_vmm.owner[i], __ATOMIC_RELAXED);
}

static inline bool ao_word_ok(uint64_t w, CUstream s)
{
    uint64_t off = w - ao_vmm.base;
    if (off >= ao_vmm.size) return true;
    uint64_t i = off >> ao_vmm.shift;
    uint8_t st = ao_granule_state(ao_vmm.state, i);
    const void *owner = ao_granule_owner(i); // after the state: see above
    // A waiver holds while the chunk has not gone away since (its
    // waive_gen, loaded after this thread's busy mark: as the state above).
    if (__atomic_load_n(&ao_capturing, __ATOMIC_RELAXED))
        return ao_scan_is_waived(owner, ao_engine_waive_gen(owner));
    if (st <= AO_GS_RESIDENT) return true;
    return (st == AO_GS_STREAM && ao_engine_safe_stream(owner) == s) ||
           ao_scan_is_waived(owner, ao_engine_waive_gen(owner));
}

// Check a launch's parameters (args: one pointer per parameter; or packed:
// the extra buffer) and let the engine act on anything not plainly resident.
// The loop keeps the reservation's bounds and table in registers: per word,
// one load, one subtraction and compare, and for aoshim's words one byte.
static inline void ao_scan_launch(const ao_layout_t *L, void *const *args, const void *packed,
                                  CUstream s)
{
    const uint64_t base = ao_vmm.base, size = ao_vmm.size;
    const uint8_t *state = ao_vmm.state;
    const unsigned shift = ao_vmm.shift;
again:;
    const bool capturing = __atomic_load_n(&ao_capturing, __ATOMIC_RELAXED) != 0;
    for (uint32_t i = 0; i < L->nwords; i++) {
        uint64_t w;
        const char *src = packed ? (const char *)packed + L->w[i].abs
                                 : (const char *)args[L->w[i].param] + L->w[i].off;
        memcpy(&w, src, sizeof w);
        uint64_t off = w - base;
        if (off >= size) {
            if (!ao_word_addressable(w)) ao_leftover_note(L, i);
            continue;
        }
        uint8_t st = ao_granule_state(state, off >> shift);
        if (st == AO_GS_NONE) { // no chunk: no live buffer, nothing to keep
            ao_leftover_note(L, i);
            continue;
        }
        if (!capturing && st <= AO_GS_RESIDENT) continue;
        // A watched chunk (early copies): each word into it goes to the
        // engine once in this launch, whatever its place. A waiver of the
        // chunk would let its other words by, each a buffer that may be
        // written; a leftover place skipped would lose a write through it.
        // Past AO_SCAN_WATCHED_WORDS such words, a word into a watched
        // chunk ends that chunk's watch (any of its buffers may be used:
        // ao_engine_touch with n = 0), and the chunk is watched no more.
        if (st == AO_GS_WATCHED) {
            const void *owner = ao_granule_owner(off >> shift);
            const unsigned gen = ao_engine_waive_gen(owner);
            bool seen = false;
            for (int k = 0; k < ao_scan_nwatched && !seen; k++)
                seen = ao_scan_watched[k].place == i && ao_scan_watched[k].chunk == owner &&
                       ao_scan_watched[k].gen == gen;
            if (seen) continue;
            bool stale = false;
            const bool room = ao_scan_nwatched < AO_SCAN_WATCHED_WORDS;
            ao_scan_slow(w, room ? 1 : 0, s, L->name, &stale);
            if (room) ao_scan_watched[ao_scan_nwatched++] = (ao_scan_word_t){i, gen, owner};
            if (stale) ao_leftover_note(L, i);
            goto again;
        }
        // A leftover is not taken for a touch of memory copied out or
        // offloaded. Memory being reloaded, and any a capture sees, still
        // gets its wait or its pin: there a real pointer at such a place
        // would read bytes not yet back, or lose them to an offload.
        if (st == AO_GS_AWAY && ao_is_leftover(L, i)) {
            ao_stat_add(AO_STAT_LEFTOVER_SKIPS, 1);
            continue;
        }
        if (ao_word_ok(w, s)) continue;
        bool stale = false;
        ao_scan_slow(w, 1, s, L->name, &stale);
        if (stale) ao_leftover_note(L, i);
        goto again; // states may have moved while this thread was not marked
    }
}

// Check a copy's or set's range [p, p+n): every granule of it in aoshim's range.
static inline void ao_scan_range(uint64_t p, uint64_t n, CUstream s, const char *what)
{
    uint64_t lo = ao_vmm.base, hi = ao_vmm.base + ao_vmm.size;
    if (!n || p >= hi || p + n <= lo) return; // the usual case: not aoshim's memory
again:;
    uint64_t a = p < lo ? lo : p, end = p + n < hi ? p + n : hi;
    for (; a < end; a = (a & ~(uint64_t)(ao_vmm.granule - 1)) + ao_vmm.granule)
        if (!ao_word_ok(a, s)) {
            ao_scan_slow(a, end - a, s, what, NULL);
            goto again;
        }
}

// [p, p + n), with n cut at the end of the address space: a range whose size
// overflowed is scanned to the end (a superset; the call will fail anyway).
static inline void ao_scan_span(uint64_t p, uint64_t n, bool overflow, CUstream s,
                                const char *what)
{
    if (overflow || n > UINT64_MAX - p) n = UINT64_MAX - p;
    ao_scan_range(p, n, s, what);
}

// A pitched range: `height` rows of `width` bytes, `pitch` bytes apart, and
// `depth` such slices `slice` bytes apart (2D: depth 1). The scan's unit is
// the granule, so it is exact at that unit: where the gaps between rows (or
// slices) are shorter than a granule, no granule lies wholly in a gap, and
// one scan from the first byte to the last checks exactly the granules the
// rows touch. Wider gaps are stepped over row by row (slice by slice), so a
// pitched view into a huge allocation does not reload the chunks between
// its rows. Invalid geometry (pitch < width, overflow) is scanned as the
// superset from the first byte on; the real call then refuses it.
static inline void ao_scan_rows(uint64_t p, uint64_t width, uint64_t height, uint64_t pitch,
                                CUstream s, const char *what)
{
    if (!width || !height) return;
    if (height == 1 || pitch < width + ao_vmm.granule) {
        uint64_t n;
        bool o = __builtin_mul_overflow(height - 1, pitch, &n) || __builtin_add_overflow(n, width, &n);
        ao_scan_span(p, n, o, s, what);
        return;
    }
    const uint64_t hi = ao_vmm.base + ao_vmm.size;
    for (uint64_t i = 0; i < height && p < hi; i++) {
        ao_scan_span(p, width, false, s, what);
        if (__builtin_add_overflow(p, pitch, &p)) break;
    }
}

static inline void ao_scan_pitched(uint64_t p, uint64_t width, uint64_t height, uint64_t depth,
                                   uint64_t pitch, uint64_t slice, CUstream s, const char *what)
{
    if (!width || !height || !depth) return;
    if (height == 1) pitch = width; // one row: the pitch is unused
    uint64_t plane; // a slice's first byte to its last + 1
    if (__builtin_mul_overflow(height - 1, pitch, &plane) ||
        __builtin_add_overflow(plane, width, &plane)) {
        ao_scan_span(p, 0, true, s, what);
        return;
    }
    if (depth == 1) {
        ao_scan_rows(p, width, height, pitch, s, what);
        return;
    }
    if (pitch < width + ao_vmm.granule && slice < plane + ao_vmm.granule) {
        // No granule in a gap: the slices as rows of `plane` bytes, one span.
        ao_scan_rows(p, plane, depth, slice, s, what);
        return;
    }
    const uint64_t hi = ao_vmm.base + ao_vmm.size;
    for (uint64_t k = 0; k < depth && p < hi; k++) {
        ao_scan_rows(p, width, height, pitch, s, what);
        if (__builtin_add_overflow(p, slice, &p)) break;
    }
}

#endif // AO_SCAN_H
