// SPDX-License-Identifier: MIT
#include "ptrmap.h"

#include <stdint.h>
#include <stdlib.h>

#define EMPTY 0ull
#define GONE 1ull // tombstone; device pointers are never 0 or 1

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
        while (n[j].key != EMPTY) j = (j + 1) & (ncap - 1);
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
    pthread_mutex_lock(&m->mu);
    bool ok = true;
    if ((m->used + 1) * 4 >= m->cap * 3)
        ok = rehash(m, !m->cap ? 1024 : m->live * 2 >= m->cap ? m->cap * 2 : m->cap);
    if (ok) {
        size_t j = find(m, key);
        if (j == SIZE_MAX) {
            // A new key goes in the first tombstone or empty slot of its chain.
            j = hash(key) & (m->cap - 1);
            while (m->tab[j].key > GONE) j = (j + 1) & (m->cap - 1);
            if (m->tab[j].key == EMPTY) m->used++;
            m->live++;
        }
        m->tab[j] = (ao_ptrmap_slot_t){key, value};
    }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

uint64_t ao_ptrmap_get(ao_ptrmap_t *m, uint64_t key)
{
    pthread_mutex_lock(&m->mu);
    size_t j = find(m, key);
    uint64_t v = j == SIZE_MAX ? 0 : m->tab[j].value;
    pthread_mutex_unlock(&m->mu);
    return v;
}

uint64_t ao_ptrmap_take(ao_ptrmap_t *m, uint64_t key)
{
    pthread_mutex_lock(&m->mu);
    size_t j = find(m, key);
    uint64_t v = 0;
    if (j != SIZE_MAX) {
        v = m->tab[j].value;
        m->tab[j].key = GONE;
        m->live--;
    }
    pthread_mutex_unlock(&m->mu);
    return v;
}

size_t ao_ptrmap_count(ao_ptrmap_t *m)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->live;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void ao_ptrmap_clear(ao_ptrmap_t *m)
{
    pthread_mutex_lock(&m->mu);
    free(m->tab);
    m->tab = NULL;
    m->cap = m->used = m->live = 0;
    pthread_mutex_unlock(&m->mu);
}
