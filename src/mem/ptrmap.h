// SPDX-License-Identifier: MIT
// Pointer -> size for device allocations aoshim passes through to the real
// allocator, so that their frees are accounted. Open addressing, linear
// probing, one mutex: allocation calls are not the launch hot path, and the
// real allocator behind them takes its own locks.
#ifndef AO_PTRMAP_H
#define AO_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Record p -> size. Returns false if the table cannot grow (not recorded).
bool ao_ptrmap_put(uint64_t p, uint64_t size);
// Remove p; its size, or 0 if p was not recorded.
uint64_t ao_ptrmap_take(uint64_t p);
size_t ao_ptrmap_count(void);

#endif // AO_PTRMAP_H
