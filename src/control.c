// SPDX-License-Identifier: MIT
// The public API of aoshim.h: argument checks live in the engine; this file
// only adapts types.
#define AOSHIM_BUILDING_LIBRARY 1
#include "aoshim.h"

#include <string.h>

#include "ctllog.h"
#include "hook/hook.h"
#include "log.h"
#include "mem/hostpool.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "report/record.h"
#include "stats.h"
#include "steptrace/steptrace.h"

// Each boundary is logged before the engine sees it (ctllog.h): the log is
// what the program said, whatever the engine made of it.
// The step trace records the call with them (AOSHIM_RECORD: its `layer`
// record), also when the engine is off.
#define BOUNDARY(call, op, arg, expr)                                                              \
    do {                                                                                           \
        ao_ctllog(call, arg);                                                                      \
        if (AO_TR_ON()) ao_tr_layer(op, arg);                                                      \
        int rc_ = (expr);                                                                          \
        ao_ctllog_done(call, arg, rc_);                                                            \
        return rc_;                                                                                \
    } while (0)

AOSHIM_API int aoshim_layer_begin(int layer)
{
    BOUNDARY(AO_CTL_LAYER_BEGIN, AO_TR_BEGIN, layer, ao_engine_layer_begin(layer));
}
AOSHIM_API int aoshim_layer_end(int layer)
{
    BOUNDARY(AO_CTL_LAYER_END, AO_TR_END, layer, ao_engine_layer_end(layer));
}
AOSHIM_API int aoshim_backward_begin(int layer)
{
    BOUNDARY(AO_CTL_BACKWARD_BEGIN, AO_TR_BACKWARD_BEGIN, layer, ao_engine_backward_begin(layer));
}
AOSHIM_API int aoshim_backward_end(int layer)
{
    BOUNDARY(AO_CTL_BACKWARD_END, AO_TR_BACKWARD_END, layer, ao_engine_backward_end(layer));
}
// The step's end is also where the step trace reads its timed launches and
// hands this thread's records to the file (after the engine's own work).
AOSHIM_API int aoshim_step_end(void)
{
    ao_ctllog(AO_CTL_STEP_END, -1);
    if (AO_TR_ON()) ao_tr_layer(AO_TR_STEP_END, -1);
    int rc = ao_engine_step_end();
    ao_ctllog_done(AO_CTL_STEP_END, -1, rc);
    if (AO_TR_ON()) ao_tr_step();
    return rc;
}
AOSHIM_API int aoshim_set_microbatch(int mb)
{
    BOUNDARY(AO_CTL_SET_MICROBATCH, AO_TR_MICROBATCH, mb, ao_engine_set_microbatch(mb));
}
AOSHIM_API int aoshim_set_schedule(int schedule)
{
    BOUNDARY(AO_CTL_SET_SCHEDULE, AO_TR_SCHEDULE, schedule, ao_engine_set_schedule(schedule));
}
AOSHIM_API int aoshim_offload_layer(int layer)
{
    BOUNDARY(AO_CTL_OFFLOAD_LAYER, AO_TR_OFFLOAD, layer, ao_engine_offload_layer(layer));
}
AOSHIM_API int aoshim_release_layer(int layer)
{
    BOUNDARY(AO_CTL_RELEASE_LAYER, AO_TR_RELEASE, layer, ao_engine_release_layer(layer));
}
AOSHIM_API int aoshim_reload_layer(int layer)
{
    BOUNDARY(AO_CTL_RELOAD_LAYER, AO_TR_RELOAD, layer, ao_engine_reload_layer(layer));
}
AOSHIM_API int aoshim_set_stream(void *s)
{
    if (AO_TR_ON()) ao_tr_set_stream((CUstream)s);
    return ao_engine_set_stream((CUstream)s);
}
// A buffer aoshim passed through is never offloaded: keeping it is a no-op.
// A pointer aoshim never saw allocated is the caller's mistake.
AOSHIM_API int aoshim_keep(const void *p)
{
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    if (AO_TR_ON()) ao_tr_keep(d);
    if (!p || ao_engine_off || ao_vmm_owns(d)) return ao_engine_keep(d);
    if (ao_hook_passthrough(d)) return 0;
    static int once;
    ao_warn_once(&once, "aoshim_keep(%p): not a buffer allocated through CUDA", p);
    return AOSHIM_ENOTFOUND;
}

AOSHIM_API int aoshim_set_frontend(const char *text)
{
    if (!text) return AOSHIM_EINVAL;
    ao_rec_frontend(text);
    return 0;
}

AOSHIM_API int aoshim_get_stats(aoshim_stats_t *out)
{
    if (!out || out->size < sizeof out->size) return AOSHIM_EINVAL;
    aoshim_stats_t s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    s.peak_device_bytes = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
    s.offloaded_bytes = ao_stat_get(AO_STAT_OFFLOADED_BYTES);
    s.reloaded_bytes = ao_stat_get(AO_STAT_RELOADED_BYTES);
    s.tracked_buffers = ao_stat_get(AO_STAT_TRACKED_BUFFERS);
    s.kept_resident = ao_stat_get(AO_STAT_KEPT_SMALL) + ao_stat_get(AO_STAT_KEPT_HOST_LIMIT) +
                      ao_stat_get(AO_STAT_KEPT_PIN_FAILED) + ao_stat_get(AO_STAT_KEPT_BY_USER) +
                      ao_stat_get(AO_STAT_KEPT_NO_DEVICE_SPACE) + ao_stat_get(AO_STAT_KEPT_GRAPH);
    s.late_reloads = ao_stat_get(AO_STAT_LATE_RELOADS);
    s.reload_wait_ns = ao_stat_get(AO_STAT_RELOAD_WAIT_NS);
    s.pinned_host_bytes = ao_stat_get(AO_STAT_PINNED_HOST_BYTES);
    size_t n = out->size < sizeof s ? out->size : sizeof s;
    size_t caller_size = out->size;
    memcpy(out, &s, n);
    out->size = caller_size < sizeof s ? caller_size : sizeof s;
    return 0;
}
