// SPDX-License-Identifier: MIT
// The allocation path behind every allocation hook, runtime or driver.
#include <stdint.h>

#include "config.h"
#include "hook.h"
#include "mem/poolmodel.h"
#include "mem/ptrmap.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "stats.h"

static ao_ptrmap_t passthrough = AO_PTRMAP_INIT; // pointer -> size

bool ao_hook_track(CUdeviceptr *out, size_t n, CUstream stream, bool async)
{
    if (ao_in_hook || ao_engine_off || !out) return false;
    if (!ao_cuda_touched) ao_cuda_touched = true; // written once: no shared-line traffic after
    ao_engine_thread_seen();
    if (async) ao_engine_note_stream(stream);
    bool scope = ao_engine_in_scope();
    if (!scope && !(async && ao_engine_serves())) return false;
    if (n < ao_config.min_bytes || !n) {
        if (scope) ao_stat_add(AO_STAT_KEPT_SMALL, 1);
        return false;
    }
    ao_in_hook++;
    // Anything aoshim cannot track, or has no memory for, goes to the real
    // allocator, which gives the program CUDA's own answer; a stream-ordered
    // allocation aoshim does not track may come from its memory
    // (offload/serve.c).
    CUresult r = scope ? ao_engine_alloc(n, stream, async, out) : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_ERROR_NOT_SUPPORTED && async) r = ao_engine_serve(n, stream, out);
    ao_in_hook--;
    if (r == CUDA_SUCCESS) ao_poolmodel_alloc(*out, n, async);
    return r == CUDA_SUCCESS;
}

bool ao_hook_retry(void)
{
    if (ao_in_hook || ao_engine_off) return false;
    ao_in_hook++;
    bool r = ao_engine_trim();
    ao_in_hook--;
    return r;
}

void ao_hook_passed(CUdeviceptr p, size_t n, bool async)
{
    if (ao_in_hook || ao_engine_off) return;
    ao_ptrmap_put(&passthrough, p, n);
    ao_stat_device((int64_t)n, 0, 0);
    ao_poolmodel_alloc(p, n, async);
}

int ao_hook_free(CUdeviceptr p, CUstream stream, bool async)
{
    // After aoshim gave everything back at exit, a thread of the program
    // still running may free a buffer it had: done already (before: the
    // real allocator refused the address, and the program took the error
    // for its own and exited a second time, racing the first exit).
    if (ao_engine_off && p && ao_vmm_retired(p)) return 1;
    if (ao_in_hook || !p || ao_engine_off) return 0;
    ao_engine_thread_seen();
    ao_poolmodel_free(p); // before the address can be another's
    if (ao_vmm_owns(p)) {
        ao_in_hook++;
        CUresult r = ao_engine_free(p, stream, async);
        ao_in_hook--;
        return r == CUDA_SUCCESS ? 1 : -1;
    }
    // Accounted before the real free, so that another thread cannot be
    // handed the same address in between and lose its record.
    uint64_t n = ao_ptrmap_take(&passthrough, p);
    if (n) ao_stat_device(-(int64_t)n, 0, 0);
    return 0;
}

bool ao_hook_passthrough(CUdeviceptr p)
{
    return ao_ptrmap_get(&passthrough, p) != 0;
}
