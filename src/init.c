// SPDX-License-Identifier: MIT
// Load-time setup and exit of libaoshim.so.
//
// Every process under LD_PRELOAD loads the shim (launchers, compilers,
// data-loader workers), so the constructor only reads the environment: CUDA
// itself is touched lazily, at the first intercepted call. A bad AOSHIM_*
// value stops the program here, before main, with exit status 2: that is the
// one place aoshim may end a program, because nothing has run yet.
#define AOSHIM_BUILDING_LIBRARY 1
#include "aoshim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "hook/hook.h"
#include "hook/real.h"
#include "log.h"
#include "offload/engine.h"
#include "report/report.h"

#define AO_STR2(x) #x
#define AO_STR(x)  AO_STR2(x)
#define AO_VERSION_STRING                                                                          \
    AO_STR(AOSHIM_VERSION_MAJOR) "." AO_STR(AOSHIM_VERSION_MINOR) "." AO_STR(AOSHIM_VERSION_PATCH)

static bool forked_child;

// A forked child (a data-loader worker) shares no CUDA state with its parent:
// it passes everything through and never writes the parent's report.
static void at_fork_child(void)
{
    forked_child = true;
    ao_engine_off = true;
}

// PyTorch hides tensors inside cached segments unless told otherwise; with
// the cudaMallocAsync backend every tensor is its own allocation, which is
// what aoshim can offload. Set it when the user has not chosen; when the user
// chose a caching configuration, offloading would move segments aoshim does
// not understand, so the engine declines (and says so once, at the first
// layer boundary).
static void pytorch_allocator(void)
{
    const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
    const char *nocache = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    if (nocache && strcmp(nocache, "0") != 0) return; // every tensor a cudaMalloc
    if (!conf) {
        setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 0);
        if (ao_config.verbose)
            ao_log(AO_LOG_INFO, "set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync");
    } else if (!strstr(conf, "backend:cudaMallocAsync")) {
        ao_engine_declined = "PYTORCH_CUDA_ALLOC_CONF selects PyTorch's caching allocator, which "
                             "hides tensors inside cached segments; use backend:cudaMallocAsync "
                             "(or unset it) to offload";
    }
}

__attribute__((constructor)) static void ao_init(void)
{
    char err[768];
    if (ao_config_load(&ao_config, NULL, err, sizeof err) < 0) {
        ao_log(AO_LOG_ERROR, "%s", err + sizeof "aoshim: error: " - 1);
        _exit(2);
    }
    if (ao_config.verbose) {
        ao_log(AO_LOG_INFO, "version %s, pid %d", AO_VERSION_STRING, (int)getpid());
        ao_config_print(2);
    }
    ao_engine_off = !ao_config.enable;
    if (ao_engine_off) return;
    pytorch_allocator();
    pthread_atfork(NULL, NULL, at_fork_child);
    ao_real_runtime_init();
}

__attribute__((destructor)) static void ao_fini(void)
{
    // A forked child never writes its parent's report; a process that never
    // used CUDA (a launcher, a compiler) writes nothing.
    if (forked_child || !ao_cuda_touched) return;
    ao_report_all(!ao_config.quiet);
}

AOSHIM_API const char *aoshim_version(void)
{
    return AO_VERSION_STRING;
}

AOSHIM_API int aoshim_report_now(void)
{
    if (forked_child) return AOSHIM_ESTATE;
    ao_report_all(true);
    return 0;
}
