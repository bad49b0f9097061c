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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "ctllog.h"
#include "hook/hook.h"
#include "cuda/real.h"
#include "log.h"
#include "offload/engine.h"
#include "pyboot.h"
#include "report/record.h"
#include "report/report.h"
#include "steptrace/steptrace.h"

#define AO_STR2(x) #x
#define AO_STR(x)  AO_STR2(x)
#define AO_VERSION_STRING                                                                          \
    AO_STR(AOSHIM_VERSION_MAJOR) "." AO_STR(AOSHIM_VERSION_MINOR) "." AO_STR(AOSHIM_VERSION_PATCH)

static bool forked_child;

// A forked child (a data-loader worker) shares no CUDA state with its parent:
// it passes everything through and never writes the parent's report nor its
// control log.
static void at_fork_child(void)
{
    forked_child = true;
    ao_engine_off = true;
    ao_ctllog_forked();
    ao_tr_forked();
}

// PyTorch hides tensors inside cached segments unless told otherwise; with
// the cudaMallocAsync backend every tensor is its own allocation, which is
// what aoshim can offload. Two variables choose it: PYTORCH_CUDA_ALLOC_CONF
// and, from torch 2.9, PYTORCH_ALLOC_CONF; which one wins when both are set
// differs between torch versions and between c10's own parsers, so a user's
// choice is judged by every variable set. When the user set neither, aoshim
// sets PYTORCH_CUDA_ALLOC_CONF (read by every version). When the user set
// either, aoshim sets nothing; unless each one set selects
// backend:cudaMallocAsync, offloading would move segments aoshim does not
// understand, so the engine declines (and says so once, at the first layer
// boundary).
static void pytorch_allocator(void)
{
    static const char *const vars[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
    static char why[512];
    const char *nocache = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    if (nocache && strcmp(nocache, "0") != 0) return; // every tensor a cudaMalloc
    int set = 0, caching = 0;
    char names[64] = "";
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *conf = getenv(vars[i]);
        if (!conf) continue;
        set++;
        if (strstr(conf, "backend:cudaMallocAsync")) continue;
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 caching++ ? " and " : "", vars[i]);
    }
    if (!set) {
        setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 0);
        if (ao_config.verbose)
            ao_log(AO_LOG_INFO, "set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync");
    } else if (caching) {
        snprintf(why, sizeof why,
                 "%s %s PyTorch's caching allocator, which hides tensors inside cached segments; "
                 "use backend:cudaMallocAsync (or unset %s) to offload",
                 names, caching > 1 ? "select" : "selects", caching > 1 ? "them" : "it");
        ao_engine_declined = why;
    }
}

__attribute__((constructor)) static void ao_init(void)
{
    char err[768];
    // A file name that cannot be written is a bad value too, said now, not
    // after a long run. The reports are written only with the engine on; the
    // control log always. Before the verbose listing: the error is the one line.
    if (ao_config_load(&ao_config, NULL, err, sizeof err) < 0 ||
        ao_report_check_paths(ao_config.enable, err, sizeof err) < 0) {
        ao_log(AO_LOG_ERROR, "%s", err + sizeof "aoshim: error: " - 1);
        _exit(2);
    }
    if (ao_config.verbose) {
        ao_log(AO_LOG_INFO, "version %s, pid %d", AO_VERSION_STRING, (int)getpid());
        ao_config_print(2);
    }
    // Registered whatever AOSHIM_ENABLE says: the control log is written
    // when the engine is off too, and a child must not write its parent's.
    pthread_atfork(NULL, NULL, at_fork_child);
    ao_engine_off = !ao_config.enable;
    // The step trace records with the engine on or off (AOSHIM_ENABLE=0 and
    // AOSHIM_RECORD: record only, every call passed through as it came).
    ao_tr_init();
    if (!ao_engine_off) pytorch_allocator();
    ao_rec_offloading(ao_engine_off, ao_engine_declined);
    // Record only still marks a PyTorch model's blocks: the trace's layer
    // records are what a replay places its control calls by.
    if (ao_engine_off && !ao_config.record) return;
    ao_pyboot_init();
    if (ao_engine_off) return;
    ao_real_runtime_init();
}

// Whether the driver has already shut down (see log.h): its exit handler ran
// before this destructor. Asked once, of a call that changes nothing.
static bool driver_torn_down(void)
{
    CUcontext c = NULL;
    return ao_real.cuCtxGetCurrent && ao_cuda_gone_at_exit(ao_real.cuCtxGetCurrent(&c));
}

__attribute__((destructor)) static void ao_fini(void)
{
    // The step trace first, engine on or off (it has its own idea of whether
    // anything was recorded): it describes what the program asked, not
    // aoshim's clean-up, and is then complete whatever the report meets.
    if (!forked_child) ao_tr_finish();
    // A forked child never writes its parent's report; a process that never
    // used CUDA (a launcher, a compiler) writes nothing.
    if (forked_child || !ao_cuda_touched) return;
    ao_exit_begin();
    // With the driver gone nothing can be waited for or queried: the events
    // still pending are left, and the report goes without their intervals
    // (every query would fail, and each failure used to print a warning).
    if (!driver_torn_down()) ao_engine_flush();
    ao_report_all(!ao_config.quiet);
    // After the report, which describes the run and not its clean-up.
    ao_engine_shutdown();
}

AOSHIM_API const char *aoshim_version(void)
{
    return AO_VERSION_STRING;
}

AOSHIM_API int aoshim_report_now(void)
{
    if (forked_child) return AOSHIM_ESTATE;
    ao_engine_flush();
    ao_report_all(!ao_config.quiet); // AOSHIM_QUIET silences every summary; files still written
    return 0;
}
