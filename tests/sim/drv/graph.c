// SPDX-License-Identifier: MIT
// Executable graphs: instantiate, launch, upload, destroy.
//
// Graphs come only from stream capture (stream.c records the nodes; exec.c
// copies a kernel's arguments into the node at capture, so they are captured
// by value as in CUDA). Instantiation copies the nodes into the executable
// graph, which then no longer depends on the graph (cuGraphDestroy after
// instantiate is legal). A launch replays the nodes in capture order on the
// launch stream, each as if enqueued there at that moment: memory is
// classified again (a buffer freed or unmapped since capture faults, exit 86),
// every access is race-checked against the rest of the program, and every op
// is costed on its engine.
//
// Simplifications, each on the strict side for the program outside the graph
// and documented in README.md:
//  - nodes captured on forked streams are replayed on the launch stream too,
//    in capture order: ordering against other streams is exact, but two
//    branches of one graph that the capture left unordered are serialised,
//    so a race between them is not reported;
//  - event records and waits inside the capture are edges and cost nothing;
//    a wait on an event recorded outside the capture (CU_EVENT_WAIT_EXTERNAL)
//    joins that event's latest real record at launch time; a captured record
//    never re-records the program's event (CU_EVENT_RECORD_EXTERNAL nodes are
//    not modelled: a later wait on that event sees an older record, so the
//    checker can report a race CUDA would not: stricter);
//  - launching into a capturing stream (a child-graph node in CUDA) is
//    refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates that
//    capture.
//
// Handles: graphs stay allocated after cuGraphDestroy (stream.c keeps them)
// and executable graphs after cuGraphExecDestroy (kept here) with a dead
// magic, so a stale handle is CUDA_ERROR_INVALID_VALUE (the only handle error
// cuda.h lists for these calls) rather than a use-after-free.
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SIM_GEXEC_MAGIC 0x47455843u
#define SIM_DEAD_MAGIC  0xdeadbeefu

struct CUgraphExec_st {
    uint32_t magic;
    sim_node_t *nodes; // own copies; kernel argbufs too
    size_t n;
    unsigned long long flags;
    // Each launch is ordered behind the previous launch of the same
    // executable graph, on whatever stream that was (cuda.h).
    bool launched;
    uint64_t done_ns;
    sim_vc_t vc;
};

static struct CUgraphExec_st **execs;
static size_t n_execs, cap_execs;

static bool graph_ok(CUgraph g)
{
    sim_graph_t *sg = (sim_graph_t *)g;
    return sg && sg->magic == SIM_GRAPH_MAGIC && !sg->capturing;
}

static bool exec_ok(CUgraphExec e)
{
    return e && e->magic == SIM_GEXEC_MAGIC;
}

// --- instantiate ---------------------------------------------------------------------
static CUresult instantiate(CUgraphExec *out, CUgraph hGraph, unsigned long long flags)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    const unsigned long long known =
        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
        CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    r = CUDA_ERROR_INVALID_VALUE;
    if (!out || !graph_ok(hGraph) || (flags & ~known)) goto out;
    // cuda.h: device launch cannot be combined with auto-free-on-launch.
    if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) &&
        (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
        goto out;
    const sim_graph_t *g = (const sim_graph_t *)hGraph;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e) abort();
    e->magic = SIM_GEXEC_MAGIC;
    e->flags = flags;
    e->n = g->n;
    e->nodes = calloc(g->n ? g->n : 1, sizeof *e->nodes);
    if (!e->nodes) abort();
    for (size_t i = 0; i < g->n; i++) {
        e->nodes[i] = g->nodes[i];
        if (g->nodes[i].kind == SIM_NODE_KERNEL) {
            uint32_t pb = g->nodes[i].func->param_bytes;
            e->nodes[i].argbuf = malloc(pb ? pb : 1);
            if (!e->nodes[i].argbuf) abort();
            memcpy(e->nodes[i].argbuf, g->nodes[i].argbuf, pb);
        }
    }
    if (n_execs == cap_execs) {
        cap_execs = cap_execs ? cap_execs * 2 : 32;
        execs = realloc(execs, cap_execs * sizeof *execs);
        if (!execs) abort();
    }
    execs[n_execs++] = e;
    *out = e;
    r = CUDA_SUCCESS;
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                unsigned long long flags)
{
    return instantiate(phGraphExec, hGraph, flags);
}

