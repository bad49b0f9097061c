// SPDX-License-Identifier: MIT
#include "cuda/nccl.h"

#include <dlfcn.h>
#include <pthread.h>

static ao_real_nccl_t table;
static pthread_once_t once = PTHREAD_ONCE_INIT;

// dlsym here is aoshim's own (hook/dlsym.c), which passes RTLD_NEXT to the
// real one by a tail jump: the lookup is relative to libaoshim.so, so it
// finds the program's libnccl and never aoshim's wrappers.
static void resolve(void)
{
#define X(name) table.name = (__typeof__(&name))dlsym(RTLD_NEXT, #name);
    AO_REAL_NCCL(X)
#undef X
}

const ao_real_nccl_t *ao_real_nccl(void)
{
    pthread_once(&once, resolve);
    return &table;
}
