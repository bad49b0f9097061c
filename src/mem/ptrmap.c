// SPDX-License-Identifier: MIT
#include "ptrmap.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define EMPTY 0ull
#define GONE 1ull // tombstone; device pointers are never 0 or 1

typedef struct slot_s {
    uint64_t key, size;
} slot_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static slot_t *tab;
static size_t cap, used, live; // used counts tombstones too

static size_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static bool rehash(size_t ncap)
{
    slot_t *n = calloc(ncap, sizeof *n);
    if (!n) return false;
    for (size_t i = 0; i < cap; i++) {
        if (tab[i].key <= GONE) continue;
        size_t j = hash(tab[i].key) & (ncap - 1);
        while (n[j].key != EMPTY) j = (j + 1) & (ncap - 1);
        n[j] = tab[i];
    }
    free(tab);
    tab = n;
    cap = ncap;
    used = live;
    return true;
}

bool ao_ptrmap_put(uint64_t p, uint64_t size)
{
    pthread_mutex_lock(&mu);
    bool ok = true;
    if ((used + 1) * 4 >= cap * 3) ok = rehash(cap ? (live * 2 >= cap ? cap * 2 : cap) : 1024);
    if (ok) {
        // Probe to p or an empty slot; a new key goes in the first tombstone seen.
        size_t j = hash(p) & (cap - 1), tomb = SIZE_MAX;
        while (tab[j].key != EMPTY && tab[j].key != p) {
            if (tab[j].key == GONE && tomb == SIZE_MAX) tomb = j;
            j = (j + 1) & (cap - 1);
        }
        if (tab[j].key != p) {
            live++;
            if (tomb != SIZE_MAX) j = tomb;
            else used++;
        }
        tab[j] = (slot_t){p, size};
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

uint64_t ao_ptrmap_take(uint64_t p)
{
    uint64_t size = 0;
    pthread_mutex_lock(&mu);
    if (cap) {
        size_t j = hash(p) & (cap - 1);
        while (tab[j].key != EMPTY) {
            if (tab[j].key == p) {
                size = tab[j].size;
                tab[j].key = GONE;
                live--;
                break;
            }
            j = (j + 1) & (cap - 1);
        }
    }
    pthread_mutex_unlock(&mu);
    return size;
}

size_t ao_ptrmap_count(void)
{
    pthread_mutex_lock(&mu);
    size_t n = live;
    pthread_mutex_unlock(&mu);
    return n;
}
