// SPDX-License-Identifier: MIT
// One call of each kind the step trace records (AOSHIM_RECORD), made the
// ways a program makes them: runtime calls, the driver's exported symbols,
// and driver entry points from cudaGetDriverEntryPointByVersion. For each call it
// prints the record the trace must hold, without its t= (and tid=, sample=)
// fields, as "expect <record>", and each declaration as "declare <record>";
// test_record.c holds the trace to them, in order. Exit 0 when every call
// succeeded. Run under LD_PRELOAD=libaoshim.so with AOSHIM_RECORD set.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "simgpu.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        int e_ = (int)(call);                                                                      \
        if (e_ != 0) {                                                                             \
            printf("record_paths: %s failed: %d\n", #call, e_);                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define P(v) ((uint64_t)(uintptr_t)(v))

static void touch(void **args, const sim_launch_t *l)
{
    (void)args;
    (void)l;
}

static void kernel_stub(void) {}

int main(void)
{
    static unsigned char host[1 << 16];
    // A kernel of two pointers and a count, as nvcc would register it.
    sim_kernel_desc_t d = {
        .name = "rec_touch", .fn = touch, .nparams = 3, .ns_fixed = 2000, .flops_param = -1};
    d.param_size[0] = d.param_size[1] = d.param_size[2] = 8;
    d.naccess = 2;
    d.access[0] = (sim_access_t){.param = 0, .mode = SIM_W, .count_param = -1, .scale = 64};
    d.access[1] = (sim_access_t){.param = 1, .mode = SIM_R, .count_param = -1, .scale = 64};
    CK(simrtRegisterKernel((const void *)kernel_stub, &d));
    CUfunction fn;
    CK(simKernelCreate(&d, &fn));

    cudaStream_t s, s2;
    CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1));
    printf("declare stream id=2 flags=1 prio=-1\n");
    CK(cudaStreamCreate(&s2));
    printf("declare stream id=3 flags=0\n");
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    printf("declare event id=1 flags=2\n");

    void *a, *b;
    CUdeviceptr c;
    CK(cudaMalloc(&a, 1 << 20));
    printf("expect alloc api=cudaMalloc size=1048576 addr=0x%" PRIx64 "\n", P(a));
    CK(cudaMallocAsync(&b, 65536, s));
    printf("expect alloc api=cudaMallocAsync size=65536 addr=0x%" PRIx64 " s=2\n", P(b));
    CK(cuMemAlloc(&c, 8192));
    printf("expect alloc api=cuMemAlloc size=8192 addr=0x%" PRIx64 "\n", P(c));

    CK(cudaMemcpy(a, host, 4096, cudaMemcpyHostToDevice));
    printf("expect copy s=0 kind=h2d dst=0x%" PRIx64 " n=4096 async=0\n", P(a));
    CK(cudaMemcpyAsync(host, b, 1000, cudaMemcpyDeviceToHost, s));
    printf("expect copy s=2 kind=d2h src=0x%" PRIx64 " n=1000 async=1\n", P(b));
    CK(cudaMemcpyAsync(b, a, 512, cudaMemcpyDefault, s));
    printf("expect copy s=2 kind=default dst=0x%" PRIx64 " src=0x%" PRIx64 " n=512 async=1\n", P(b),
           P(a));
    CK(cudaMemsetAsync(a, 7, 100, s));
    printf("expect memset s=2 dst=0x%" PRIx64 " n=100 value=7\n", P(a));
    // Pitched: the range covering the rows, (rows - 1) * pitch + width.
    CK(cudaMemset2DAsync(a, 256, 1, 100, 3, s));
    printf("expect memset s=2 dst=0x%" PRIx64 " n=612 value=1 pitched=1\n", P(a));
    CK(cudaStreamSynchronize(s)); // the legacy stream's copy next: s does not block with it
    printf("expect sync what=stream s=2\n");
    CK(cudaMemcpy2D(b, 128, a, 256, 64, 4, cudaMemcpyDeviceToDevice));
    printf("expect copy s=0 kind=d2d dst=0x%" PRIx64 " src=0x%" PRIx64
           " n=448 src_n=832 async=0 pitched=1\n",
           P(b), P(a));
    CK(cuMemsetD32Async(c, 0xdeadbeefu, 16, (CUstream)s2));
    printf("expect memset s=3 dst=0x%" PRIx64 " n=64 value=3735928559 width=4\n", P(c));
    CK(cudaStreamSynchronize(s2));
    printf("expect sync what=stream s=3\n");

    // Launches: the runtime's (its first launch is the kernel's timed one)
    // and the driver's with packed parameters; 0 words are left out.
    uint64_t n = 64;
    void *args[] = {&a, &b, &n};
    CK(cudaLaunchKernel((const void *)kernel_stub, (dim3){2, 1, 1}, (dim3){32, 1, 1}, args, 0, s));
    printf("declare kernel id=1 name=rec_touch\n");
    printf("expect launch k=1 s=2 grid=2,1,1 block=32,1,1 ptr=0x%" PRIx64 ",0x%" PRIx64 ",0x40\n",
           P(a), P(b));
    CK(cudaEventRecord(e, s));
    printf("expect record ev=1 s=2\n");
    CK(cudaStreamWaitEvent(s2, e, 0));
    printf("expect wait ev=1 s=3\n");
    struct {
        CUdeviceptr dst, src;
        uint64_t zero;
    } packed = {c, P(b), 0};
    size_t psize = sizeof packed;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                     CU_LAUNCH_PARAM_END};
    CK(cuLaunchKernel(fn, 1, 2, 3, 4, 5, 6, 128, (CUstream)s2, NULL, extra));
    printf("declare kernel id=2 name=rec_touch\n");
    printf("expect launch k=2 s=3 grid=1,2,3 block=4,5,6 shm=128 ptr=0x%" PRIx64 ",0x%" PRIx64 "\n",
           P(c), P(b));
    CK(cudaEventSynchronize(e));
    printf("expect sync what=event ev=1\n");
    CK(cudaStreamSynchronize(s2));
    printf("expect sync what=stream s=3\n");
    CK(cudaLaunchKernel((const void *)kernel_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0,
                        cudaStreamPerThread));
    printf("expect launch k=1 s=1 grid=1,1,1 block=1,1,1 ptr=0x%" PRIx64 ",0x%" PRIx64 ",0x40\n",
           P(a), P(b));
    CK(cudaStreamSynchronize(cudaStreamPerThread));
    printf("expect sync what=stream s=1\n");

    // The default pool, through the entry points the runtime hands out (the
    // way libcudart's own cudaMemPoolSetAttribute reaches the driver).
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, 0));
    CUresult (*set_attr)(CUmemoryPool, CUmemPool_attribute, void *) = NULL;
    CUresult (*trim)(CUmemoryPool, size_t) = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuMemPoolSetAttribute", (void **)&set_attr, 12000,
                                        cudaEnableDefault, &q));
    CK(cudaGetDriverEntryPointByVersion("cuMemPoolTrimTo", (void **)&trim, 12000, cudaEnableDefault,
                                        &q));
    cuuint64_t threshold = UINT64_MAX;
    CK(set_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    printf("expect pool op=attr pool=0 attr=release_threshold value=18446744073709551615\n");
    int no = 0;
    CK(set_attr(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &no));
    printf("expect pool op=attr pool=0 attr=reuse_allow_opportunistic value=0\n");
    CK(trim(pool, 1 << 20));
    printf("expect pool op=trim pool=0 keep=1048576\n");

    // The control calls, whatever the engine makes of them.
    aoshim_try_set_microbatch(1);
    printf("expect layer op=microbatch mb=1\n");
    aoshim_try_layer_begin(3);
    printf("expect layer op=begin layer=3 mb=1\n");
    aoshim_try_layer_end(3);
    printf("expect layer op=end layer=3 mb=1\n");
    aoshim_try_keep(a);
    printf("expect layer op=keep addr=0x%" PRIx64 "\n", P(a));
    aoshim_try_backward_begin(3);
    printf("expect layer op=backward_begin layer=3 mb=1\n");
    aoshim_try_backward_end(3);
    printf("expect layer op=backward_end layer=3 mb=1\n");
    aoshim_try_step_end();
    printf("expect layer op=step_end\n");

    CK(cudaStreamSynchronize(s));
    printf("expect sync what=stream s=2\n");
    CK(cudaFreeAsync(b, s));
    printf("expect free api=cudaFreeAsync addr=0x%" PRIx64 " s=2\n", P(b));
    CK(cudaFree(a));
    printf("expect free api=cudaFree addr=0x%" PRIx64 "\n", P(a));
    CK(cuMemFree(c));
    printf("expect free api=cuMemFree addr=0x%" PRIx64 "\n", P(c));
    CK(cudaDeviceSynchronize());
    printf("expect sync what=device\n");
    CK(cudaStreamDestroy(s2));
    printf("expect stream_destroy id=3\n");
    CK(cudaEventDestroy(e));
    // A new event (perhaps at the same handle) is a new number.
    CK(cudaEventCreate(&e));
    printf("declare event id=2 flags=0\n");
    CK(cudaEventRecord(e, s));
    printf("expect record ev=2 s=2\n");
    CK(cudaStreamSynchronize(s));
    printf("expect sync what=stream s=2\n");
    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(s));
    printf("expect stream_destroy id=2\n");
    printf("record_paths ok=1\n");
    return 0;
}
