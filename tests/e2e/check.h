// SPDX-License-Identifier: MIT
// The end-to-end programs' error check: a call that returns an error prints
// "<PROG>: <call> failed: <code>" and exits 1. Define PROG (the program's
// name) before including.
#ifndef E2E_CHECK_H
#define E2E_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        int e_ = (int)(x);                                                                         \
        if (e_) {                                                                                  \
            fprintf(stderr, PROG ": %s failed: %d\n", #x, e_);                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif // E2E_CHECK_H
