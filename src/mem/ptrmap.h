// SPDX-License-Identifier: MIT
// Address -> value maps: device pointers aoshim passed through (value: size)
// and tracked buffers (value: the buffer). Open addressing, linear probing,
// one spinlock per map: every pass-through allocation and free takes it, the
// critical section is a few dozen instructions (a rehash is rare), and an
// uncontended pthread mutex costs more than the section itself.
#ifndef AO_PTRMAP_H
#define AO_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ao_ptrmap_slot_s {
    uint64_t key, value;
} ao_ptrmap_slot_t;

typedef struct ao_ptrmap_s {
    int lock;
    ao_ptrmap_slot_t *tab;
    size_t cap, used, live; // used counts tombstones too
} ao_ptrmap_t;

#define AO_PTRMAP_INIT                                                                             \
    {                                                                                              \
        .lock = 0                                                                                  \
    }

// Record key -> value (key > 1). Returns false if the table cannot grow.
bool ao_ptrmap_put(ao_ptrmap_t *m, uint64_t key, uint64_t value);
// The value for key, or 0.
uint64_t ao_ptrmap_get(ao_ptrmap_t *m, uint64_t key);
// Remove key; its value, or 0 if it was not there.
uint64_t ao_ptrmap_take(ao_ptrmap_t *m, uint64_t key);
size_t ao_ptrmap_count(ao_ptrmap_t *m);
// Drop every entry and the table.
void ao_ptrmap_clear(ao_ptrmap_t *m);

#endif // AO_PTRMAP_H
