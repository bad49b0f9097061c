// SPDX-License-Identifier: MIT
// The run's record, kept for the exit report. (First version: per-layer
// totals only; the timeline, trace, call sites and file writers come with the
// report work.)
#include "record.h"

#include "offload/engine.h"

void ao_rec_interval(int kind, int layer, int mb, uint64_t bytes, uint64_t s, uint64_t e)
{
    (void)kind, (void)layer, (void)mb, (void)bytes, (void)s, (void)e;
}
void ao_rec_offload(int layer, int mb, unsigned buffers, uint64_t bytes)
{
    (void)layer, (void)mb, (void)buffers, (void)bytes;
}
void ao_rec_reload(int layer, int mb, unsigned buffers, uint64_t bytes, bool missed)
{
    (void)layer, (void)mb, (void)buffers, (void)bytes, (void)missed;
}
void ao_rec_late_reload(int layer, int mb, const char *kernel)
{
    (void)layer, (void)mb, (void)kernel;
}
void ao_rec_memory(int layer, int64_t resident_delta, int64_t offloaded_delta)
{
    (void)layer, (void)resident_delta, (void)offloaded_delta;
}
void ao_rec_alloc(int layer, uint64_t bytes)
{
    (void)layer, (void)bytes;
}
void ao_rec_step(void) {}
