// SPDX-License-Identifier: MIT
#include "stats.h"

#include <stdio.h>

uint64_t ao_stats[AO_STAT_COUNT];
static uint64_t step_peak_without, step_peak_with;
int ao_stat_where_now;
void (*ao_stat_on_high)(void);
void (*ao_stat_on_peak_without)(void);
static int step_peak_where;
const char *const ao_stat_label[AO_STAT_COUNT] = {
#define X(NAME, label) label,
    AO_STATS(X)
#undef X
};

// Whether v became the new maximum.
static bool step_max(uint64_t *m, uint64_t v)
{
    uint64_t cur = __atomic_load_n(m, __ATOMIC_RELAXED);
    while (v > cur &&
           !__atomic_compare_exchange_n(m, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return v > cur;
}

static void peak_without_hook(void)
{
    void (*hook)(void) = __atomic_load_n(&ao_stat_on_peak_without, __ATOMIC_ACQUIRE);
    if (hook) hook();
}

void ao_stat_device(int64_t passthrough, int64_t resident, int64_t live)
{
    if (passthrough) ao_stat_add(AO_STAT_PASSTHROUGH_BYTES, passthrough);
    if (resident) ao_stat_add(AO_STAT_TRACKED_RESIDENT_BYTES, resident);
    if (live) ao_stat_add(AO_STAT_TRACKED_LIVE_BYTES, live);
    uint64_t pt = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    uint64_t with = pt + ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES);
    ao_stat_max(AO_STAT_PEAK_DEVICE_BYTES, with);
    void (*hook)(void) = __atomic_load_n(&ao_stat_on_high, __ATOMIC_ACQUIRE);
    if (hook) {
        static uint64_t last; // the high at the last call
        uint64_t l = __atomic_load_n(&last, __ATOMIC_RELAXED);
        if (with > l + (l >> 8) + (2u << 20) &&
            __atomic_compare_exchange_n(&last, &l, with, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            hook();
    }
    uint64_t without = pt + ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES);
    ao_stat_max(AO_STAT_PEAK_WITHOUT_BYTES, without);
    if (passthrough > 0)
        ao_stat_max(AO_STAT_PEAK_NEED_BYTES, pt + ao_stat_get(AO_STAT_TRACKED_NEED_BYTES));
    if (step_max(&step_peak_without, without)) {
        __atomic_store_n(&step_peak_where, __atomic_load_n(&ao_stat_where_now, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        peak_without_hook();
    }
    step_max(&step_peak_with, with);
}

void ao_stat_need(int64_t bytes)
{
    ao_stat_add(AO_STAT_TRACKED_NEED_BYTES, bytes);
    if (bytes > 0)
        ao_stat_max(AO_STAT_PEAK_NEED_BYTES, ao_stat_get(AO_STAT_PASSTHROUGH_BYTES) +
                                                 ao_stat_get(AO_STAT_TRACKED_NEED_BYTES));
}

uint64_t ao_stat_step_peak_without(void)
{
    return __atomic_load_n(&step_peak_without, __ATOMIC_RELAXED);
}

uint64_t ao_stat_step_peak_with(void)
{
    return __atomic_load_n(&step_peak_with, __ATOMIC_RELAXED);
}

int ao_stat_step_peak_where(void)
{
    return __atomic_load_n(&step_peak_where, __ATOMIC_RELAXED);
}

void ao_stat_where_text(int where, int nlayers, char *out, unsigned n)
{
    if (nlayers > 0 && where == AO_WHERE_ENDED + nlayers - 1) // what comes before the backward
        snprintf(out, n, "the head (after the last layer's forward, layer %d)", nlayers - 1);
    else if (where >= AO_WHERE_ENDED)
        snprintf(out, n, "no layer (after the forward of layer %d)", where - AO_WHERE_ENDED);
    else if (where >= AO_WHERE_FORWARD)
        snprintf(out, n, "the forward of layer %d", where - AO_WHERE_FORWARD);
    else
        snprintf(out, n, "%s",
                 where == AO_WHERE_BACKWARD  ? "the backward"
                 : where == AO_WHERE_AFTER   ? "the optimizer (after the backward)"
                 : where == AO_WHERE_OUTSIDE ? "no layer (before the forward)"
                                             : "a place not known (before any layer call)");
}

void ao_stat_step_reset(void)
{
    __atomic_store_n(&step_peak_where, __atomic_load_n(&ao_stat_where_now, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    uint64_t pt = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    __atomic_store_n(&step_peak_without, pt + ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&step_peak_with, pt + ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES),
                     __ATOMIC_RELAXED);
    peak_without_hook();
}
