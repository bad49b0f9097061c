// SPDX-License-Identifier: MIT
// The safety net: what a launch, copy or set touches, checked against what
// is offloaded.
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

#include "mem/vmm.h"
#include "offload/engine.h"

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
    ao_word_t w[];
} ao_layout_t;

// Number of captures in progress (aoshim's capture hooks count them): while
// any runs, every word in aoshim's range takes the slow path, which pins
// what captured work touches.
extern int ao_capturing;
// A capture ended (successfully or not): one fewer in progress.
void ao_capture_ended(void);

// The layout of a kernel, cached per handle (host stub, CUfunction or
// CUkernel). NULL when the driver has no parameter info (said once).
enum ao_fn_kind { AO_FN_HOST, AO_FN_FUNC, AO_FN_KERNEL };
const ao_layout_t *ao_layout(const void *fn, int kind);

// The engine's slow path for one word the fast check did not clear.
void ao_engine_touch(CUdeviceptr p, CUstream s, const char *what);

static inline bool ao_word_ok(uint64_t w, CUstream s)
{
    uint64_t off = w - ao_vmm.base;
    if (off >= ao_vmm.size) return true;
    if (__atomic_load_n(&ao_capturing, __ATOMIC_RELAXED)) return false;
    uint8_t st = __atomic_load_n(&ao_vmm.state[off >> ao_vmm.shift], __ATOMIC_ACQUIRE);
    if (st <= AO_GS_RESIDENT) return true;
    return st == AO_GS_STREAM && ao_engine_safe_stream(ao_vmm.owner[off >> ao_vmm.shift]) == s;
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
    const bool capturing = __atomic_load_n(&ao_capturing, __ATOMIC_RELAXED) != 0;
    for (uint32_t i = 0; i < L->nwords; i++) {
        uint64_t w;
        const char *src = packed ? (const char *)packed + L->w[i].abs
                                 : (const char *)args[L->w[i].param] + L->w[i].off;
        memcpy(&w, src, sizeof w);
        uint64_t off = w - base;
        if (off >= size) continue;
        uint8_t st = __atomic_load_n(&state[off >> shift], __ATOMIC_RELAXED);
        if (!capturing &&
            (st <= AO_GS_RESIDENT ||
             (st == AO_GS_STREAM && ao_engine_safe_stream(ao_vmm.owner[off >> shift]) == s)))
            continue;
        ao_engine_touch(w, s, L->name);
    }
}

// Check a copy's or set's range [p, p+n): every granule of it in aoshim's range.
static inline void ao_scan_range(uint64_t p, uint64_t n, CUstream s, const char *what)
{
    uint64_t lo = ao_vmm.base, hi = ao_vmm.base + ao_vmm.size;
    if (!n || p >= hi || p + n <= lo) return; // the usual case: not aoshim's memory
    uint64_t a = p < lo ? lo : p, end = p + n < hi ? p + n : hi;
    for (; a < end; a = (a & ~(uint64_t)(ao_vmm.granule - 1)) + ao_vmm.granule)
        if (!ao_word_ok(a, s)) ao_engine_touch(a, s, what);
}

#endif // AO_SCAN_H
