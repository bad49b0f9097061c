// SPDX-License-Identifier: MIT
// Streams, events, the virtual device clock and stream capture.
//
// Scheduling happens at enqueue: sim_op_begin gives each op its virtual start
// (after the host clock, its stream's tail, the legacy-stream dependencies and
// its engine's free time) and end, and its epoch in the happens-before order.
// Nothing runs in the background; queries compare completion times with the
// virtual host clock.
//
// Handles are never freed: a destroyed stream or event keeps its memory with
// a dead magic, so a stale handle is reported as CUDA_ERROR_INVALID_HANDLE
// instead of becoming a use-after-free inside the simulator.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SIM_DEAD_MAGIC 0xdeadbeefu

// --- registry -------------------------------------------------------------------
static sim_stream_t *streams[SIM_MAX_AGENTS]; // every stream ever made, legacy first
static int n_streams;
static uint32_t next_stream_id = 1;
static sim_stream_t *legacy_stream;
static __thread sim_stream_t *ptds_stream;
static uint64_t eng_free[SIM_ENG_COUNT];

// Events and graphs are never freed (stale handles stay detectable; graphs
// until cuGraphDestroy exists): keep every one reachable here.
static void **kept;
static size_t n_kept, cap_kept;

static void keep(void *p)
{
    if (n_kept == cap_kept) {
        cap_kept = cap_kept ? cap_kept * 2 : 256;
        kept = realloc(kept, cap_kept * sizeof *kept);
        if (!kept) abort();
    }
    kept[n_kept++] = p;
}

static sim_stream_t *stream_new(unsigned flags, bool legacy, bool per_thread)
{
    sim_stream_t *s = calloc(1, sizeof *s);
    if (!s) abort();
    s->magic = SIM_STREAM_MAGIC;
    s->id = legacy ? 0 : next_stream_id++;
    s->agent = sim_agent_new(legacy       ? "legacy stream"
                             : per_thread ? "per-thread stream"
                                          : "stream");
    s->flags = flags;
    s->legacy = legacy;
    s->per_thread = per_thread;
    s->tail_ns = sim_host_ns;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    streams[n_streams++] = s;
    return s;
}

static sim_stream_t *get_legacy(void)
{
    if (!legacy_stream) legacy_stream = stream_new(0, true, false);
    return legacy_stream;
}

static sim_stream_t *get_ptds(void)
{
    // One per host thread, made on first use and never destroyed: work a
    // thread left on it still orders against the legacy stream.
    if (!ptds_stream) ptds_stream = stream_new(0, false, true);
    return ptds_stream;
}

