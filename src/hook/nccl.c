// SPDX-License-Identifier: MIT
// NCCL collectives, interposed: their send and receive buffers are checked
// like a kernel's parameters before the collective is enqueued (a gradient
// all-reduce may read an activation the schedule has offloaded). The real
// functions come from the next definition (the program's libnccl) at first
// use (cuda/nccl.h); a program without NCCL never calls these.
#include <stdint.h>

#include "cuda/nccl.h"
#include "hook.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "offload/scan.h"

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    default:
        return 8;
    }
}

// Both ranges of a collective on stream s, before it is enqueued; true when
// the check ran (ended once the collective is enqueued).
static bool check(const void *send, size_t send_bytes, const void *recv, size_t recv_bytes,
                  cudaStream_t s, const char *what)
{
    if (ao_in_hook || ao_engine_off || !__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE))
        return false;
    CUstream cs = s ? (CUstream)s : CU_STREAM_LEGACY;
    ao_scan_begin();
    if (send) ao_scan_range((uint64_t)(uintptr_t)send, send_bytes, cs, what);
    if (recv) ao_scan_range((uint64_t)(uintptr_t)recv, recv_bytes, cs, what);
    return true;
}

static int ranks(ncclComm_t comm)
{
    __typeof__(&ncclCommCount) count = ao_real_nccl()->ncclCommCount;
    int n = 1;
    if (!count || count(comm, &n) != ncclSuccess || n < 1) n = 1;
    return n;
}

#define REAL(name)                                                                                 \
    __typeof__(&name) real_ = ao_real_nccl()->name;                                                \
    if (!real_) return ncclSystemError

AO_EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    REAL(ncclAllReduce);
    return CHECKED(
        check(send, count * type_size(t), recv, count * type_size(t), s, "ncclAllReduce"),
        real_(send, recv, count, t, op, comm, s));
}

AO_EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
                                     ncclComm_t comm, cudaStream_t s)
{
    REAL(ncclAllGather);
    return CHECKED(check(send, count * type_size(t), recv,
                         count * type_size(t) * (size_t)ranks(comm), s, "ncclAllGather"),
                   real_(send, recv, count, t, comm, s));
}

AO_EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t s)
{
    REAL(ncclReduceScatter);
    return CHECKED(check(send, count * type_size(t) * (size_t)ranks(comm), recv,
                         count * type_size(t), s, "ncclReduceScatter"),
                   real_(send, recv, count, t, op, comm, s));
}

AO_EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t,
                                     int root, ncclComm_t comm, cudaStream_t s)
{
    REAL(ncclBroadcast);
    return CHECKED(
        check(send, count * type_size(t), recv, count * type_size(t), s, "ncclBroadcast"),
        real_(send, recv, count, t, root, comm, s));
}

AO_EXPORT ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s)
{
    REAL(ncclReduce);
    return CHECKED(check(send, count * type_size(t), recv, count * type_size(t), s, "ncclReduce"),
                   real_(send, recv, count, t, op, root, comm, s));
}

AO_EXPORT ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer,
                                ncclComm_t comm, cudaStream_t s)
{
    REAL(ncclSend);
    return CHECKED(check(send, count * type_size(t), NULL, 0, s, "ncclSend"),
                   real_(send, count, t, peer, comm, s));
}

AO_EXPORT ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer,
                                ncclComm_t comm, cudaStream_t s)
{
    REAL(ncclRecv);
    return CHECKED(check(NULL, 0, recv, count * type_size(t), s, "ncclRecv"),
                   real_(recv, count, t, peer, comm, s));
}
