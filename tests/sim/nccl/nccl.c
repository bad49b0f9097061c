// SPDX-License-Identifier: MIT
// libnccl.so.2 look-alike for tests: one process, one rank, one device.
//
// Prototypes from the toolkit's nccl.h. Every collective and point-to-point
// call is a kernel launch on the caller's stream through the simulated
// driver, so the simulator checks its buffers like any kernel's: a buffer
// freed, unmapped or offloaded faults (exit 86), an unordered access from
// another stream is a race. Like NCCL (which links a static runtime), this
// library never links the driver or the runtime: it dlopens libcuda.so.1 and
// takes every entry point, simKernelCreate included, from cuGetProcAddress.
//
// Single-rank semantics: all-reduce, reduce, all-gather, reduce-scatter and
// broadcast copy count x sizeof(datatype) bytes from sendbuff to recvbuff
// (any reduction of one rank is the identity, average included); ncclBcast
// touches its buffer in place; a send to self pairs, inside one group, with
// a receive from self (FIFO order) and copies into the receive buffer.
// Calls between ncclGroupStart and ncclGroupEnd run at the outermost
// ncclGroupEnd, as in NCCL.
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <nccl.h>

#include "simgpu.h"

#define NCCL_EXPORT __attribute__((visibility("default")))

// --- driver ------------------------------------------------------------------------
static struct {
    __typeof__(cuInit) *init;
    __typeof__(cuCtxGetCurrent) *ctx_get;
    __typeof__(cuCtxSetCurrent) *ctx_set;
    __typeof__(cuDeviceGet) *dev_get;
    __typeof__(cuDevicePrimaryCtxRetain) *retain;
    __typeof__(cuLaunchKernel) *launch;
    __typeof__(cuEventCreate) *ev_create;
    __typeof__(cuEventRecord) *ev_record;
    __typeof__(cuEventDestroy) *ev_destroy;
    __typeof__(cuStreamWaitEvent) *wait;
    __typeof__(simKernelCreate) *kcreate;
} drv;

enum op_kind_e {
    OP_ALLREDUCE,
    OP_REDUCE,
    OP_ALLGATHER,
    OP_REDUCESCATTER,
    OP_BROADCAST,
    OP_BCAST,
    OP_SENDRECV,
    OP_SEND,
    OP_RECV,
    OP_KINDS = OP_SENDRECV + 1
};

// Kernel names as diagnostics show them: the collective that touched memory.
static const char *const kernel_names[OP_KINDS] = {
    "ncclSimAllReduce", "ncclSimReduce", "ncclSimAllGather", "ncclSimReduceScatter",
    "ncclSimBroadcast", "ncclSimBcast",  "ncclSimSendRecv"};
static CUfunction kernels[OP_KINDS];

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;

// copy(dst, src, bytes)
static void copy_body(void **args, const sim_launch_t *l)
{
    (void)l;
    void *dst = *(void **)args[0];
    const void *src = *(const void **)args[1];
    uint64_t bytes = *(uint64_t *)args[2];
    if (dst != src) memmove(dst, src, bytes);
}

static void load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return;
    __typeof__(cuGetProcAddress) *gpa =
        (__typeof__(cuGetProcAddress) *)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) return;
    // Built against CUDA 13, it asks at 13.0, or at an older driver's own
    // version: asking above the driver's is an error.
    int ver = 13000, drv_ver = 0;
    CUresult (*dv)(int *) = (CUresult(*)(int *))dlsym(h, "cuDriverGetVersion");
    if (dv && dv(&drv_ver) == CUDA_SUCCESS && drv_ver > 0 && drv_ver < ver) ver = drv_ver;
    struct {
        const char *name;
        void **slot;
    } want[] = {
        {"cuInit", (void **)&drv.init},
        {"cuCtxGetCurrent", (void **)&drv.ctx_get},
        {"cuCtxSetCurrent", (void **)&drv.ctx_set},
        {"cuDeviceGet", (void **)&drv.dev_get},
        {"cuDevicePrimaryCtxRetain", (void **)&drv.retain},
        {"cuLaunchKernel", (void **)&drv.launch},
        {"cuEventCreate", (void **)&drv.ev_create},
        {"cuEventRecord", (void **)&drv.ev_record},
        {"cuEventDestroy", (void **)&drv.ev_destroy},
        {"cuStreamWaitEvent", (void **)&drv.wait},
        {"simKernelCreate", (void **)&drv.kcreate},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CUdriverProcAddressQueryResult q;
        if (gpa(want[i].name, want[i].slot, ver, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) !=
                CUDA_SUCCESS ||
            !*want[i].slot)
            return;
    }
    loaded = true;
}

