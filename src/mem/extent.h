// SPDX-License-Identifier: MIT
// A set of free extents [lo, lo+len), sorted by address: first-fit (or
// best-fit) allocation, coalescing free. Serves the device address space and the
// pinned host chunks. Not thread-safe (callers hold the engine lock).
#ifndef AO_EXTENT_H
#define AO_EXTENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct ao_extent_s {
    uint64_t lo, len;
} ao_extent_t;

typedef struct ao_extents_s {
    ao_extent_t *v;
    size_t n, cap;
} ao_extents_t;

// Take len bytes (len already rounded by the caller): 0 and *out, or -1.
int ao_extents_take(ao_extents_t *e, uint64_t len, uint64_t *out);
// The smallest free extent of at least len bytes: its length (0: none),
// and at its index, from which ao_extents_take_at takes len bytes (its start).
uint64_t ao_extents_best(const ao_extents_t *e, uint64_t len, size_t *at);
void ao_extents_take_at(ao_extents_t *e, size_t at, uint64_t len, uint64_t *out);
// Give [lo, lo+len) back. -1 only if the list cannot grow (range lost, never reused).
int ao_extents_give(ao_extents_t *e, uint64_t lo, uint64_t len);
// Bytes free in total.
uint64_t ao_extents_free_bytes(const ao_extents_t *e);
void ao_extents_clear(ao_extents_t *e);

#endif // AO_EXTENT_H
