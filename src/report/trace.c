// SPDX-License-Identifier: MIT
// The Chrome/Perfetto trace-event file (AOSHIM_TRACE): one "X" slice per
// offload copy and per reload copy on the side-stream tracks, one per
// layer's forward and backward on the compute stream's track, instant events
// for compute-stream waits and late reloads, and counter tracks for device
// memory (total and per layer), offloaded bytes and the pinned host pool.
//
// Clocks: copies and waits are GPU times (CUDA events, relative to the
// engine's reference event); memory counters are host CLOCK_MONOTONIC times
// relative to aoshim's first event. Both origins are the engine's start, so
// on a real GPU they line up to within the launch latency; on the simulated
// GPU the GPU clock is virtual and the two do not line up.
#include <stdio.h>
#include <unistd.h>

#include "aoshim.h"
#include "emitter.h"
#include "record.h"
#include "report.h"

#define R ao_rec

enum { TID_D2H = 1, TID_H2D = 2, TID_COMPUTE = 3, TID_MEMORY = 4 };

static void sep(ao_emitter_t *e, bool *first)
{
    ao_emit_raw(e, *first ? "\n" : ",\n", *first ? 1 : 2);
    *first = false;
}

static void meta(ao_emitter_t *e, bool *first, int pid, int tid, const char *what, const char *name)
{
    sep(e, first);
    ao_emit_printf(e, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"",
                   what, pid, tid);
    ao_emit_escaped(e, name, false);
    AO_LIT(e, "\"}}");
}

static void counter(ao_emitter_t *e, bool *first, int pid, uint64_t t_ns, const char *name,
                    uint64_t v)
{
    sep(e, first);
    ao_emit_printf(e,
                   "{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"bytes\":%llu}}",
                   name, (double)t_ns / 1e3, pid, TID_MEMORY, (unsigned long long)v);
}

