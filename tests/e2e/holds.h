// SPDX-License-Identifier: MIT
// Whether a buffer holds what was written into it: its first and last bytes
// are v, read back on stream s (the host waits for them). Define PROG
// before including (check.h).
#ifndef E2E_HOLDS_H
#define E2E_HOLDS_H

#include <cuda_runtime_api.h>

#include "check.h"

static inline int holds(cudaStream_t s, const void *p, size_t n, unsigned char v)
{
    unsigned char b[2];
    CHECK(cudaMemcpyAsync(&b[0], p, 1, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(&b[1], (const char *)p + n - 1, 1, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    return b[0] == v && b[1] == v;
}

#endif // E2E_HOLDS_H
