// SPDX-License-Identifier: MIT
// With next_b.c: two libraries defining the same function, the first asking
// dlsym(RTLD_NEXT) for the next one. Under aoshim's dlsym the answer must
// still be relative to this library (the caller), not to aoshim.
#include <dlfcn.h>

__attribute__((visibility("default"))) int which(void)
{
    return 1;
}

__attribute__((visibility("default"))) int next_which(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "which");
    return next ? next() : -1;
}
