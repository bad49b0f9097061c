// SPDX-License-Identifier: MIT
#include "stats.h"

uint64_t ao_stats[AO_STAT_COUNT];
static uint64_t step_peak_without, step_peak_with;
const char *const ao_stat_label[AO_STAT_COUNT] = {
#define X(NAME, label) label,
    AO_STATS(X)
#undef X
};

static void step_max(uint64_t *m, uint64_t v)
{
    uint64_t cur = __atomic_load_n(m, __ATOMIC_RELAXED);
    while (v > cur &&
           !__atomic_compare_exchange_n(m, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void ao_stat_device(int64_t passthrough, int64_t resident, int64_t live)
{
    if (passthrough) ao_stat_add(AO_STAT_PASSTHROUGH_BYTES, passthrough);
    if (resident) ao_stat_add(AO_STAT_TRACKED_RESIDENT_BYTES, resident);
    if (live) ao_stat_add(AO_STAT_TRACKED_LIVE_BYTES, live);
    uint64_t pt = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    uint64_t with = pt + ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES);
    ao_stat_max(AO_STAT_PEAK_DEVICE_BYTES, with);
    uint64_t without = pt + ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES);
    ao_stat_max(AO_STAT_PEAK_WITHOUT_BYTES, without);
    step_max(&step_peak_without, without);
    step_max(&step_peak_with, with);
}

uint64_t ao_stat_step_peak_without(void)
{
    return __atomic_load_n(&step_peak_without, __ATOMIC_RELAXED);
}

uint64_t ao_stat_step_peak_with(void)
{
    return __atomic_load_n(&step_peak_with, __ATOMIC_RELAXED);
}

void ao_stat_step_reset(void)
{
    uint64_t pt = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    __atomic_store_n(&step_peak_without, pt + ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&step_peak_with, pt + ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES),
                     __ATOMIC_RELAXED);
}