// CUDA 12's form: flags, an upload stream (the simulator has nothing to
// upload, but the stream is checked), and a result code.
static CUresult instantiate_params(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p,
                                   bool ptds)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    p->hErrNode_out = NULL;
    p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    CUresult r = CUDA_SUCCESS;
    if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        r = sim_enter();
        if (r == CUDA_SUCCESS) (void)sim_stream_resolve(p->hUploadStream, ptds, &r);
        sim_leave();
    }
    if (r == CUDA_SUCCESS) r = instantiate(out, g, p->flags);
    if (r == CUDA_SUCCESS) p->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return r;
}

SIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return instantiate_params(phGraphExec, hGraph, instantiateParams, false);
}
SIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return instantiate_params(phGraphExec, hGraph, instantiateParams, true);
}

// The exported symbols cuGraphInstantiate (CUDA 10.0) and
// cuGraphInstantiate_v2 (11.0) keep their old ABI (error node and log
// buffer, cudaTypedefs.h); cuda.h's cuGraphInstantiate is a macro for
// cuGraphInstantiateWithFlags since CUDA 12. Nothing fails per node here, so
// the error node is NULL and the log empty.
static CUresult instantiate_legacy(CUgraphExec *out, CUgraph g, CUgraphNode *errNode, char *log,
                                   size_t logSize)
{
    if (errNode) *errNode = NULL;
    if (log && logSize) log[0] = '\0';
    return instantiate(out, g, 0);
}

SIM_EXPORT CUresult gi_v1(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                          char *logBuffer, size_t bufferSize) __asm__("cuGraphInstantiate");
SIM_EXPORT CUresult gi_v1(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                          char *logBuffer, size_t bufferSize)
{
    return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SIM_EXPORT CUresult gi_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                          char *logBuffer, size_t bufferSize) __asm__("cuGraphInstantiate_v2");
SIM_EXPORT CUresult gi_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                          char *logBuffer, size_t bufferSize)
{
    return instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

// --- clone ---------------------------------------------------------------------------
// A copy of the nodes (kernel arguments too): independent of the original,
// which may be destroyed first.
SIM_EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS && (r = sim_ctx_check()) == CUDA_SUCCESS) {
        if (!phGraphClone || !graph_ok(originalGraph)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            const sim_graph_t *g = (const sim_graph_t *)originalGraph;
            sim_graph_t *c = sim_graph_new();
            c->mode = g->mode;
            c->thread_agent = g->thread_agent;
            c->n = c->cap = g->n;
            c->nodes = calloc(g->n ? g->n : 1, sizeof *c->nodes);
            if (!c->nodes) abort();
            for (size_t i = 0; i < g->n; i++) {
                c->nodes[i] = g->nodes[i];
                if (g->nodes[i].kind == SIM_NODE_KERNEL) {
                    uint32_t pb = g->nodes[i].func->param_bytes;
                    c->nodes[i].argbuf = malloc(pb ? pb : 1);
                    if (!c->nodes[i].argbuf) abort();
                    memcpy(c->nodes[i].argbuf, g->nodes[i].argbuf, pb);
                }
            }
            *phGraphClone = (CUgraph)c;
        }
    }
    sim_leave();
    return r;
}

// --- launch ------------------------------------------------------------------------------
static bool recorded_inside(const struct CUgraphExec_st *e, size_t upto, CUevent ev)
{
    for (size_t i = 0; i < upto; i++)
        if (e->nodes[i].kind == SIM_NODE_EVENT_RECORD && e->nodes[i].event == ev) return true;
    return false;
}

