// SPDX-License-Identifier: MIT
// The single-rank NCCL look-alike (libnccl.so.2): collectives move the right
// bytes as kernels on the caller's stream, the simulator counts and checks
// them (a freed buffer faults, an unordered reader races), and the argument
// and group errors follow nccl.h.
#include <criterion/criterion.h>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <string.h>

#include "simgpu.h"

#define COUNT 1000 // floats

static ncclComm_t comm;
static cudaStream_t s;
static float *send_d, *recv_d;
static float host[COUNT];

static void setup(void)
{
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    ncclUniqueId id;
    cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess);
    cr_assert_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    cr_assert_eq(cudaMalloc((void **)&send_d, sizeof host), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&recv_d, sizeof host), cudaSuccess);
    for (int i = 0; i < COUNT; i++)
        host[i] = (float)i * 0.5f;
    cr_assert_eq(cudaMemcpy(send_d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    cr_assert_eq(cudaMemset(recv_d, 0, sizeof host), cudaSuccess);
}

static void check_recv(size_t n)
{
    float out[COUNT];
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(cudaMemcpy(out, recv_d, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < COUNT; i++)
        cr_assert_eq(out[i], i < n ? host[i] : 0.0f, "recv[%zu] = %g", i, out[i]);
}

static uint64_t launches(void)
{
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    return st.launches;
}

TestSuite(nccl, .init = setup);

Test(nccl, allreduce_copies_count_times_datatype)
{
    uint64_t before = launches();
    cr_assert_eq(ncclAllReduce(send_d, recv_d, COUNT, ncclFloat32, ncclSum, comm, s), ncclSuccess);
    check_recv(COUNT);
    cr_assert_eq(launches(), before + 1, "one kernel on the stream");
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.races, 0);
}

Test(nccl, collectives_honour_count_and_type)
{
    // 250 bf16 = 500 bytes = 125 floats.
    cr_assert_eq(ncclAllGather(send_d, recv_d, 250, ncclBfloat16, comm, s), ncclSuccess);
    check_recv(125);
    cr_assert_eq(ncclReduceScatter(send_d, recv_d, 300, ncclFloat, ncclMax, comm, s), ncclSuccess);
    check_recv(300);
    cr_assert_eq(ncclBroadcast(send_d, recv_d, 100, ncclFloat64, 0, comm, s), ncclSuccess);
    check_recv(300); // 100 doubles = 200 floats, inside what is already there
    cr_assert_eq(cudaMemset(recv_d, 0, sizeof host), cudaSuccess);
    cr_assert_eq(ncclReduce(send_d, recv_d, 2 * COUNT, ncclHalf, ncclAvg, 0, comm, s), ncclSuccess);
    check_recv(COUNT);
    cr_assert_eq(ncclBcast(recv_d, COUNT, ncclFloat, 0, comm, s), ncclSuccess);
    check_recv(COUNT);
}

Test(nccl, send_recv_to_self_pair_in_a_group)
{
    cudaStream_t t;
    cr_assert_eq(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
    uint64_t before = launches();
    cr_assert_eq(ncclGroupStart(), ncclSuccess);
    cr_assert_eq(ncclSend(send_d, 400, ncclFloat, 0, comm, t), ncclSuccess);
    cr_assert_eq(ncclRecv(recv_d, 400, ncclFloat, 0, comm, s), ncclSuccess);
    cr_assert_eq(launches(), before, "nothing runs before ncclGroupEnd");
    cr_assert_eq(ncclGroupEnd(), ncclSuccess);
    cr_assert_eq(launches(), before + 1);
    check_recv(400);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_eq(st.races, 0);
    // A send nobody receives would hang NCCL: refused.
    cr_assert_eq(ncclSend(send_d, 4, ncclFloat, 0, comm, s), ncclInvalidUsage);
    cr_assert_eq(ncclGroupStart(), ncclSuccess);
    cr_assert_eq(ncclRecv(recv_d, 4, ncclFloat, 0, comm, s), ncclSuccess);
    cr_assert_eq(ncclGroupEnd(), ncclInvalidUsage);
    cr_assert_eq(ncclGroupEnd(), ncclInvalidUsage, "unbalanced");
}

Test(nccl, argument_errors)
{
    ncclComm_t c2;
    ncclUniqueId id;
    cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess);
    cr_assert_eq(ncclCommInitRank(&c2, 2, id, 0), ncclInvalidArgument);
    cr_assert_eq(ncclCommInitRank(&c2, 1, id, 1), ncclInvalidArgument);
    cr_assert_eq(ncclCommInitAll(&c2, 2, NULL), ncclInvalidArgument);
    cr_assert_eq(ncclCommInitAll(&c2, 1, NULL), ncclSuccess);
    int n = 0, v = 0;
    cr_assert_eq(ncclCommCount(c2, &n), ncclSuccess);
    cr_assert_eq(n, 1);
    cr_assert_eq(ncclGetVersion(&v), ncclSuccess);
    cr_assert_eq(v, NCCL_VERSION_CODE);
    cr_assert_eq(ncclCommDestroy(c2), ncclSuccess);
    cr_assert_eq(ncclCommCount(c2, &n), ncclInvalidArgument);
    cr_assert_eq(ncclAllReduce(send_d, recv_d, 1, ncclFloat, ncclSum, c2, s), ncclInvalidArgument);
    cr_assert_eq(ncclAllReduce(send_d, recv_d, 1, ncclNumTypes, ncclSum, comm, s),
                 ncclInvalidArgument);
    cr_assert_eq(ncclAllReduce(send_d, recv_d, 1, ncclFloat, ncclNumOps, comm, s),
                 ncclInvalidArgument);
    cr_assert_eq(ncclBroadcast(send_d, recv_d, 1, ncclFloat, 1, comm, s), ncclInvalidArgument);
    cr_assert_eq(ncclAllReduce(NULL, recv_d, 1, ncclFloat, ncclSum, comm, s), ncclInvalidArgument);
    cr_assert_str_eq(ncclGetErrorString(ncclSuccess), "no error");
    cr_assert_not_null(strstr(ncclGetErrorString(ncclInvalidArgument), "invalid argument"));
}

Test(nccl, unordered_reader_on_another_stream_races)
{
    cudaStream_t t;
    cr_assert_eq(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(ncclAllReduce(send_d, recv_d, COUNT, ncclFloat, ncclSum, comm, s), ncclSuccess);
    // t reads recv_d with no event wait on s.
    cr_assert_eq(ncclAllReduce(recv_d, send_d, COUNT, ncclFloat, ncclSum, comm, t), ncclSuccess);
    sim_stats_t st;
    cr_assert_eq(simrtGetStats(&st), 0);
    cr_assert_geq(st.races, 1);
}

Test(nccl, reading_a_freed_buffer_faults, .exit_code = 86)
{
    cr_assert_eq(cudaFree(send_d), cudaSuccess);
    ncclAllReduce(send_d, recv_d, COUNT, ncclFloat, ncclSum, comm, s);
    cr_assert_fail("an all-reduce from a freed buffer returned");
}