// The device's primary context current on this thread, as NCCL's static
// runtime makes it; the kernels created once.
static ncclResult_t ready(void)
{
    pthread_once(&load_once, load);
    if (!loaded) return ncclSystemError; // no (simulated) driver
    CUcontext c = NULL;
    if (drv.ctx_get(&c) != CUDA_SUCCESS || !c) {
        CUdevice d;
        if (drv.init(0) != CUDA_SUCCESS || drv.dev_get(&d, 0) != CUDA_SUCCESS ||
            drv.retain(&c, d) != CUDA_SUCCESS || drv.ctx_set(c) != CUDA_SUCCESS)
            return ncclUnhandledCudaError;
    }
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    ncclResult_t r = ncclSuccess;
    pthread_mutex_lock(&mu);
    for (int k = 0; k < OP_KINDS && r == ncclSuccess; k++) {
        if (kernels[k]) continue;
        sim_kernel_desc_t d = {
            .name = kernel_names[k],
            .fn = copy_body,
            .nparams = 3,
            .param_size = {8, 8, 8},
            .naccess = 2,
            .access = {{.param = 1, .mode = SIM_R, .count_param = 2, .scale = 1},
                       {.param = 0, .mode = SIM_W, .count_param = 2, .scale = 1}},
            .ns_fixed = 5000, // a collective's launch and protocol overhead (assumption)
            .flops_param = -1,
        };
        if (drv.kcreate(&d, &kernels[k]) != CUDA_SUCCESS) r = ncclInternalError;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

// --- communicators --------------------------------------------------------------------
#define COMM_MAGIC 0x4e43434cu
#define DEAD_MAGIC 0xdeadbeefu

struct ncclComm {
    uint32_t magic;
};

static bool comm_ok(const struct ncclComm *c)
{
    return c && c->magic == COMM_MAGIC;
}

// Never freed: a destroyed communicator stays recognisable as such. The list
// keeps every one reachable (leak checkers stay quiet).
static struct ncclComm **comms;
static size_t ncomms, capcomms;
static pthread_mutex_t comms_mu = PTHREAD_MUTEX_INITIALIZER;

static ncclComm_t comm_new(void)
{
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->magic = COMM_MAGIC;
    pthread_mutex_lock(&comms_mu);
    if (ncomms == capcomms) {
        size_t cap = capcomms ? capcomms * 2 : 8;
        struct ncclComm **p = realloc(comms, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&comms_mu);
            free(c);
            return NULL;
        }
        comms = p;
        capcomms = cap;
    }
    comms[ncomms++] = c;
    pthread_mutex_unlock(&comms_mu);
    return c;
}

NCCL_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId) return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, "simgpu-nccl", 11);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                          int rank)
{
    (void)commId;
    if (!comm) return ncclInvalidArgument;
    // One process, one rank: anything larger would wait forever for peers.
    if (nranks != 1 || rank != 0) return ncclInvalidArgument;
    ncclResult_t r = ready();
    if (r != ncclSuccess) return r;
    return (*comm = comm_new()) ? ncclSuccess : ncclSystemError;
}

NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    if (!comm || ndev != 1 || (devlist && devlist[0] != 0)) return ncclInvalidArgument;
    ncclResult_t r = ready();
    if (r != ncclSuccess) return r;
    return (*comm = comm_new()) ? ncclSuccess : ncclSystemError;
}

NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    // NULL is accepted (NCCL returns success for a NULL communicator).
    if (!comm) return ncclSuccess;
    if (!comm_ok(comm)) return ncclInvalidArgument;
    comm->magic = DEAD_MAGIC;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return ncclCommDestroy(comm);
}

NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return comm_ok(comm) ? ncclSuccess : ncclInvalidArgument;
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm_ok(comm) || !count) return ncclInvalidArgument;
    *count = 1;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm_ok(comm) || !rank) return ncclInvalidArgument;
    *rank = 0;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm_ok(comm) || !device) return ncclInvalidArgument;
    *device = 0;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm_ok(comm) || !asyncError) return ncclInvalidArgument;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

NCCL_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

NCCL_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}

// --- operations and groups --------------------------------------------------------------
typedef struct op_s {
    int kind;
    void *dst;
    const void *src;
    uint64_t bytes;
    cudaStream_t stream;
    bool matched; // send/recv: paired
} op_t;

static __thread int group_depth;
static __thread op_t *queue;
static __thread size_t nqueue, capqueue;
static __thread ncclResult_t group_error; // first argument error inside the group

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
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

