// SPDX-License-Identifier: MIT
// What the engine tells the report while it runs. Called under the engine's
// lock (never from the launch or pass-through allocation path), never calls
// CUDA, never blocks; bounded memory however long the run.
//
// GPU times are nanoseconds since the engine's reference event (recorded when
// it started), read from CUDA events: as true on a real GPU as on the
// simulator. Memory changes are stamped with the host's monotonic clock.
#ifndef AO_RECORD_H
#define AO_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ao_rec_kind { AO_REC_D2H, AO_REC_H2D, AO_REC_WAIT, AO_REC_FWD, AO_REC_BWD };

// A GPU interval that completed: an offload copy (D2H), a reload copy (H2D),
// the compute stream waiting for reloads (WAIT; bytes 0), or a layer's
// forward or backward compute (FWD, BWD; bytes 0; timed only when the
// planner or a report that draws them asks: the HTML page's and the
// trace's compute lane).
void ao_rec_interval(int kind, int layer, int mb, uint64_t bytes, uint64_t gpu_start_ns,
                     uint64_t gpu_end_ns);
// The same with the time counted for it apart from its span: a reload's
// copies' own time, its span also holding the gaps where the host mapped
// the next chunk (the timeline draws the span).
void ao_rec_interval_busy(int kind, int layer, int mb, uint64_t bytes, uint64_t gpu_start_ns,
                          uint64_t gpu_end_ns, uint64_t busy_ns);
// Copies issued for a layer: out (offload) or back (reload; missed: the
// prefetch had not asked for it before its own backward).
void ao_rec_offload(int layer, int mb, unsigned buffers, uint64_t bytes);
// A layer's early copies (engine.c) issued at its end: a copy of its own,
// timed apart; the bytes count with the layer's offload at its release point.
void ao_rec_early_copy(int layer, int mb);
// rest: the chunks a reload left for the next boundary (engine.c), counted
// as part of that reload.
void ao_rec_reload(int layer, int mb, unsigned buffers, uint64_t bytes, bool missed, bool rest);
// A kernel needed an offloaded buffer outside the schedule (safety net).
void ao_rec_late_reload(int layer, int mb, const char *kernel);
// Device memory of a layer's tracked buffers changed: resident (mapped) and
// offloaded (only in host memory) bytes. layer -1: not a layer's.
void ao_rec_memory(int layer, int64_t resident_delta, int64_t offloaded_delta);
// A tracked allocation (for the call-site table): its site's index, or -1.
int ao_rec_alloc(int layer, uint64_t bytes);
// A site's buffer left the device (offloaded: copied out and released; or
// freed) or came back: resident_delta, and bytes offloaded.
void ao_rec_site(int site, int64_t resident_delta, uint64_t offloaded);
// aoshim_step_end.
void ao_rec_step(void);
// Whether offloading is on, as start-up decided: off, or declined (why:
// a string that lives as long as the process), or neither.
void ao_rec_offloading(bool off, const char *declined);
// The device, once known (engine start): its name and memory capacity in
// bytes (0: unknown). The name is copied.
void ao_rec_device(const char *name, uint64_t capacity);
// Who marks the layers (aoshim_set_frontend): one line, kept for the report.
void ao_rec_frontend(const char *text);
// The planner's latest plan (AOSHIM_OFFLOAD_LAYERS=auto), one line, and how
// many plans it made.
void ao_rec_plan(const char *text, unsigned plans);

#endif // AO_RECORD_H