sim_stream_t *sim_stream_resolve(CUstream h, bool ptds, CUresult *err)
{
    if (err) *err = CUDA_SUCCESS;
    if (h == NULL) return ptds ? get_ptds() : get_legacy();
    if (h == CU_STREAM_LEGACY) return get_legacy();
    if (h == CU_STREAM_PER_THREAD) return get_ptds();
    if (h->magic != SIM_STREAM_MAGIC) {
        if (err) *err = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return h;
}

static bool is_blocking(const sim_stream_t *s)
{
    return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

// The latest copies on each copy engine, [start, end) in time order (an
// engine runs its ops one after another): whether one is on the link at t.
// A copy whose start is later than t (queued behind an event) is not.
enum { COPY_SPANS = 256 };
static struct {
    uint64_t start[COPY_SPANS], end[COPY_SPANS];
    unsigned n; // spans kept, the newest at (n - 1) % COPY_SPANS
} copy_spans[2];

static void copy_span_add(int engine, uint64_t start, uint64_t end)
{
    unsigned e = engine == SIM_ENG_D2H ? 0 : 1, i = copy_spans[e].n++ % COPY_SPANS;
    copy_spans[e].start[i] = start;
    copy_spans[e].end[i] = end;
}

bool sim_copy_in_flight(uint64_t t)
{
    for (unsigned e = 0; e < 2; e++) {
        unsigned n = copy_spans[e].n < COPY_SPANS ? copy_spans[e].n : COPY_SPANS;
        for (unsigned k = 0; k < n; k++) { // newest first: skip those not begun at t
            unsigned i = (copy_spans[e].n - 1 - k) % COPY_SPANS;
            if (copy_spans[e].start[i] > t) continue;
            if (t < copy_spans[e].end[i]) return true;
            break; // the latest begun by t ended before it
        }
    }
    return false;
}

uint64_t sim_engines_done_ns(void)
{
    uint64_t t = 0;
    for (int e = 0; e < SIM_ENG_COUNT; e++)
        if (eng_free[e] > t) t = eng_free[e];
    for (int i = 0; i < n_streams; i++)
        if (streams[i]->tail_ns > t) t = streams[i]->tail_ns;
    return t;
}

// --- capture --------------------------------------------------------------------
void sim_capture_invalidate(sim_stream_t *s)
{
    // Invalidation is per capture sequence: every stream that joined it.
    if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE || !s->graph) return;
    for (int i = 0; i < n_streams; i++)
        if (streams[i]->graph == s->graph && streams[i]->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
            streams[i]->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

// End a capture sequence: every stream in it stops capturing.
static void capture_close(sim_graph_t *g)
{
    g->capturing = false;
    for (int i = 0; i < n_streams; i++) {
        if (streams[i]->graph == g) {
            streams[i]->graph = NULL;
            streams[i]->capture = CU_STREAM_CAPTURE_STATUS_NONE;
            streams[i]->cap_pending = false;
        }
    }
}

// The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
static __thread int thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult sim_capture_unsafe_call(void)
{
    if (thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
    int me = sim_thread()->agent;
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < n_streams; i++) {
        sim_stream_t *s = streams[i];
        sim_graph_t *g = s->graph;
        if (!g || g->origin != s || s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
        bool mine = g->thread_agent == me && g->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        bool global = g->thread_agent != me && g->mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                      thread_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        if (mine || global) {
            sim_capture_invalidate(s);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return r;
}

SIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            int old = thread_capture_mode;
            thread_capture_mode = *mode;
            *mode = (CUstreamCaptureMode)old;
        }
    }
    sim_leave();
    return r;
}

static sim_stream_t *stream_by_id(uint32_t id)
{
    for (int i = 0; i < n_streams; i++)
        if (streams[i]->id == id) return streams[i];
    return NULL;
}

sim_graph_t *sim_capture_graph(sim_stream_t *s, CUresult *err)
{
    *err = CUDA_SUCCESS;
    if (s->legacy) {
        // cuda.h: using the legacy stream while a blocking stream captures
        // would implicitly depend on the capture; CUDA fails the call and
        // invalidates the capture (we do so in every capture mode: stricter).
        bool hit = false;
        for (int i = 0; i < n_streams; i++) {
            sim_stream_t *b = streams[i];
            if (b->magic == SIM_STREAM_MAGIC && is_blocking(b) &&
                b->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
                sim_capture_invalidate(b);
                hit = true;
            }
        }
        if (hit) *err = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        return NULL;
    }
    if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        *err = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        return NULL;
    }
    if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return s->graph;
    return NULL;
}

sim_node_t *sim_graph_add(sim_graph_t *g, int kind, const char *what, uint32_t stream_id)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        sim_node_t *n = realloc(g->nodes, cap * sizeof *n);
        if (!n) abort();
        g->nodes = n;
        g->cap = cap;
    }
    // Work on a stream other than the origin must be joined back into the
    // origin before the capture ends (CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
    sim_stream_t *s = stream_by_id(stream_id);
    if (s && s != g->origin) s->cap_pending = true;
    sim_node_t *n = &g->nodes[g->n++];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->what = what;
    n->stream_id = stream_id;
    return n;
}

// --- scheduling -------------------------------------------------------------------
// What an op enqueued on s now is ordered after, joined into vc: the host
// thread's past and, with legacy semantics, the other blocking streams (for
// the legacy stream; destroyed ones included: their pending work still
// runs) or the legacy stream (for a blocking stream). Returns the latest
// tail among them and s, the earliest the op can start.
static uint64_t join_order(sim_vc_t *vc, const sim_stream_t *s)
{
    sim_vc_join(vc, &sim_thread()->vc);
    uint64_t start = s->tail_ns;
    if (s->legacy) {
        for (int i = 0; i < n_streams; i++) {
            const sim_stream_t *b = streams[i];
            if (b == s || !is_blocking(b)) continue;
            sim_vc_join(vc, &b->vc);
            if (b->tail_ns > start) start = b->tail_ns;
        }
    } else if (is_blocking(s) && legacy_stream) {
        sim_vc_join(vc, &legacy_stream->vc);
        if (legacy_stream->tail_ns > start) start = legacy_stream->tail_ns;
    }
    return start;
}