static uint64_t copy_cost(uint64_t bytes, double gbps)
{
    return sim_cfg.copy_latency_ns + (gbps > 0 ? (uint64_t)((double)bytes / gbps) : 0);
}

static void replay_memcpy(sim_stream_t *s, const sim_node_t *n)
{
    bool src_dev = n->engine == SIM_ENG_D2H || n->engine == SIM_ENG_COMPUTE;
    bool dst_dev = n->engine == SIM_ENG_H2D || n->engine == SIM_ENG_COMPUTE;
    sim_memkind_t ks = sim_mem_classify(n->src, n->bytes), kd = sim_mem_classify(n->dst, n->bytes);
    // The device side must still be accessible device memory. The host side
    // was pinned at capture (pageable copies cannot be captured); the graph's
    // DMA reaches it without the host, so host memory no longer pinned
    // (freed, unregistered) is a fault too: stricter than CUDA, where it is
    // undefined.
    if (src_dev ? ks != SIM_MEM_DEVICE : ks != SIM_MEM_PINNED)
        sim_fault(n->what, NULL, s, n->src, n->bytes);
    if (dst_dev ? kd != SIM_MEM_DEVICE : kd != SIM_MEM_PINNED)
        sim_fault(n->what, NULL, s, n->dst, n->bytes);
    double gbps = n->engine == SIM_ENG_COMPUTE ? sim_cfg.d2d_gbps
                  : n->engine == SIM_ENG_D2H   ? sim_cfg.d2h_gbps
                                               : sim_cfg.h2d_gbps;
    sim_op_t op;
    // The stream is not capturing (checked by the caller): this cannot fail.
    if (sim_op_begin(&op, s, n->engine, copy_cost(n->bytes, gbps), n->what, NULL) != CUDA_SUCCESS)
        return;
    sim_hb_access(&op, n->src, n->bytes, SIM_HB_READ);
    sim_hb_access(&op, n->dst, n->bytes, SIM_HB_WRITE);
    if (!sim_cfg.nodata) {
        sim_fault_set_current(&op);
        memmove((void *)(uintptr_t)n->dst, (const void *)(uintptr_t)n->src, n->bytes);
        sim_fault_set_current(NULL);
    }
    sim_st.copies++;
}

static void replay_memset(sim_stream_t *s, const sim_node_t *n)
{
    uint64_t bytes = n->bytes * n->elem;
    if (sim_mem_classify(n->dst, bytes) != SIM_MEM_DEVICE)
        sim_fault(n->what, NULL, s, n->dst, bytes);
    uint64_t cost = sim_cfg.d2d_gbps > 0 ? (uint64_t)((double)bytes / sim_cfg.d2d_gbps) : 0;
    sim_op_t op;
    if (sim_op_begin(&op, s, SIM_ENG_COMPUTE, cost, n->what, NULL) != CUDA_SUCCESS) return;
    sim_hb_access(&op, n->dst, bytes, SIM_HB_WRITE);
    if (!sim_cfg.nodata) {
        if (n->elem == 1) {
            memset((void *)(uintptr_t)n->dst, (int)(n->value & 0xff), bytes);
        } else if (n->elem == 2) { // cuMemsetD16 and D2D16 rows (pitched.c)
            uint16_t *p = (uint16_t *)(uintptr_t)n->dst;
            for (uint64_t i = 0; i < n->bytes; i++)
                p[i] = (uint16_t)n->value;
        } else {
            uint32_t *p = (uint32_t *)(uintptr_t)n->dst;
            for (uint64_t i = 0; i < n->bytes; i++)
                p[i] = n->value;
        }
    }
}

