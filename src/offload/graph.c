// SPDX-License-Identifier: MIT
// Graph pins: what captured work touches stays on the device while a graph
// made from the capture may replay it.
#include "offload/internal.h"

// --- graph pins ---------------------------------------------------------------------------
// A graph replays its captured work when the program launches it, without
// any call aoshim could act on, so what the work touches must be on the
// device for as long as something can still be launched: the graph the
// capture produced, and every executable graph instantiated from it (an
// executable graph outlives its graph: destroying the graph first is legal).
//
// A pin set holds the chunks one capture sequence touched (capture id from
// cuStreamGetCaptureInfo, unique in the process), then the graph's, and
// counts its holders: the capture or graph (one), plus one per executable
// graph. When the count reaches zero the chunks are unpinned: each is
// offloadable again at its next release point (one whose release point
// passed while pinned stays for the rest of its life). A pin names the
// chunk's generation, so that a chunk released and recycled meanwhile is
// never unpinned by a stale set.
//
// All under the engine's lock, and never read by the launch scan (the
// count is read only in offload_prepare). Not on the hot path: the capture
// slow path, and the graph calls, which are rare.
typedef struct ao_pin_s {
    ao_chunk_t *chunk;
    unsigned gen;
} ao_pin_t;

typedef struct ao_pinset_s {
    uint64_t capture; // the capture still adding pins, 0 once it ended
    CUgraph graph;    // the graph holding them: NULL while capturing and once destroyed
    unsigned holders;
    unsigned n, cap;
    ao_pin_t *pin;
    struct ao_pinset_s *next;
} ao_pinset_t;

// One per (executable graph, pin set it holds).
typedef struct ao_exec_s {
    CUgraphExec exec;
    ao_pinset_t *set;
    struct ao_exec_s *next;
} ao_exec_t;

static ao_pinset_t *pinsets;
static ao_exec_t *execs;

static ao_pinset_t *pinset_new(uint64_t capture, CUgraph graph)
{
    ao_pinset_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->capture = capture;
    p->graph = graph;
    p->holders = 1;
    p->next = pinsets;
    pinsets = p;
    return p;
}

static ao_pinset_t *pinset_of_graph(CUgraph g)
{
    for (ao_pinset_t *p = pinsets; p && g; p = p->next)
        if (p->graph == g) return p;
    return NULL;
}

// False when out of memory: the caller then pins for good (see pin_for_capture).
static bool pinset_add(ao_pinset_t *p, ao_chunk_t *c)
{
    for (unsigned i = 0; i < p->n; i++)
        if (p->pin[i].chunk == c && p->pin[i].gen == c->gen) return true;
    if (p->n == p->cap) {
        unsigned cap = p->cap ? p->cap * 2 : 8;
        void *np = realloc(p->pin, cap * sizeof *p->pin);
        if (!np) return false;
        p->pin = np;
        p->cap = cap;
    }
    p->pin[p->n].chunk = c;
    p->pin[p->n++].gen = c->gen;
    c->graph_pins++;
    return true;
}

// One holder fewer; the last one unpins every chunk still in the life it
// was pinned in.
static void pinset_drop(ao_pinset_t *p)
{
    if (--p->holders) return;
    for (unsigned i = 0; i < p->n; i++)
        if (p->pin[i].chunk->gen == p->pin[i].gen && p->pin[i].chunk->graph_pins)
            p->pin[i].chunk->graph_pins--;
    for (ao_pinset_t **pp = &pinsets; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    free(p->pin);
    free(p);
}

// Captured work on an active capture touches c. Memory running out here
// leaves c pinned for good rather than unpinned while a graph may replay.
void ao_pin_for_capture(ao_chunk_t *c, uint64_t capture)
{
    ao_pinset_t *p = pinsets;
    while (p && p->capture != capture)
        p = p->next;
    if (!p) p = pinset_new(capture, NULL);
    if (!p || !pinset_add(p, c)) {
        WARN_ONCE("out of host memory recording a CUDA graph's buffers: they stay on the device");
        c->graph_pins++;
    }
}

uint64_t ao_engine_capture_id(CUstream s)
{
    if (ao_engine_off || !ao_real_driver()) return 0;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (ao_real.cuStreamGetCaptureInfo_v3(s, &cs, &id, NULL, NULL, NULL, NULL) != CUDA_SUCCESS ||
        cs != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return 0;
    return id;
}

bool ao_engine_capture_end(uint64_t capture, CUgraph g, CUstream s)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    // The call failed and s still captures (not the stream that began the
    // capture, say): the capture goes on, and keeps its pins.
    if (!g && ao_real_driver() && ao_real.cuStreamIsCapturing(s, &cs) == CUDA_SUCCESS &&
        cs != CU_STREAM_CAPTURE_STATUS_NONE)
        return false;
    if (!capture || ao_engine_off) return true;
    pthread_mutex_lock(&ao_eng.mu);
    for (ao_pinset_t *p = pinsets; p; p = p->next)
        if (p->capture == capture) {
            p->capture = 0;
            // No graph (an invalidated capture ends with none): the captured
            // work can never run, so nothing needs its chunks any more.
            if (g)
                p->graph = g;
            else
                pinset_drop(p);
            break;
        }
    pthread_mutex_unlock(&ao_eng.mu);
    return true;
}

void ao_engine_graph_instantiated(CUgraph g, CUgraphExec x)
{
    if (ao_engine_off || !g || !x) return;
    pthread_mutex_lock(&ao_eng.mu);
    ao_pinset_t *p = pinset_of_graph(g);
    ao_exec_t *e = p ? calloc(1, sizeof *e) : NULL;
    if (e) {
        e->exec = x;
        e->set = p;
        e->next = execs;
        execs = e;
        p->holders++;
    } else if (p) {
        // Cannot follow this executable graph: its pins never go.
        WARN_ONCE("out of host memory recording a CUDA graph's buffers: they stay on the device");
        p->holders++;
    }
    pthread_mutex_unlock(&ao_eng.mu);
}

void ao_engine_graph_exec_destroyed(CUgraphExec x)
{
    if (ao_engine_off || !x) return;
    pthread_mutex_lock(&ao_eng.mu);
    for (ao_exec_t **pp = &execs; *pp;) {
        ao_exec_t *e = *pp;
        if (e->exec != x) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        pinset_drop(e->set);
        free(e);
    }
    pthread_mutex_unlock(&ao_eng.mu);
}

void ao_engine_graph_destroyed(CUgraph g)
{
    if (ao_engine_off || !g) return;
    pthread_mutex_lock(&ao_eng.mu);
    ao_pinset_t *p = pinset_of_graph(g);
    if (p) {
        p->graph = NULL;
        pinset_drop(p);
    }
    pthread_mutex_unlock(&ao_eng.mu);
}

void ao_engine_graph_cloned(CUgraph from, CUgraph clone)
{
    if (ao_engine_off || !from || !clone) return;
    pthread_mutex_lock(&ao_eng.mu);
    ao_pinset_t *p = pinset_of_graph(from), *q = p ? pinset_new(0, clone) : NULL;
    for (unsigned i = 0; q && i < p->n; i++) {
        ao_chunk_t *c = p->pin[i].chunk;
        if (c->gen == p->pin[i].gen && !pinset_add(q, c)) c->graph_pins++; // for good, as above
    }
    if (p && !q) {
        // The clone replays the same work: without a set of its own, the
        // original's pins stay for good.
        WARN_ONCE("out of host memory recording a CUDA graph's buffers: they stay on the device");
        p->holders++;
    }
    pthread_mutex_unlock(&ao_eng.mu);
}