void sim_stream_next_vc(const sim_stream_t *s, sim_vc_t *out)
{
    *out = s->vc;
    (void)join_order(out, s);
    out->c[s->agent]++;
}

// SIM_TRACE_GAPS: where the time goes that a program's work does not fill.
// The compute engine idle for 10 us or more before an op, and why it
// started no sooner: the host had not issued it yet ("the host"), or the
// op's stream waited for other work, an event or the legacy stream's order
// ("a wait"); and the host blocked for 0.1 ms or more. Times are the
// virtual clock's, in ms.
void sim_trace_host_wait(uint64_t from, uint64_t to)
{
    if (to - from >= 100000)
        fprintf(stderr, "simgpu: the host waited %.3f ms from %.3f ms\n", (double)(to - from) / 1e6,
                (double)from / 1e6);
}

static void trace_gap(uint64_t idle_from, uint64_t start, uint64_t joined, const char *what,
                      const char *kernel, const sim_stream_t *s)
{
    if (start < idle_from + 10000) return;
    fprintf(stderr, "simgpu: compute idle %.3f ms from %.3f ms, until %s%s%s on stream %u (%s)\n",
            (double)(start - idle_from) / 1e6, (double)idle_from / 1e6, what, kernel ? " " : "",
            kernel ? kernel : "", (unsigned)s->id, joined >= start ? "a wait" : "the host");
}

// Order an op (or an event record, engine NONE) on s without capture checks.
static void op_schedule(sim_op_t *op, sim_stream_t *s, int engine, uint64_t cost_ns,
                        const char *what, const char *kernel)
{
    uint64_t start = join_order(&s->vc, s);
    const uint64_t joined = start;
    if (sim_host_ns > start) start = sim_host_ns;
    if (sim_cfg.trace_gaps && engine == SIM_ENG_COMPUTE)
        trace_gap(eng_free[engine], start, joined, what, kernel, s);
    if (engine >= 0 && engine < SIM_ENG_COUNT && eng_free[engine] > start) start = eng_free[engine];
    uint64_t end = start + cost_ns;
    if (engine >= 0 && engine < SIM_ENG_COUNT) {
        eng_free[engine] = end;
        if (engine == SIM_ENG_COMPUTE)
            sim_st.busy_ns_compute += cost_ns;
        else if (engine == SIM_ENG_D2H)
            sim_st.busy_ns_d2h += cost_ns;
        else
            sim_st.busy_ns_h2d += cost_ns;
        if (engine != SIM_ENG_COMPUTE) copy_span_add(engine, start, end);
    }
    s->tail_ns = end;
    if (end > sim_st.elapsed_ns) sim_st.elapsed_ns = end;
    s->vc.c[s->agent]++;
    op->stream = s;
    op->what = what;
    op->kernel = kernel;
    op->start_ns = start;
    op->end_ns = end;
    op->epoch.agent = (uint16_t)s->agent;
    op->epoch.clk = s->vc.c[s->agent];
    op->vc = &s->vc;
}

CUresult sim_op_begin(sim_op_t *op, sim_stream_t *s, int engine, uint64_t cost_ns, const char *what,
                      const char *kernel)
{
    CUresult err;
    sim_graph_t *g = sim_capture_graph(s, &err);
    if (err != CUDA_SUCCESS) return err;
    if (g) {
        // Only exec.c and the event calls know how to record a node; anything
        // else enqueued during capture is unsupported (see internal.h).
        sim_capture_invalidate(s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    op_schedule(op, s, engine, cost_ns, what, kernel);
    return CUDA_SUCCESS;
}

void sim_host_wait_op(const sim_op_t *op)
{
    sim_host_wait_until(op->end_ns);
    sim_vc_join(&sim_thread()->vc, op->vc);
}

void sim_device_sync(void)
{
    sim_thread_t *h = sim_thread();
    for (int i = 0; i < n_streams; i++) {
        sim_host_wait_until(streams[i]->tail_ns);
        sim_vc_join(&h->vc, &streams[i]->vc);
    }
    for (int e = 0; e < SIM_ENG_COUNT; e++)
        sim_host_wait_until(eng_free[e]);
}

// --- streams: API ---------------------------------------------------------------
static CUresult stream_create(CUstream *ph, unsigned flags)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    *ph = stream_new(flags, false, false);
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    SIM_FAIL_POINT(cuStreamCreate);
    return stream_create(phStream, Flags);
}

SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    SIM_FAIL_POINT(cuStreamCreateWithPriority);
    (void)priority; // CUDA clamps out-of-range priorities; the sim has no priorities
    return stream_create(phStream, flags);
}

SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        // The default streams are not the program's to destroy.
        if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
            hStream->magic != SIM_STREAM_MAGIC) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else {
            // Pending work completes (its times and clock stay in the registry,
            // so the legacy stream still orders after it); the handle dies.
            hStream->magic = SIM_DEAD_MAGIC;
            // A capture sequence that loses a stream cannot end well: it is
            // invalidated, and closed if this stream began it.
            sim_graph_t *g = hStream->graph;
            if (g) {
                sim_capture_invalidate(hStream);
                if (g->origin == hStream) {
                    capture_close(g);
                } else {
                    hStream->graph = NULL;
                    hStream->cap_pending = false;
                }
            }
            hStream->capture = CU_STREAM_CAPTURE_STATUS_NONE;
        }
    }
    sim_leave();
    return r;
}

static CUresult stream_sync(CUstream h, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (s) {
        sim_graph_t *g = sim_capture_graph(s, &r);
        if (g) {
            // Synchronising a capturing stream is illegal and kills the capture.
            sim_capture_invalidate(s);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
            r = r == CUDA_SUCCESS ? sim_capture_unsafe_call()
                                  : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            if (r == CUDA_SUCCESS) {
                sim_host_wait_until(s->tail_ns);
                sim_vc_join(&sim_thread()->vc, &s->vc);
                sim_mem_synced();
            }
        }
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    SIM_FAIL_POINT(cuStreamSynchronize);
    return stream_sync(hStream, false);
}
SIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    SIM_FAIL_POINT(cuStreamSynchronize);
    return stream_sync(hStream, true);
}

static CUresult stream_query(CUstream h, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (s) {
        sim_graph_t *g = sim_capture_graph(s, &r);
        if (g || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else if (r == CUDA_SUCCESS && (r = sim_capture_unsafe_call()) == CUDA_SUCCESS) {
            if (s->tail_ns > sim_host_ns) {
                r = CUDA_ERROR_NOT_READY;
            } else {
                // Observed complete: the host is now ordered after the work.
                sim_vc_join(&sim_thread()->vc, &s->vc);
            }
        }
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
    SIM_FAIL_POINT(cuStreamQuery);
    return stream_query(hStream, false);
}
SIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    SIM_FAIL_POINT(cuStreamQuery);
    return stream_query(hStream, true);
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    if (!e || e->magic != SIM_EVENT_MAGIC) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    sim_graph_t *g = sim_capture_graph(s, &r);
    if (r != CUDA_SUCCESS) goto out;
    sim_graph_t *eg = e->cap_graph && e->cap_graph->capturing ? e->cap_graph : NULL;
    if (eg && !g) {
        // Waiting on an event recorded inside a capture pulls this stream
        // into that capture (the fork pattern); the legacy stream cannot.
        if (s->legacy || s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
            goto out;
        }
        s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->graph = g = eg;
    }
    if (g) {
        if (eg && eg != g) {
            // Two independent capture sequences would merge.
            sim_capture_invalidate(s);
            r = CUDA_ERROR_STREAM_CAPTURE_MERGE;
            goto out;
        }
        if (!eg && e->recorded && !(flags & CU_EVENT_WAIT_EXTERNAL)) {
            // cuda.h: only in-stream ordering may cross the capture boundary;
            // an event recorded outside the capture needs CU_EVENT_WAIT_EXTERNAL.
            sim_capture_invalidate(s);
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
            goto out;
        }
        sim_node_t *n = sim_graph_add(g, SIM_NODE_EVENT_WAIT, "cuStreamWaitEvent", s->id);
        n->event = e;
        // The recording stream's work up to the record is now joined.
        sim_stream_t *from = eg ? stream_by_id(e->stream_id) : NULL;
        if (from && from != s && from->graph == g) from->cap_pending = false;
        goto out;
    }
    // The wait captures the event's most recent record now: a later record of
    // the same event does not move it. Never recorded: nothing to wait for.
    if (e->recorded) {
        sim_vc_join(&s->vc, &e->vc);
        if (e->time_ns > s->tail_ns) s->tail_ns = e->time_ns;
    }
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    SIM_FAIL_POINT(cuStreamWaitEvent);
    return stream_wait_event(hStream, hEvent, Flags, false);
}
SIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    SIM_FAIL_POINT(cuStreamWaitEvent);
    return stream_wait_event(hStream, hEvent, Flags, true);
}

