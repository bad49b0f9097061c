// SPDX-License-Identifier: MIT
// The re-entry guard: aoshim's own calls into CUDA, and a runtime calling
// the driver through entry points aoshim handed out, pass straight through
// its hooks. Ground floor: every part of aoshim that calls CUDA uses it.
#ifndef AO_CUDA_GUARD_H
#define AO_CUDA_GUARD_H

#include <stdbool.h>

#include "log.h"

extern AO_TLS int ao_in_hook;
#define AO_REAL_CALL(expr)                                                                         \
    ({                                                                                             \
        ao_in_hook++;                                                                              \
        __typeof__(expr) r_ = (expr);                                                              \
        ao_in_hook--;                                                                              \
        r_;                                                                                        \
    })

// Set once any CUDA allocation went through aoshim: the exit summary is for
// processes that used the GPU, not for every process under LD_PRELOAD.
extern bool ao_cuda_touched;

#endif // AO_CUDA_GUARD_H
