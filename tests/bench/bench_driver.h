// SPDX-License-Identifier: MIT
// What bench_vmm.c and bench_vmm_load.c share: the driver opened at run
// time (dlopen, as libaoshim.so does: no link to libcuda), the calls both
// make, a check that ends the program on an error, and a clock. Each file
// defines BENCH_NAME (its messages' prefix) before including this.
#ifndef BENCH_DRIVER_H
#define BENCH_DRIVER_H
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FN(name, ...) static CUresult (*name)(__VA_ARGS__)
FN(p_cuInit, unsigned);
FN(p_cuDeviceGet, CUdevice *, int);
FN(p_cuDevicePrimaryCtxRetain, CUcontext *, CUdevice);
FN(p_cuCtxSetCurrent, CUcontext);
FN(p_cuMemAddressReserve, CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
FN(p_cuMemCreate, CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
   unsigned long long);
FN(p_cuMemRelease, CUmemGenericAllocationHandle);
FN(p_cuMemMap, CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
FN(p_cuMemUnmap, CUdeviceptr, size_t);
FN(p_cuMemSetAccess, CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
FN(p_cuStreamCreate, CUstream *, unsigned);
FN(p_cuStreamSynchronize, CUstream);

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, BENCH_NAME ": %s failed: CUDA error %d\n", #call, (int)r_);            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, BENCH_NAME ": the driver has no %s\n", name);
        exit(1);
    }
    return p;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

// Device memory on dev, as aoshim makes it, and read-write access to it.
static CUmemAllocationProp bench_prop(CUdevice dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

static CUmemAccessDesc bench_rw(CUdevice dev)
{
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return acc;
}

// The driver with the shared calls loaded, its device 0 current in the
// primary context; exits with one line when there is none.
static void *bench_driver_open(CUdevice *dev, CUcontext *ctx)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, BENCH_NAME ": no driver (libcuda.so.1): %s\n", dlerror());
        exit(1);
    }
    *(void **)&p_cuInit = sym(lib, "cuInit");
    *(void **)&p_cuDeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&p_cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&p_cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    *(void **)&p_cuMemAddressReserve = sym(lib, "cuMemAddressReserve");
    *(void **)&p_cuMemCreate = sym(lib, "cuMemCreate");
    *(void **)&p_cuMemRelease = sym(lib, "cuMemRelease");
    *(void **)&p_cuMemMap = sym(lib, "cuMemMap");
    *(void **)&p_cuMemUnmap = sym(lib, "cuMemUnmap");
    *(void **)&p_cuMemSetAccess = sym(lib, "cuMemSetAccess");
    *(void **)&p_cuStreamCreate = sym(lib, "cuStreamCreate");
    *(void **)&p_cuStreamSynchronize = sym(lib, "cuStreamSynchronize");
    CHECK(p_cuInit(0));
    CHECK(p_cuDeviceGet(dev, 0));
    CHECK(p_cuDevicePrimaryCtxRetain(ctx, *dev));
    CHECK(p_cuCtxSetCurrent(*ctx));
    return lib;
}
#endif
