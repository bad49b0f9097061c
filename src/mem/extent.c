// SPDX-License-Identifier: MIT
#include "extent.h"

#include <stdlib.h>
#include <string.h>

void ao_extents_take_at(ao_extents_t *e, size_t i, uint64_t len, uint64_t *out)
{
    *out = e->v[i].lo;
    e->v[i].lo += len;
    e->v[i].len -= len;
    if (e->v[i].len == 0) {
        memmove(e->v + i, e->v + i + 1, (e->n - i - 1) * sizeof *e->v);
        e->n--;
    }
}

int ao_extents_take(ao_extents_t *e, uint64_t len, uint64_t *out)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i].len >= len) {
            ao_extents_take_at(e, i, len, out);
            return 0;
        }
    return -1;
}

uint64_t ao_extents_best(const ao_extents_t *e, uint64_t len, size_t *at)
{
    uint64_t best = 0;
    for (size_t i = 0; i < e->n && best != len; i++) // an exact fit is the best
        if (e->v[i].len >= len && (!best || e->v[i].len < best)) {
            best = e->v[i].len;
            *at = i;
        }
    return best;
}

int ao_extents_give(ao_extents_t *e, uint64_t lo, uint64_t len)
{
    size_t lo_i = 0, hi_i = e->n; // first extent at or above lo
    while (lo_i < hi_i) {
        size_t mid = (lo_i + hi_i) / 2;
        if (e->v[mid].lo < lo)
            lo_i = mid + 1;
        else
            hi_i = mid;
    }
    size_t i = lo_i;
    int join_prev = i > 0 && e->v[i - 1].lo + e->v[i - 1].len == lo;
    int join_next = i < e->n && lo + len == e->v[i].lo;
    if (join_prev && join_next) {
        e->v[i - 1].len += len + e->v[i].len;
        memmove(e->v + i, e->v + i + 1, (e->n - i - 1) * sizeof *e->v);
        e->n--;
    } else if (join_prev) {
        e->v[i - 1].len += len;
    } else if (join_next) {
        e->v[i].lo = lo;
        e->v[i].len += len;
    } else {
        if (e->n == e->cap) {
            size_t cap = e->cap ? e->cap * 2 : 64;
            ao_extent_t *n = realloc(e->v, cap * sizeof *n);
            if (!n) return -1;
            e->v = n;
            e->cap = cap;
        }
        memmove(e->v + i + 1, e->v + i, (e->n - i) * sizeof *e->v);
        e->v[i] = (ao_extent_t){lo, len};
        e->n++;
    }
    return 0;
}

uint64_t ao_extents_free_bytes(const ao_extents_t *e)
{
    uint64_t s = 0;
    for (size_t i = 0; i < e->n; i++)
        s += e->v[i].len;
    return s;
}

void ao_extents_clear(ao_extents_t *e)
{
    free(e->v);
    memset(e, 0, sizeof *e);
}
