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
// At load: libz, if the system has it.
void ao_trw_init(void);
// Append whole lines to the file (opened, with its header, at the first
// call; the file is created only when there is something to write). sync:
// flush the compressor, so that the file reads back to here if the process
// dies. Records are dropped once the file failed or is finished.
void ao_trw_put(const char *data, size_t n, bool sync);
// The gzip trailer, and the file closed. Later puts are dropped.
void ao_trw_finish(void);
// A forked child: never write (the parent's file and compressor state are
// the parent's).
void ao_trw_forked(void);
// Whether the file was ever opened (something recorded).
bool ao_trw_opened(void);

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

static inline char *ao_tr_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = tmp[--n];
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
    int shift = 60;
    while (shift > 0 && !(v >> shift))
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        *p++ = digits[(v >> shift) & 15];
    return p;
}

// A value that may hold spaces or other bytes a record cannot (a kernel's
// name, the program's): percent-encoded, at most max bytes of input.
char *ao_tr_encode(char *p, const char *s, size_t max);

#endif // AO_STEPTRACE_INTERNAL_H
