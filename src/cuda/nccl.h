// SPDX-License-Identifier: MIT
// The real NCCL entry points aoshim wraps (hook/nccl.c), in one table like
// the CUDA ones (real.h): each is the next definition after the shim (the
// program's libnccl), resolved once, at the first collective. A program
// without NCCL never calls them; a NULL entry means its libnccl lacks it.
#ifndef AO_CUDA_NCCL_H
#define AO_CUDA_NCCL_H

#include <nccl.h>

#define AO_REAL_NCCL(X)                                                                            \
    X(ncclAllReduce)                                                                               \
    X(ncclAllGather)                                                                               \
    X(ncclReduceScatter)                                                                           \
    X(ncclBroadcast)                                                                               \
    X(ncclReduce)                                                                                  \
    X(ncclSend)                                                                                    \
    X(ncclRecv)                                                                                    \
    X(ncclCommCount)

typedef struct ao_real_nccl_s {
#define X(name) __typeof__(&name) name;
    AO_REAL_NCCL(X)
#undef X
} ao_real_nccl_t;

// The table, resolved on the first call (later calls return it at once).
const ao_real_nccl_t *ao_real_nccl(void);

#endif // AO_CUDA_NCCL_H
