// SPDX-License-Identifier: MIT
// The pinned host pool. Pinning costs about 0.4 s per GiB, so host memory is
// pinned in large chunks the first time it is needed and reused for every
// later step; AOSHIM_HOST_LIMIT caps the total. Not thread-safe (engine lock).
#ifndef AO_HOSTPOOL_H
#define AO_HOSTPOOL_H

#include <stddef.h>
#include <stdint.h>

#define AO_HOST_CHUNK (256ull << 20)
#define AO_HOST_ALIGN 4096ull

enum { AO_HOST_OK = 0, AO_HOST_LIMIT = -1, AO_HOST_PIN_FAILED = -2 };

// A slot of at least size bytes: AO_HOST_OK and *out, or why not.
int ao_host_alloc(size_t size, void **out);
void ao_host_free(void *p, size_t size);
// Every chunk no slot uses given back (cuMemFreeHost), with no copy in
// flight: when a plan offloads nothing, the first step's pinned memory is
// the program's again. Returns the bytes unpinned.
uint64_t ao_host_trim(void);
// At exit, with no copy in flight: every pinned chunk given back (each
// cuMemFreeHost tried twice). CUDA_SUCCESS or the first error that stayed.
int ao_host_fini(void);

#endif // AO_HOSTPOOL_H
