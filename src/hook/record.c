// SPDX-License-Identifier: MIT
// Driver entry points aoshim wraps only to record them (AOSHIM_RECORD):
// events, waits, host synchronisation, stream and event creation, memory
// pool attributes and trims. Each passes the call through and, when the
// program itself made it, adds its record.
//
// They are not exported, and cuGetProcAddress (and dlsym on libcuda's
// handle) hands them out only while the process records: a process that
// does not record never runs one. A wrapper handed out before a fork costs
// the child one well-predicted branch (AO_TR_ON is false there). The
// runtime reaches the driver through cuGetProcAddress, so cudaEventRecord,
// cudaStreamWaitEvent, cudaDeviceSynchronize, cudaMemPoolSetAttribute ...
// come through here.
#include <string.h>

#include "hook.h"
#include "steptrace/steptrace.h"

static inline CUstream stream_of(CUstream s, bool ptsz)
{
    return s ? s : ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
}

#define RECORD_EVENT(name, ptsz)                                                                   \
    static CUresult tr_##name(CUevent e, CUstream s)                                               \
    {                                                                                              \
        CUresult r = AO_REAL_CALL(ao_real.name(e, s));                                             \
        if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_event_record(e, stream_of(s, ptsz));            \
        return r;                                                                                  \
    }
RECORD_EVENT(cuEventRecord, false)
RECORD_EVENT(cuEventRecord_ptsz, true)

#define RECORD_EVENT_FLAGS(name, ptsz)                                                             \
    static CUresult tr_##name(CUevent e, CUstream s, unsigned fl)                                  \
    {                                                                                              \
        CUresult r = AO_REAL_CALL(ao_real.name(e, s, fl));                                         \
        if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_event_record(e, stream_of(s, ptsz));            \
        return r;                                                                                  \
    }
RECORD_EVENT_FLAGS(cuEventRecordWithFlags, false)
RECORD_EVENT_FLAGS(cuEventRecordWithFlags_ptsz, true)

#define WAIT_EVENT(name, ptsz)                                                                     \
    static CUresult tr_##name(CUstream s, CUevent e, unsigned fl)                                  \
    {                                                                                              \
        CUresult r = AO_REAL_CALL(ao_real.name(s, e, fl));                                         \
        if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_wait(stream_of(s, ptsz), e);                    \
        return r;                                                                                  \
    }
WAIT_EVENT(cuStreamWaitEvent, false)
WAIT_EVENT(cuStreamWaitEvent_ptsz, true)

#define STREAM_SYNC(name, ptsz)                                                                    \
    static CUresult tr_##name(CUstream s)                                                          \
    {                                                                                              \
        CUresult r = AO_REAL_CALL(ao_real.name(s));                                                \
        if (r == CUDA_SUCCESS && AO_TR_ON())                                                       \
            ao_tr_sync(AO_TR_SYNC_STREAM, stream_of(s, ptsz), NULL);                               \
        return r;                                                                                  \
    }
STREAM_SYNC(cuStreamSynchronize, false)
STREAM_SYNC(cuStreamSynchronize_ptsz, true)

static CUresult tr_cuEventSynchronize(CUevent e)
{
    CUresult r = AO_REAL_CALL(ao_real.cuEventSynchronize(e));
    if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_sync(AO_TR_SYNC_EVENT, NULL, e);
    return r;
}

static CUresult tr_cuCtxSynchronize(void)
{
    CUresult r = AO_REAL_CALL(ao_real.cuCtxSynchronize());
    if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_sync(AO_TR_SYNC_DEVICE, NULL, NULL);
    return r;
}

// CUDA 13's: the context to synchronise (NULL: the current one).
static CUresult tr_cuCtxSynchronize_v2(CUcontext c)
{
    CUresult r = AO_REAL_CALL(ao_real.cuCtxSynchronize_v2(c));
    if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_sync(AO_TR_SYNC_DEVICE, NULL, NULL);
    return r;
}

static CUresult tr_cuStreamCreate(CUstream *s, unsigned fl)
{
    CUresult r = AO_REAL_CALL(ao_real.cuStreamCreate(s, fl));
    if (r == CUDA_SUCCESS && s && AO_TR_ON()) ao_tr_stream_created(*s, fl, 0, false);
    return r;
}

static CUresult tr_cuStreamCreateWithPriority(CUstream *s, unsigned fl, int prio)
{
    CUresult r = AO_REAL_CALL(ao_real.cuStreamCreateWithPriority(s, fl, prio));
    if (r == CUDA_SUCCESS && s && AO_TR_ON()) ao_tr_stream_created(*s, fl, prio, true);
    return r;
}

// Before the real call, as a free: the handle may be another stream's at once.
static CUresult tr_cuStreamDestroy_v2(CUstream s)
{
    if (AO_TR_ON()) ao_tr_stream_destroyed(s);
    return AO_REAL_CALL(ao_real.cuStreamDestroy_v2(s));
}