static CUresult stream_get_flags(CUstream h, unsigned *flags, bool ptds)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
        if (s && !flags)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (s)
            *flags = s->flags;
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    return stream_get_flags(hStream, flags, false);
}
SIM_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    return stream_get_flags(hStream, flags, true);
}

sim_graph_t *sim_graph_new(void)
{
    sim_graph_t *g = calloc(1, sizeof *g);
    if (!g) abort();
    g->magic = SIM_GRAPH_MAGIC;
    keep(g);
    return g;
}

// --- capture: API -----------------------------------------------------------------
static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (s->legacy) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; // the legacy stream cannot be captured
        goto out;
    }
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    sim_graph_t *g = sim_graph_new();
    g->origin = s;
    g->capturing = true;
    g->mode = mode;
    g->thread_agent = sim_thread()->agent;
    static uint64_t next_capture_id; // under the lock
    g->capture_id = ++next_capture_id;
    s->graph = g;
    s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->cap_pending = false;
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, false);
}
SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, true);
}
// The CUDA 10.0 entry points without a mode capture in global mode.
#undef cuStreamBeginCapture
SIM_EXPORT CUresult cuStreamBeginCapture(CUstream hStream);
SIM_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

static CUresult end_capture(CUstream h, CUgraph *out, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    if (!out) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    sim_graph_t *g = s->graph;
    if (g->origin != s) {
        // Only the stream that began the capture ends it.
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        goto out;
    }
    bool unjoined = false;
    for (int i = 0; i < n_streams; i++)
        if (streams[i]->graph == g && streams[i]->cap_pending) unjoined = true;
    // cuda.h: an invalidated capture ends with a NULL graph; so does one with
    // work on a forked stream never joined back into the origin.
    *out = NULL;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (unjoined)
        r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    else
        *out = (CUgraph)g;
    capture_close(g);
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph, false);
}
SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph, true);
}

// The status of h's capture (lock held); s: the stream, NULL on error.
static CUresult capture_status(CUstream h, CUstreamCaptureStatus *st, bool ptds, sim_stream_t **sp)
{
    CUresult r = CUDA_SUCCESS;
    sim_stream_t *s = *sp = sim_stream_resolve(h, ptds, &r);
    if (!s) return r;
    if (!st) return CUDA_ERROR_INVALID_VALUE;
    if (s->legacy) {
        // cuda.h: querying the legacy stream while a blocking stream captures
        // is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (a query does not invalidate).
        *st = CU_STREAM_CAPTURE_STATUS_NONE;
        for (int i = 0; i < n_streams; i++)
            if (streams[i]->magic == SIM_STREAM_MAGIC && is_blocking(streams[i]) &&
                streams[i]->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
                r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        return r;
    }
    *st = s->capture;
    return r;
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *st, bool ptds)
{
    CUresult r = sim_enter();
    sim_stream_t *s;
    if (r == CUDA_SUCCESS) r = capture_status(h, st, ptds, &s);
    sim_leave();
    return r;
}

// cuStreamGetCaptureInfo (its CUDA 12.3 ABI, _v3, which cuda.h names it):
// the status as cuStreamIsCapturing, and while the capture is active its id
// and graph. The simulator has no node handles (graphs are node lists), so
// the dependency set is reported empty; a caller that asks for edge data
// without the dependencies is refused, as in cuda.h.
static CUresult capture_info(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps,
                             bool ptds)
{
    CUresult r = sim_enter();
    sim_stream_t *s;
    if (r == CUDA_SUCCESS)
        r = edges && !deps ? CUDA_ERROR_INVALID_VALUE : capture_status(h, st, ptds, &s);
    if (r == CUDA_SUCCESS && *st == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (id) *id = s->graph->capture_id;
        if (graph) *graph = (CUgraph)s->graph;
        if (deps) *deps = NULL;
        if (edges) *edges = NULL;
        if (ndeps) *ndeps = 0;
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                              CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out,
                                              const CUgraphEdgeData **edgeData_out,
                                              size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out, false);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                   CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out,
                                                   const CUgraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out, true);
}

