// SPDX-License-Identifier: MIT
// The simulated runtime's graph calls: instantiate, clone, launch, destroy. Graphs
// come from stream capture (cudaStreamEndCapture); cudaGraph_t is CUgraph and
// cudaGraphExec_t is CUgraphExec, so each call decodes nothing and forwards
// to the driver (drv/graph.c holds the semantics).
#include "rt.h"

_Static_assert(sizeof(cudaGraphExec_t) == sizeof(CUgraphExec),
               "graph handles are the same pointers");

// cudaGraphInstantiateFlags equal CUgraphInstantiate_flags (auto-free 1,
// upload 2, device launch 4, node priority 8).
// Shared by both names: one exported entry point never calls the other, so
// an interposer on either sees each program call once.
static cudaError_t rt_graph_instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                        unsigned long long flags)
{
    if (!pGraphExec) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    return rt_ret_cu(
        rt_drv.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

RT_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           unsigned long long flags)
{
    return rt_graph_instantiate(pGraphExec, graph, flags);
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags)
{
    return rt_graph_instantiate(pGraphExec, graph, flags);
}

// The driver's parameter block is the runtime's, field for field.
static cudaError_t rt_graph_instantiate_params(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                               cudaGraphInstantiateParams *p, bool ptds)
{
    if (!pGraphExec || !p) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    CUDA_GRAPH_INSTANTIATE_PARAMS cp = {.flags = p->flags,
                                        .hUploadStream = (CUstream)p->uploadStream};
    CUresult r =
        (ptds ? rt_drv.cuGraphInstantiateWithParams_ptsz : rt_drv.cuGraphInstantiateWithParams)(
            (CUgraphExec *)pGraphExec, (CUgraph)graph, &cp);
    p->errNode_out = (cudaGraphNode_t)cp.hErrNode_out;
    p->result_out = (cudaGraphInstantiateResult)cp.result_out;
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                     cudaGraphInstantiateParams *instantiateParams)
{
    return rt_graph_instantiate_params(pGraphExec, graph, instantiateParams, false);
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *instantiateParams)
{
    return rt_graph_instantiate_params(pGraphExec, graph, instantiateParams, true);
}

RT_EXPORT cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    return rt_ret_cu(rt_drv.cuGraphClone((CUgraph *)pGraphClone, (CUgraph)originalGraph));
}

static cudaError_t rt_graph_launch(cudaGraphExec_t exec, cudaStream_t s, bool ptds)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    CUresult r = ptds ? rt_drv.cuGraphLaunch_ptsz((CUgraphExec)exec, s)
                      : rt_drv.cuGraphLaunch((CUgraphExec)exec, s);
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return rt_graph_launch(graphExec, stream, false);
}

RT_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return rt_graph_launch(graphExec, stream, true);
}

RT_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    return rt_ret_cu(rt_drv.cuGraphExecDestroy((CUgraphExec)graphExec));
}

RT_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    cudaError_t e = rt_enter();
    if (e != cudaSuccess) return rt_ret(e);
    return rt_ret_cu(rt_drv.cuGraphDestroy((CUgraph)graph));
}