static ncclResult_t launch_copy(int kind, void *dst, const void *src, uint64_t bytes,
                                cudaStream_t s)
{
    void *args[3] = {&dst, &src, &bytes};
    CUresult r = drv.launch(kernels[kind], 1, 1, 1, 256, 1, 1, 0, (CUstream)s, args, NULL);
    return r == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

// Order stream b after everything enqueued on a so far.
static ncclResult_t join(cudaStream_t a, cudaStream_t b)
{
    if (a == b) return ncclSuccess;
    CUevent e;
    if (drv.ev_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return ncclUnhandledCudaError;
    CUresult r = drv.ev_record(e, (CUstream)a);
    if (r == CUDA_SUCCESS) r = drv.wait((CUstream)b, e, 0);
    drv.ev_destroy(e);
    return r == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

static ncclResult_t run_queue(void)
{
    ncclResult_t r = ncclSuccess;
    // Pair every send with the first unpaired receive (NCCL matches
    // point-to-point operations between two ranks in order).
    for (size_t i = 0; i < nqueue && r == ncclSuccess; i++) {
        if (queue[i].kind != OP_SEND) continue;
        size_t j;
        for (j = 0; j < nqueue; j++)
            if (queue[j].kind == OP_RECV && !queue[j].matched) break;
        // A send with no receive would wait forever in NCCL: refused instead.
        // A receive smaller than the message is an error in NCCL too.
        if (j == nqueue || queue[j].bytes < queue[i].bytes) {
            r = ncclInvalidUsage;
            break;
        }
        queue[i].matched = queue[j].matched = true;
        queue[j].src = queue[i].src;
        queue[j].bytes = queue[i].bytes;
        queue[i].dst = (void *)&queue[j]; // the receive that carries the copy
    }
    for (size_t i = 0; i < nqueue && r == ncclSuccess; i++)
        if (queue[i].kind == OP_RECV && !queue[i].matched) r = ncclInvalidUsage;
    for (size_t i = 0; i < nqueue && r == ncclSuccess; i++) {
        op_t *o = &queue[i];
        if (o->kind == OP_SEND) continue; // runs with its receive
        if (!o->bytes) continue;
        if (o->kind == OP_RECV) {
            // The copy runs on the receive's stream, after the send's stream
            // reached the send; the send's stream then waits for it, as NCCL
            // joins the streams of a group.
            cudaStream_t ss = NULL;
            for (size_t k = 0; k < nqueue; k++)
                if (queue[k].kind == OP_SEND && queue[k].dst == (void *)o) ss = queue[k].stream;
            if ((r = join(ss, o->stream)) != ncclSuccess) break;
            if ((r = launch_copy(OP_SENDRECV, o->dst, o->src, o->bytes, o->stream)) != ncclSuccess)
                break;
            r = join(o->stream, ss);
            continue;
        }
        r = launch_copy(o->kind, o->dst, o->src, o->bytes, o->stream);
    }
    nqueue = 0;
    return r;
}

static ncclResult_t submit(int kind, void *dst, const void *src, size_t count, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t s)
{
    size_t es = type_size(t);
    ncclResult_t r = ncclSuccess;
    if (!comm_ok(comm) || !es || (count && (!dst || !src)) || count > UINT64_MAX / es)
        r = ncclInvalidArgument;
    else
        r = ready();
    if (r != ncclSuccess) {
        if (group_depth && group_error == ncclSuccess) group_error = r;
        return r;
    }
    if (nqueue == capqueue) {
        size_t c = capqueue ? capqueue * 2 : 16;
        op_t *q = realloc(queue, c * sizeof *q);
        if (!q) return ncclSystemError;
        queue = q;
        capqueue = c;
    }
    queue[nqueue++] = (op_t){kind, dst, src, (uint64_t)count * es, s, false};
    return group_depth ? ncclSuccess : run_queue();
}

static bool op_ok(ncclRedOp_t op)
{
    // Built-in reductions only: ncclRedOpCreatePreMulSum is not provided.
    return (int)op >= 0 && (int)op < (int)ncclNumOps;
}

NCCL_EXPORT ncclResult_t ncclGroupStart(void)
{
    if (group_depth == 0) group_error = ncclSuccess;
    group_depth++;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    if (group_error != ncclSuccess) {
        nqueue = 0; // NCCL aborts the whole group
        return group_error;
    }
    return run_queue();
}

NCCL_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
    if (!op_ok(op)) return ncclInvalidArgument;
    return submit(OP_ALLREDUCE, recvbuff, sendbuff, count, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    if (!op_ok(op) || root != 0) return ncclInvalidArgument;
    return submit(OP_REDUCE, recvbuff, sendbuff, count, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return submit(OP_ALLGATHER, recvbuff, sendbuff, sendcount, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream)
{
    if (!op_ok(op)) return ncclInvalidArgument;
    return submit(OP_REDUCESCATTER, recvbuff, sendbuff, recvcount, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    if (root != 0) return ncclInvalidArgument;
    return submit(OP_BROADCAST, recvbuff, sendbuff, count, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    if (root != 0) return ncclInvalidArgument;
    return submit(OP_BCAST, buff, buff, count, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    if (peer != 0) return ncclInvalidArgument;
    // The source is checked here; the destination is the matching receive.
    return submit(OP_SEND, (void *)sendbuff, sendbuff, count, datatype, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream)
{
    if (peer != 0) return ncclInvalidArgument;
    return submit(OP_RECV, recvbuff, recvbuff, count, datatype, comm, stream);
}
