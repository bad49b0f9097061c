// SPDX-License-Identifier: MIT
#include "ptrmap.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#define EMPTY 0ull
#define GONE  1ull // tombstone; device pointers are never 0 or 1

static void lock(ao_ptrmap_t *m)
{
    while (__atomic_exchange_n(&m->lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&m->lock, __ATOMIC_RELAXED))
            sched_yield();
}

static void unlock(ao_ptrmap_t *m)
{
    __atomic_store_n(&m->lock, 0, __ATOMIC_RELEASE);
}

static size_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static bool rehash(ao_ptrmap_t *m, size_t ncap)
{
    ao_ptrmap_slot_t *n = calloc(ncap, sizeof *n);
    if (!n) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->tab[i].key <= GONE) continue;
        size_t j = hash(m->tab[i].key) & (ncap - 1);
        while (n[j].key != EMPTY)
            j = (j + 1) & (ncap - 1);
        n[j] = m->tab[i];
    }
    free(m->tab);
    m->tab = n;
    m->cap = ncap;
    m->used = m->live;
    return true;
}

// Slot holding key, or SIZE_MAX.
static size_t find(const ao_ptrmap_t *m, uint64_t key)
{
    if (!m->cap) return SIZE_MAX;
    for (size_t j = hash(key) & (m->cap - 1); m->tab[j].key != EMPTY; j = (j + 1) & (m->cap - 1))
        if (m->tab[j].key == key) return j;
    return SIZE_MAX;
}

bool ao_ptrmap_put(ao_ptrmap_t *m, uint64_t key, uint64_t value)
{
    lock(m);
    bool ok = true;
    if ((m->used + 1) * 4 >= m->cap * 3)
        ok = rehash(m, !m->cap ? 1024 : m->live * 2 >= m->cap ? m->cap * 2 : m->cap);
    if (ok) {
        // One probe: stop at the key or an empty slot; a new key goes in the
        // first tombstone passed on the way, else in the empty slot.
        size_t mask = m->cap - 1, j = hash(key) & mask, tomb = SIZE_MAX;
        for (; m->tab[j].key != EMPTY && m->tab[j].key != key; j = (j + 1) & mask)
            if (m->tab[j].key == GONE && tomb == SIZE_MAX) tomb = j;
        if (m->tab[j].key != key) {
            m->live++;
            if (tomb != SIZE_MAX)
                j = tomb;
            else
                m->used++;
        }
        m->tab[j] = (ao_ptrmap_slot_t){key, value};
    }
    unlock(m);
    return ok;
}

uint64_t ao_ptrmap_get(ao_ptrmap_t *m, uint64_t key)
{
    lock(m);
    size_t j = find(m, key);
    uint64_t v = j == SIZE_MAX ? 0 : m->tab[j].value;
    unlock(m);
    return v;
}

uint64_t ao_ptrmap_take(ao_ptrmap_t *m, uint64_t key)
{
    lock(m);
    size_t j = find(m, key);
    uint64_t v = 0;
    if (j != SIZE_MAX) {
        v = m->tab[j].value;
        m->tab[j].key = GONE;
        m->live--;
    }
    unlock(m);
    return v;
}

size_t ao_ptrmap_count(ao_ptrmap_t *m)
{
    lock(m);
    size_t n = m->live;
    unlock(m);
    return n;
}

void ao_ptrmap_clear(ao_ptrmap_t *m)
{
    lock(m);
    free(m->tab);
    m->tab = NULL;
    m->cap = m->used = m->live = 0;
    unlock(m);
}
