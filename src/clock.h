// SPDX-License-Identifier: MIT
// The host's monotonic clock in nanoseconds (the vDSO: no system call), for
// the report's timeline, the step trace and the time spent in VMM calls.
#ifndef AO_CLOCK_H
#define AO_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t ao_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif // AO_CLOCK_H
