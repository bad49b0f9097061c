// SPDX-License-Identifier: MIT
// Shared by the parts of the step trace: the writer (writer.c: the file,
// gzip through a libz opened at run time), the timed launches (timing.c)
// and the records (steptrace.c).
//
// Lock order: a thread buffer's lock, the declarations' lock or the timing
// lock, then the writer's. Nothing holding the writer's lock takes another.
#ifndef AO_STEPTRACE_INTERNAL_H
#define AO_STEPTRACE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "steptrace/steptrace.h"

// --- the writer -------------------------------------------------------------------------
// Records reach the file in buffers: a thread fills one, hands it over when
// full, at the step's end and at its exit, and takes a free one. A writer
// thread (started at the first hand-over) compresses and writes them, so no
// program thread ever runs the compressor. Declarations and samples are
// short lines written through a side buffer, which the writer empties before
// each buffer it takes: a declaration made before a record was written
// precedes it in the file.
typedef struct ao_trbuf_s {
    struct ao_trbuf_s *next;
    size_t start, len; // the bytes [start, len) of data are records (ao_trrec_t)
    uint32_t tid;      // the thread that wrote them
    char data[] __attribute__((aligned(8))); // AO_TR_BUF bytes
} ao_trbuf_t;

// --- records, as a thread writes them -------------------------------------------------------
// A program's thread fills one of these per call (a few stores: no text),
// the writer turns them into the trace's lines (ao_tr_format). Names are
// already small integers; api names are string literals, kept by address.
enum ao_tr_kind {
    AO_TRK_ALLOC,
    AO_TRK_FREE,
    AO_TRK_COPY,
    AO_TRK_MEMSET,
    AO_TRK_LAUNCH,
    AO_TRK_STREAM_DESTROY,
    AO_TRK_RECORD,
    AO_TRK_WAIT,
    AO_TRK_SYNC,
    AO_TRK_POOL_ATTR,
    AO_TRK_POOL_TRIM,
    AO_TRK_LAYER,
    AO_TRK_KEEP,
};

// flags
#define AO_TRF_STREAM  1 // alloc, free: the call has a stream; layer: the thread named one
#define AO_TRF_ASYNC   2  // copy
#define AO_TRF_PITCHED 4  // copy, memset
#define AO_TRF_VALUE   8  // pool attribute: a value was given
#define AO_TRF_U64     16 // pool attribute: the value is 64-bit unsigned (else an int)

typedef struct ao_trrec_s {
    uint32_t size; // the record's bytes, words included: a multiple of 8
    uint8_t kind;  // enum ao_tr_kind
    uint8_t flags;
    uint16_t n; // launch: parameter words that follow
    uint64_t t; // ao_tr_now()
    union {
        struct {
            const char *api;
            uint64_t size, addr;
            uint32_t s;
        } alloc; // and free (size unused)
        struct {
            uint64_t dst, src, n, src_n;
            uint32_t s, kind;
        } copy;
        struct {
            uint64_t dst, n;
            uint32_t value, width, s;
        } memset;
        struct {
            uint32_t k, s, grid[3], block[3], shm, sample;
        } launch;
        struct {
            uint32_t a, b, c; // stream_destroy: id; record, wait: ev, s; sync: what, s, ev
        } ids;
        struct {
            uint64_t value;
            uint32_t pool;
            int32_t attr;
        } pool; // trim: value is what to keep
        struct {
            uint32_t op;
            int32_t arg, mb;
            uint32_t s; // with AO_TRF_STREAM: the stream the thread named (aoshim_set_stream)
        } layer;
        struct {
            uint64_t addr;
        } keep;
    } u;
    uint64_t w[]; // launch: its parameter words
} ao_trrec_t;

// One record as its line (with its newline) into out, which has room for
// AO_TR_LINE_MAX + 20 * r->n bytes; its length.
#define AO_TR_LINE_MAX 512
size_t ao_tr_format(const ao_trrec_t *r, uint32_t tid, char *out);

// At load: libz, if the system has it.
void ao_trw_init(void);
// A free buffer (len 0): waits while AO_TR_BUFS exist and none is free;
// NULL when there is no memory for one.
ao_trbuf_t *ao_trw_get(void);
// Hand a buffer to the writer (it comes back through ao_trw_get), waiting
// while the writer holds more than AO_TR_LAG not yet written: a crash loses
// at most those, and each thread's buffer not handed over. A buffer with no
// records is only given back.
void ao_trw_queue(ao_trbuf_t *b);
// Whole lines to write before the next queued buffer (n < 4 KiB).
void ao_trw_side(const char *data, size_t n);
// Everything handed over written, then last (the `end` record) when
// anything was, the gzip trailer, the file closed. Later records are dropped.
void ao_trw_finish(const char *last, size_t n);
// A forked child: never write (the parent's file, compressor and writer
// thread are the parent's).
void ao_trw_forked(void);

#define AO_TR_LAG  2  // buffers handed over and not yet written, at most
#define AO_TR_BUFS 64 // buffers in all (each thread's, the writer's, the free ones)

// --- time -------------------------------------------------------------------------------
// CLOCK_MONOTONIC nanoseconds since the trace began (ao_tr_init).
uint64_t ao_tr_now(void);

// --- timed launches ---------------------------------------------------------------------------
// A free timing slot with its two events, or -1 (all busy, no driver).
int ao_tr_timing_take(void);
// The first event on s; false (the slot given back) when it failed.
bool ao_tr_timing_arm(int slot, CUstream s);
// After the launch: the second event, and the sample's id for the launch
// record (0: not timed, the slot given back).
uint32_t ao_tr_timing_end(int slot, CUstream s, bool ok);
// Write `sample` records for the timed launches that completed; wait: for
// every pending one (at exit), else only those already done.
void ao_tr_timing_collect(bool wait);

// --- formatting ---------------------------------------------------------------------------
static inline char *ao_tr_put(char *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = s[i];
    return p + n;
}
#define AO_TR_PUTS(p, lit) ao_tr_put((p), (lit), sizeof(lit) - 1)

// Decimal, two digits at a time (a record's times have ten or more).
static inline char *ao_tr_u64(char *p, uint64_t v)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "6263646566676869707172737475767778798081828384858687888990919293"
                                "949596979899";
    char tmp[20];
    int n = 20;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        tmp[--n] = pairs[d + 1];
        tmp[--n] = pairs[d];
    }
    if (v >= 10) {
        tmp[--n] = pairs[v * 2 + 1];
        tmp[--n] = pairs[v * 2];
    } else {
        tmp[--n] = (char)('0' + v);
    }
    for (int i = n; i < 20; i++)
        *p++ = tmp[i];
    return p;
}

static inline char *ao_tr_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return ao_tr_u64(p, 0 - (uint64_t)v);
    }
    return ao_tr_u64(p, (uint64_t)v);
}

static inline char *ao_tr_hex(char *p, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    *p++ = '0';
    *p++ = 'x';
    int n = v ? (67 - __builtin_clzll(v)) / 4 : 1;
    for (int i = n - 1; i >= 0; i--, v >>= 4)
        p[i] = digits[v & 15];
    return p + n;
}

// A value that may hold spaces or other bytes a record cannot (a kernel's
// name, the program's): percent-encoded, at most max bytes of input.
char *ao_tr_encode(char *p, const char *s, size_t max);

#endif // AO_STEPTRACE_INTERNAL_H
