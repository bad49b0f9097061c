// SPDX-License-Identifier: MIT
#ifndef AO_SUMMARY_H
#define AO_SUMMARY_H

#include <stdbool.h>

// Format a byte count with a binary unit ("12.4 GiB") into buf.
const char *ao_fmt_bytes(char *buf, unsigned long size, unsigned long long bytes);
// The device's memory in use at its peak as the driver counted it (0: never
// sampled), and the same without offloading, modelled (see summary.c).
unsigned long long ao_device_peak(void);
unsigned long long ao_device_peak_without(void);
// The device without aoshim from the program's side (0: not known; see
// summary.c), and by how much the peak passed it beyond 3% (0: not).
unsigned long long ao_device_without_program(void);
unsigned long long ao_device_maybe_more(void);
// Whether that is measured (no layer was offloaded) rather than modelled.
bool ao_device_without_measured(void);
// How: "measured", "pool" (the program's allocations in one modelled pool:
// mem/poolmodel.h) or "allocations" (their peak with what the device held
// beyond them).
const char *ao_device_without_how(void);
// The exit summary on fd: counters only, no CUDA call (the driver may be gone).
void ao_summary_write(int fd);

#endif // AO_SUMMARY_H