static CUresult tr_cuEventCreate(CUevent *e, unsigned fl)
{
    CUresult r = AO_REAL_CALL(ao_real.cuEventCreate(e, fl));
    if (r == CUDA_SUCCESS && e && AO_TR_ON()) ao_tr_event_created(*e, fl);
    return r;
}

static CUresult tr_cuEventDestroy_v2(CUevent e)
{
    if (AO_TR_ON()) ao_tr_event_destroyed(e);
    return AO_REAL_CALL(ao_real.cuEventDestroy_v2(e));
}

static CUresult tr_cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
    CUresult r = AO_REAL_CALL(ao_real.cuMemPoolSetAttribute(p, a, v));
    if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_pool_attr(p, (int)a, v);
    return r;
}

static CUresult tr_cuMemPoolTrimTo(CUmemoryPool p, size_t keep)
{
    CUresult r = AO_REAL_CALL(ao_real.cuMemPoolTrimTo(p, keep));
    if (r == CUDA_SUCCESS && AO_TR_ON()) ao_tr_pool_trim(p, keep);
    return r;
}

// --- handing them out -----------------------------------------------------------------------
// name: as cuGetProcAddress is asked; symbol: the driver's own (dlsym);
// min_version: where the wrapped ABI begins (newest first within a name);
// real: the function the wrapper calls (handed out only where it exists).
typedef struct rec_wrap_s {
    const char *name, *symbol;
    int min_version;
    bool ptsz;
    void *fn;
    void *const *real;
} rec_wrap_t;

#define R(name, symbol, ver, ptsz, field)                                                          \
    {                                                                                              \
        name, symbol, ver, ptsz, (void *)tr_##field, (void *const *)&ao_real.field                 \
    }
static const rec_wrap_t wraps[] = {
    R("cuEventRecord", "cuEventRecord", 2000, false, cuEventRecord),
    R("cuEventRecord", "cuEventRecord_ptsz", 2000, true, cuEventRecord_ptsz),
    R("cuEventRecordWithFlags", "cuEventRecordWithFlags", 11010, false, cuEventRecordWithFlags),
    R("cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz", 11010, true,
      cuEventRecordWithFlags_ptsz),
    R("cuStreamWaitEvent", "cuStreamWaitEvent", 3020, false, cuStreamWaitEvent),
    R("cuStreamWaitEvent", "cuStreamWaitEvent_ptsz", 3020, true, cuStreamWaitEvent_ptsz),
    R("cuStreamSynchronize", "cuStreamSynchronize", 2000, false, cuStreamSynchronize),
    R("cuStreamSynchronize", "cuStreamSynchronize_ptsz", 2000, true, cuStreamSynchronize_ptsz),
    R("cuEventSynchronize", "cuEventSynchronize", 2000, false, cuEventSynchronize),
    R("cuCtxSynchronize", "cuCtxSynchronize_v2", 13000, false, cuCtxSynchronize_v2),
    R("cuCtxSynchronize", "cuCtxSynchronize", 2000, false, cuCtxSynchronize),
    R("cuStreamCreate", "cuStreamCreate", 2000, false, cuStreamCreate),
    R("cuStreamCreateWithPriority", "cuStreamCreateWithPriority", 5050, false,
      cuStreamCreateWithPriority),
    R("cuStreamDestroy", "cuStreamDestroy_v2", 4000, false, cuStreamDestroy_v2),
    R("cuEventCreate", "cuEventCreate", 2000, false, cuEventCreate),
    R("cuEventDestroy", "cuEventDestroy_v2", 4000, false, cuEventDestroy_v2),
    R("cuMemPoolSetAttribute", "cuMemPoolSetAttribute", 11020, false, cuMemPoolSetAttribute),
    R("cuMemPoolTrimTo", "cuMemPoolTrimTo", 11020, false, cuMemPoolTrimTo),
};
#undef R

void *ao_hook_record_wrapper(const char *sym, int version, bool ptsz)
{
    if (!__atomic_load_n(&ao_tr_on, __ATOMIC_RELAXED)) return NULL;
    // Names without a per-thread twin serve both kinds of caller.
    for (size_t i = 0; i < sizeof wraps / sizeof *wraps; i++) {
        const rec_wrap_t *w = &wraps[i];
        if (strcmp(sym, w->name) != 0 || version < w->min_version) continue;
        bool twin = i + 1 < sizeof wraps / sizeof *wraps &&
                    strcmp(wraps[i + 1].name, w->name) == 0 && wraps[i + 1].ptsz;
        if (ptsz && twin) continue; // the next entry is the per-thread one
        if (!ptsz && w->ptsz) continue;
        return *w->real ? w->fn : NULL;
    }
    return NULL;
}

void *ao_hook_record_wrapper_by_symbol(const char *symbol)
{
    if (!__atomic_load_n(&ao_tr_on, __ATOMIC_RELAXED)) return NULL;
    for (size_t i = 0; i < sizeof wraps / sizeof *wraps; i++)
        if (strcmp(symbol, wraps[i].symbol) == 0) return *wraps[i].real ? wraps[i].fn : NULL;
    return NULL;
}
