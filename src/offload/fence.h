// SPDX-License-Identifier: MIT
// The fence between the launch path and the engine: a checking thread's busy
// mark, the captures in progress, and the flag that refuses work the engine
// could not make safe. The hooks and the scan (scan.h) set them; the engine
// waits on them (ao_scan_quiesce) and reads them. Neither side calls the
// other through here, so the engine needs nothing of the scan.
#ifndef AO_FENCE_H
#define AO_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "log.h"

// Number of captures in progress (aoshim's capture hooks count them): while
// any runs, every word in aoshim's range takes the slow path, which pins
// what captured work touches.
extern int ao_capturing;
// A capture began; one ended (successfully or not).
void ao_capture_began(void);
void ao_capture_ended(void);

// --- check, then enqueue, without a window between them ------------------------------
// A launch checks its pointers, then enqueues; a release must not slip in
// between (the kernel would find the memory gone). So a checking thread is
// marked busy from before its check until its launch is enqueued, and the
// engine, having marked a chunk away, waits for every busy thread before it
// records the events its release will wait for (ao_scan_quiesce). The slow
// path takes the engine's lock, so a thread drops its mark around it and
// checks again after; chunks the engine has made safe for this launch are
// waived for the re-check.
#define AO_SCAN_SLOTS 256
extern int ao_scan_busy[AO_SCAN_SLOTS];
extern AO_TLS int ao_scan_slot; // 1 + index, 0 until first use
extern AO_TLS const void *ao_scan_waived[8];
extern AO_TLS unsigned ao_scan_waived_gen[8]; // the chunk's waive_gen when waived
// Set when the engine could not make something the work touches safe (a
// reload that found no device memory): the hook then refuses the work with
// an error instead of letting it touch unmapped memory (hook.h, CHECKED).
extern AO_TLS bool ao_scan_failed;
extern AO_TLS int ao_scan_nwaived;
int ao_scan_slot_init(void);

// Words of this launch the engine saw in a watched chunk (scan.h): by
// place, the chunk and its waive_gen then.
#define AO_SCAN_WATCHED_WORDS 16
typedef struct ao_scan_word_s {
    uint32_t place;
    unsigned gen;
    const void *chunk;
} ao_scan_word_t;
extern AO_TLS ao_scan_word_t ao_scan_watched[AO_SCAN_WATCHED_WORDS];
extern AO_TLS int ao_scan_nwatched;

static inline void ao_scan_begin(void)
{
    int i = ao_scan_slot ? ao_scan_slot - 1 : ao_scan_slot_init();
    __atomic_fetch_add(&ao_scan_busy[i], 1, __ATOMIC_SEQ_CST);
    ao_scan_nwaived = 0;
    ao_scan_nwatched = 0;
    ao_scan_failed = false;
}

static inline void ao_scan_end(void)
{
    __atomic_fetch_sub(&ao_scan_busy[ao_scan_slot - 1], 1, __ATOMIC_RELEASE);
}

// The engine: wait until no thread is between its check and its enqueue.
void ao_scan_quiesce(void);

// gen: the chunk's waive_gen now (the engine's, read by the scan).
static inline bool ao_scan_is_waived(const void *chunk, unsigned gen)
{
    for (int i = 0; i < ao_scan_nwaived; i++)
        if (ao_scan_waived[i] == chunk && ao_scan_waived_gen[i] == gen) return true;
    return false;
}

#endif // AO_FENCE_H