static CUresult graph_launch(CUgraphExec e, CUstream h, bool ptds)
{
    CUresult r = sim_enter();
    if (r != CUDA_SUCCESS) {
        sim_leave();
        return r;
    }
    if (sim_cfg.launch_ns > sim_cfg.api_ns) sim_host_advance(sim_cfg.launch_ns - sim_cfg.api_ns);
    if ((r = sim_ctx_check()) != CUDA_SUCCESS) goto out;
    if (!exec_ok(e)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    sim_stream_t *s = sim_stream_resolve(h, ptds, &r);
    if (!s) goto out;
    sim_graph_t *cg = sim_capture_graph(s, &r);
    if (r != CUDA_SUCCESS) goto out;
    if (cg) {
        sim_capture_invalidate(s);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto out;
    }
    // Validate before anything runs, so a failed launch has no effect: an
    // event waited on from outside the capture must still exist.
    for (size_t i = 0; i < e->n; i++) {
        const sim_node_t *n = &e->nodes[i];
        if (n->kind == SIM_NODE_EVENT_WAIT && !recorded_inside(e, i, n->event) &&
            (!n->event || n->event->magic != SIM_EVENT_MAGIC)) {
            r = CUDA_ERROR_INVALID_VALUE; // destroyed since capture: assumption
            goto out;
        }
    }
    // Behind the previous launch of this executable graph.
    if (e->launched) {
        sim_vc_join(&s->vc, &e->vc);
        if (e->done_ns > s->tail_ns) s->tail_ns = e->done_ns;
    }
    for (size_t i = 0; i < e->n; i++) {
        const sim_node_t *n = &e->nodes[i];
        switch (n->kind) {
        case SIM_NODE_KERNEL: {
            CUfunction f = n->func;
            void *args[SIM_MAX_PARAMS];
            for (int p = 0; p < f->desc.nparams; p++)
                args[p] = (char *)n->argbuf + f->param_offset[p];
            sim_launch_t L = n->launch;
            L.stream = h;
            (void)sim_kernel_exec(s, f, args, &L);
            break;
        }
        case SIM_NODE_MEMCPY:
            replay_memcpy(s, n);
            break;
        case SIM_NODE_MEMSET:
            replay_memset(s, n);
            break;
        case SIM_NODE_EVENT_WAIT:
            if (!recorded_inside(e, i, n->event) && n->event->recorded) {
                sim_vc_join(&s->vc, &n->event->vc);
                if (n->event->time_ns > s->tail_ns) s->tail_ns = n->event->time_ns;
            }
            break;
        default: // SIM_NODE_EVENT_RECORD: an edge inside the graph
            break;
        }
    }
    e->launched = true;
    e->done_ns = s->tail_ns;
    e->vc = s->vc;
out:
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_FAIL_POINT(cuGraphLaunch);
    return graph_launch(hGraphExec, hStream, false);
}
SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_FAIL_POINT(cuGraphLaunch);
    return graph_launch(hGraphExec, hStream, true);
}

// Upload prepares device-side resources; the simulator has none to prepare.
// The handles are still checked.
static CUresult graph_upload(CUgraphExec e, CUstream h, bool ptds)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS && (r = sim_ctx_check()) == CUDA_SUCCESS) {
        if (!exec_ok(e))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            (void)sim_stream_resolve(h, ptds, &r);
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_upload(hGraphExec, hStream, false);
}
SIM_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_upload(hGraphExec, hStream, true);
}

// --- destroy --------------------------------------------------------------------------
SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        if (!exec_ok(hGraphExec)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            // Launches already enqueued have had their effect (program
            // order), so nothing in flight needs the nodes.
            hGraphExec->magic = SIM_DEAD_MAGIC;
            for (size_t i = 0; i < hGraphExec->n; i++)
                free(hGraphExec->nodes[i].argbuf);
            free(hGraphExec->nodes);
            hGraphExec->nodes = NULL;
            hGraphExec->n = 0;
        }
    }
    sim_leave();
    return r;
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUresult r = sim_enter();
    if (r == CUDA_SUCCESS) {
        if (!graph_ok(hGraph)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            sim_graph_t *g = (sim_graph_t *)hGraph;
            g->magic = SIM_DEAD_MAGIC;
            for (size_t i = 0; i < g->n; i++)
                free(g->nodes[i].argbuf);
            free(g->nodes);
            g->nodes = NULL;
            g->n = g->cap = 0;
        }
    }
    sim_leave();
    return r;
}