void ao_report_trace(int fd)
{
    bool locked = ao_rec_lock_for_report();
    ao_rec_finish_locked();
    ao_emitter_t e;
    ao_emit_init(&e, fd, AO_EMIT_JSON);
    int pid = (int)getpid();
    bool first = true;
    char name[160];
    AO_LIT(&e, "{\"traceEvents\":[");
    snprintf(name, sizeof name, "aoshim (pid %d, rank %d)", pid, ao_report_rank());
    meta(&e, &first, pid, 0, "process_name", name);
    meta(&e, &first, pid, TID_D2H, "thread_name", "offload stream (D2H copies)");
    meta(&e, &first, pid, TID_H2D, "thread_name", "reload stream (H2D copies)");
    meta(&e, &first, pid, TID_COMPUTE, "thread_name", "compute stream (layers, waits on reloads)");
    meta(&e, &first, pid, TID_MEMORY, "thread_name", "memory (host clock)");

    uint64_t slices[2] = {0, 0};
    for (uint32_t i = 0; i < R.nspans; i++) {
        const ao_rec_span_t *s = &R.spans[i];
        double ts = (double)s->start / 1e3, dur = (double)(s->end - s->start) / 1e3;
        sep(&e, &first);
        if (s->kind == AO_REC_FWD || s->kind == AO_REC_BWD) {
            bool fwd = s->kind == AO_REC_FWD;
            ao_emit_printf(&e,
                           "{\"name\":\"%s L%d mb%d\",\"cat\":\"compute\",\"ph\":\"X\","
                           "\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"layer\":%d,"
                           "\"microbatch\":%d,\"pass\":\"%s\"}}",
                           fwd ? "forward" : "backward", s->layer, s->mb, ts, dur, pid, TID_COMPUTE,
                           s->layer, s->mb, fwd ? "forward" : "backward");
            continue;
        }
        if (s->kind == AO_REC_WAIT) {
            ao_emit_printf(
                &e,
                "{\"name\":\"wait for reload (backward L%d)\",\"cat\":\"wait\",\"ph\":\"i\","
                "\"s\":\"t\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"layer\":%d,"
                "\"microbatch\":%d,\"wait_ns\":%llu}}",
                s->layer, ts, pid, TID_COMPUTE, s->layer, s->mb,
                (unsigned long long)(s->end - s->start));
            continue;
        }
        bool off = s->kind == AO_REC_D2H;
        slices[off ? 0 : 1]++;
        ao_emit_printf(
            &e,
            "{\"name\":\"%s L%d mb%d\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
            "\"pid\":%d,\"tid\":%d,\"args\":{\"layer\":%d,\"microbatch\":%d,\"bytes\":%llu,"
            "\"gbps\":%.3f}}",
            off ? "offload" : "reload", s->layer, s->mb, off ? "offload" : "reload", ts, dur, pid,
            off ? TID_D2H : TID_H2D, s->layer, s->mb, (unsigned long long)s->bytes,
            s->end > s->start ? (double)s->bytes / (double)(s->end - s->start) : 0.0);
    }
    for (uint32_t i = 0; i < R.nlate; i++) {
        const ao_rec_late_t *l = &R.late[i];
        sep(&e, &first);
        ao_emit_printf(
            &e,
            "{\"name\":\"late reload L%d\",\"cat\":\"late_reload\",\"ph\":\"i\",\"s\":\"p\","
            "\"ts\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"layer\":%d,\"microbatch\":%d,"
            "\"kernel\":\"",
            l->layer, (double)l->t_ns / 1e3, pid, TID_COMPUTE, l->layer, l->mb);
        ao_emit_escaped(&e, l->kernel, false);
        AO_LIT(&e, "\"}}");
    }
    // Counters: the peak inside a bucket first (when it is above the end
    // state), then the state at the bucket's end.
    int top = R.max_layer + 1 < AO_TL_LAYERS ? R.max_layer + 1 : AO_TL_LAYERS - 1;
    for (int i = 0; i < R.ntl; i++) {
        const ao_rec_bucket_t *b = &R.tl[i];
        if (b->peak > b->device && b->t_peak < b->t1)
            counter(&e, &first, pid, b->t_peak, "device memory", b->peak);
        counter(&e, &first, pid, b->t1, "device memory",
                b->peak > b->device && b->t_peak >= b->t1 ? b->peak : b->device);
        if (b->peak_without > b->without && b->t_peak_without < b->t1)
            counter(&e, &first, pid, b->t_peak_without, "without offloading", b->peak_without);
        counter(&e, &first, pid, b->t1, "without offloading",
                b->peak_without > b->without && b->t_peak_without >= b->t1 ? b->peak_without
                                                                           : b->without);
        counter(&e, &first, pid, b->t1, "offloaded", b->offloaded);
        counter(&e, &first, pid, b->t1, "pinned host", b->pinned);
        counter(&e, &first, pid, b->t1, "untracked device memory", b->passthrough);
        const uint64_t *row = &R.tl_layer[(size_t)i * AO_TL_LAYERS];
        const uint64_t *prev = i ? row - AO_TL_LAYERS : NULL;
        for (int s = 1; s <= top; s++) { // only changes: most layers are still between samples
            if (prev && prev[s] == row[s]) continue;
            char cname[48];
            if (s == AO_TL_LAYERS - 1 && R.max_layer + 1 >= AO_TL_LAYERS)
                snprintf(cname, sizeof cname, "resident layers %d+", s - 1);
            else
                snprintf(cname, sizeof cname, "resident layer %d", s - 1);
            counter(&e, &first, pid, b->t1, cname, row[s]);
        }
    }
    ao_emit_printf(
        &e,
        "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"tool\":\"aoshim\",\"version\":\"%s\","
        "\"offload_slices\":%llu,\"reload_slices\":%llu,\"gpu_intervals_dropped\":%llu,"
        "\"max_gpu_intervals\":%d,\"late_reloads_dropped\":%llu,\"timeline_buckets\":%d,"
        "\"clocks\":\"copies and waits: GPU time since the engine's reference event; "
        "counters: host CLOCK_MONOTONIC since aoshim's first event\"}}\n",
        AO_REPORT_VERSION, (unsigned long long)slices[0], (unsigned long long)slices[1],
        (unsigned long long)R.spans_dropped, AO_SPANS_MAX, (unsigned long long)R.late_dropped,
        R.ntl);
    ao_emit_flush(&e);
    ao_rec_unlock(locked);
}
