// SPDX-License-Identifier: MIT
// The program's own memory as it would be without aoshim: every allocation
// the program made, stream-ordered ones in one modelled pool (the device's
// default pool, which cudaMallocAsync serves), the others beside it. The
// pool's reserve is what fragments: first fit by address, growing at its end
// by what its free tail lacks, in 2 MiB steps (tests/sim/README.md, "Chunks
// of 2 MiB, at the reserve's end": within 1% of the H200's count). The
// report's "peak without offloading" under a pool that keeps what it frees
// (report/summary.c): aoshim moves the program's buffers into its own memory,
// so the real pool cannot show its fragments any more.
//
// Not modelled: the program trimming its pool, a release threshold that
// gives memory back at synchronisations, streams (every free is reusable at
// once, as on one stream). Thread-safe.
#ifndef AO_POOLMODEL_H
#define AO_POOLMODEL_H

#include <stdbool.h>
#include <stdint.h>

// The program allocated size bytes at addr: from the pool (stream-ordered)
// or not.
void ao_poolmodel_alloc(uint64_t addr, uint64_t size, bool pool);
// The program freed addr (nothing if the model did not see it allocated).
void ao_poolmodel_free(uint64_t addr);
// The high-water mark of the pool's reserve plus the other allocations,
// and whether any pool allocation was seen (false once the model gave up:
// more than 4096 holes in its reserve, which a first fit would walk at
// every allocation).
uint64_t ao_poolmodel_peak(bool *pool_seen);
// The pool's modelled reserve and allocated bytes now (tests).
void ao_poolmodel_now(uint64_t *reserved, uint64_t *used);
// Forget everything (tests).
void ao_poolmodel_reset(void);

#endif // AO_POOLMODEL_H