SIM_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus, false);
}
SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus, true);
}

// --- events: API -------------------------------------------------------------------
static bool event_ok(CUevent e)
{
    return e && e->magic == SIM_EVENT_MAGIC;
}

SIM_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    SIM_FAIL_POINT(cuEventCreate);
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    // cuda.h: CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING.
    if (!phEvent || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    CUevent e = calloc(1, sizeof *e);
    if (!e) abort();
    e->magic = SIM_EVENT_MAGIC;
    keep(e);
    e->flags = Flags;
    *phEvent = e;
out:
    sim_leave();
    return r;
}

static CUresult event_record(CUevent e, CUstream h, unsigned flags, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    if (!event_ok(e)) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    sim_graph_t *g = sim_capture_graph(s, &r);
    if (r != CUDA_SUCCESS) goto out;
    if (g) {
        // Recording during capture is allowed: it becomes a node, and the
        // event's last real record is left as it was.
        sim_node_t *n = sim_graph_add(g, SIM_NODE_EVENT_RECORD, "cuEventRecord", s->id);
        n->event = e;
        e->cap_graph = g;
        e->stream_id = s->id;
        goto out;
    }
    // A record is a zero-cost op on the stream: it completes when all work
    // ordered before it on the stream (legacy rules included) has completed.
    sim_op_t op;
    op_schedule(&op, s, SIM_ENG_NONE, 0, "cuEventRecord", NULL);
    e->recorded = true;
    e->cap_graph = NULL;
    e->time_ns = op.end_ns;
    e->vc = s->vc;
    e->stream_id = s->id;
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    SIM_FAIL_POINT(cuEventRecord);
    return event_record(hEvent, hStream, 0, false);
}
SIM_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    SIM_FAIL_POINT(cuEventRecord);
    return event_record(hEvent, hStream, 0, true);
}
SIM_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    SIM_FAIL_POINT(cuEventRecordWithFlags);
    return event_record(hEvent, hStream, flags, false);
}
SIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                unsigned int flags)
{
    SIM_FAIL_POINT(cuEventRecordWithFlags);
    return event_record(hEvent, hStream, flags, true);
}

// Checks shared by query and synchronize: a live handle, a last record that
// is real work (not a node of an open capture: cuda.h names cuEventQuery on
// such an event as a call that conflicts with capture), and no open capture
// that forbids potentially unsafe calls (PyTorch's caching allocator defers
// its event queries during capture for this reason).
static CUresult event_wait_check(CUevent e)
{
    if (!event_ok(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (e->cap_graph && e->cap_graph->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return sim_capture_unsafe_call();
}

SIM_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    SIM_FAIL_POINT(cuEventQuery);
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS && (r = event_wait_check(hEvent)) == CUDA_SUCCESS && hEvent->recorded) {
        if (hEvent->time_ns > sim_host_ns)
            r = CUDA_ERROR_NOT_READY;
        else
            sim_vc_join(&sim_thread()->vc, &hEvent->vc); // observed complete
    }
    // Never recorded: complete (CUDA_SUCCESS), and orders nothing.
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    SIM_FAIL_POINT(cuEventSynchronize);
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS && (r = event_wait_check(hEvent)) == CUDA_SUCCESS) {
        if (hEvent->recorded) {
            sim_host_wait_until(hEvent->time_ns);
            sim_vc_join(&sim_thread()->vc, &hEvent->vc);
        }
        sim_mem_synced(); // a synchronize call, even of a never-recorded event
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        if (!event_ok(hEvent))
            r = CUDA_ERROR_INVALID_HANDLE;
        else
            hEvent->magic = SIM_DEAD_MAGIC; // kept: stale handles stay detectable
    }
    sim_leave();
    return r;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if (!ms)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!event_ok(a) || !event_ok(b))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!a->recorded || !b->recorded)
        r = CUDA_ERROR_INVALID_HANDLE; // cuda.h: record never called on one of them
    else if (a->time_ns > sim_host_ns || b->time_ns > sim_host_ns)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(((double)b->time_ns - (double)a->time_ns) / 1e6);
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}
// The pre-13.0 name, still looked up by older runtimes and by cuGetProcAddress.
#undef cuEventElapsedTime
SIM_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
SIM_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}
