// SPDX-License-Identifier: MIT
// Simulated driver core: init, version, devices, attributes, contexts, error
// names, configuration errors and the cuGetProcAddress table.
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_test.h"
#include "simgpu.h"

// Not declared by cuda.h outside the driver's own build.
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
#undef cuGetProcAddress
typedef CUresult (*getproc_v1_t)(const char *, void **, int, cuuint64_t);
typedef CUresult (*getproc_v2_t)(const char *, void **, int, cuuint64_t,
                                 CUdriverProcAddressQueryResult *);

static CUcontext ctx;

static void setup_ctx(void)
{
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

// --- init, version, devices ----------------------------------------------------------
Test(core, before_init)
{
    int n = -1, v = 0;
    CUdevice d;
    cr_assert_eq(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    sim_stats_t st;
    cr_assert_eq(simGetStats(&st), CUDA_ERROR_NOT_INITIALIZED);
    // Valid before cuInit, as in the real driver.
    cr_assert_eq(cuDriverGetVersion(&v), CUDA_SUCCESS);
    cr_assert_eq(v, 13000);
    cr_assert_eq(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED,
                 "a failed cuInit must not initialize");
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(cuInit(0), CUDA_SUCCESS, "cuInit is idempotent");
    cr_assert_eq(cuDeviceGetCount(&n), CUDA_SUCCESS);
    cr_assert_eq(n, 1);
}

Test(core, devices_and_attributes)
{
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    CUdevice d = -1;
    cr_assert_eq(cuDeviceGet(&d, 0), CUDA_SUCCESS);
    cr_assert_eq(d, 0);
    cr_assert_eq(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
    cr_assert_eq(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    char name[64];
    cr_assert_eq(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
    cr_assert_str_eq(name, "simgpu H100 (simulated)");
    cr_assert_eq(cuDeviceGetName(name, sizeof name, 1), CUDA_ERROR_INVALID_DEVICE);
    size_t total = 0;
    cr_assert_eq(cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
    cr_assert_eq(total, 80ull << 30, "default capacity is 80 GiB");
    int v = -1;
    struct {
        CUdevice_attribute a;
        int want;
    } cases[] = {
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
        {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(cuDeviceGetAttribute(&v, cases[i].a, 0), CUDA_SUCCESS);
        cr_assert_eq(v, cases[i].want, "attribute %d: %d, want %d", cases[i].a, v, cases[i].want);
    }
    cr_assert_eq(cuDeviceGetAttribute(&v, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1),
                 CUDA_ERROR_INVALID_DEVICE);
}

static void a100_env(void)
{
    setenv("SIM_PROFILE", "a100", 1);
}
Test(core, a100_profile, .init = a100_env)
{
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    char name[64];
    int v;
    cr_assert_eq(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
    cr_assert_str_eq(name, "simgpu A100 (simulated)");
    cr_assert_eq(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
                 CUDA_SUCCESS);
    cr_assert_eq(v, 8);
}

// --- contexts ---------------------------------------------------------------------------
Test(core, contexts)
{
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    CUcontext c = (CUcontext)1;
    cr_assert_eq(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    cr_assert_null(c, "no context is current after cuInit");
    CUdevice d;
    cr_assert_eq(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
    size_t fr, tot;
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT);

    cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 1), CUDA_ERROR_INVALID_DEVICE);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    cr_assert_not_null(c);
    CUcontext c2;
    cr_assert_eq(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
    cr_assert_eq(c, c2, "one primary context per device");
    cr_assert_eq(cuCtxSetCurrent((CUcontext)&c2), CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
    cr_assert_eq(cuCtxGetCurrent(&c2), CUDA_SUCCESS);
    cr_assert_eq(c2, c);
    d = -1;
    cr_assert_eq(cuCtxGetDevice(&d), CUDA_SUCCESS);
    cr_assert_eq(d, 0);
    cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
    // CUDA 13's forms: NULL or a live context; a stray one (a caller of the
    // older ABI passes whatever its argument register holds) is refused.
    d = -1;
    cr_assert_eq(cuCtxGetDevice_v2(&d, NULL), CUDA_SUCCESS);
    cr_assert_eq(cuCtxGetDevice_v2(&d, c), CUDA_SUCCESS);
    cr_assert_eq(d, 0);
    cr_assert_eq(cuCtxGetDevice_v2(&d, (CUcontext)&d), CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cuCtxSynchronize_v2(NULL), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSynchronize_v2(c), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSynchronize_v2((CUcontext)&d), CUDA_ERROR_INVALID_CONTEXT);
    unsigned flags = 1;
    int active = 0;
    cr_assert_eq(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
    cr_assert_eq(active, 1);

    // Push / pop nest over the current context.
    cr_assert_eq(cuCtxPushCurrent(c), CUDA_SUCCESS);
    cr_assert_eq(cuCtxPopCurrent(&c2), CUDA_SUCCESS);
    cr_assert_eq(c2, c);
    cr_assert_eq(cuCtxGetCurrent(&c2), CUDA_SUCCESS);
    cr_assert_eq(c2, c);

    // Released twice (two retains): the stale current context is refused.
    cr_assert_eq(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSynchronize(), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    cr_assert_eq(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT,
                 "released more than retained");
    cr_assert_eq(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    cr_assert_eq(cuCtxGetCurrent(&c2), CUDA_SUCCESS);
    cr_assert_null(c2);
}

static void *ctx_thread(void *arg)
{
    (void)arg;
    // The current context is per thread: a new thread has none.
    CUcontext c = (CUcontext)1;
    cuCtxGetCurrent(&c);
    return c;
}

Test(core, context_is_per_thread)
{
    setup_ctx();
    pthread_t t;
    void *res = (void *)1;
    cr_assert_eq(pthread_create(&t, NULL, ctx_thread, NULL), 0);
    pthread_join(t, &res);
    cr_assert_null(res);
}

// --- errors ---------------------------------------------------------------------------------
Test(core, error_names)
{
    const char *s = NULL;
    // Table lookups work before cuInit.
    cr_assert_eq(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "CUDA_ERROR_OUT_OF_MEMORY");
    cr_assert_eq(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "out of memory");
    cr_assert_eq(cuGetErrorName(CUDA_SUCCESS, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "CUDA_SUCCESS");
    cr_assert_eq(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
    cr_assert_eq(cuGetErrorName(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
    cr_assert_eq(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "invalid argument");
    cr_assert_eq(cuGetErrorName(CUDA_ERROR_UNKNOWN, &s), CUDA_SUCCESS);
    cr_assert_str_eq(s, "CUDA_ERROR_UNKNOWN");
    s = "x";
    cr_assert_eq(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    cr_assert_null(s);
    s = "x";
    cr_assert_eq(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    cr_assert_null(s);
}

// --- configuration ------------------------------------------------------------------------
// A bad SIM_* value: one line on stderr, exit status 2 (checked from a child
// so the line itself can be read).
static void bad_capacity(void)
{
    setenv("SIM_CAPACITY", "12X", 1);
    cuInit(0);
}
static void bad_profile(void)
{
    setenv("SIM_PROFILE", "v100", 1);
    cuInit(0);
}
static void bad_bool(void)
{
    setenv("SIM_NODATA", "maybe", 1);
    cuInit(0);
}
static void bad_gbps(void)
{
    setenv("SIM_D2H_GBPS", "-3", 1);
    cuInit(0);
}

static void bad_driver_version(void)
{
    setenv("SIM_DRIVER_VERSION", "14000", 1);
    int v;
    cuDriverGetVersion(&v);
}

// An older driver (SIM_DRIVER_VERSION) says so and refuses lookups above its
// version, as the driver API reference says a real one does.
static void driver_12090_env(void)
{
    setenv("SIM_DRIVER_VERSION", "12090", 1);
}

Test(core, older_driver_version, .init = driver_12090_env)
{
    int v = 0;
    cr_assert_eq(cuDriverGetVersion(&v), CUDA_SUCCESS);
    cr_assert_eq(v, 12090);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    cr_assert_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuGetProcAddress_v2("cuCtxSynchronize", &fn, 12090, 0, &st), CUDA_SUCCESS);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuCtxSynchronize"));
}

Test(core, bad_config_exits_2)
{
    char buf[1024];
    cr_assert_eq(run_child_capture(bad_capacity, buf, sizeof buf), 2);
    cr_assert(strstr(buf, "simgpu: error: SIM_CAPACITY='12X'"), "got: %s", buf);
    cr_assert_eq(strchr(buf, '\n'), buf + strlen(buf) - 1, "one line: %s", buf);
    cr_assert_eq(run_child_capture(bad_profile, buf, sizeof buf), 2);
    cr_assert(strstr(buf, "SIM_PROFILE='v100'"), "got: %s", buf);
    cr_assert_eq(run_child_capture(bad_driver_version, buf, sizeof buf), 2);
    cr_assert(strstr(buf, "SIM_DRIVER_VERSION='14000'"), "got: %s", buf);
    cr_assert_eq(run_child_capture(bad_bool, buf, sizeof buf), 2);
    cr_assert(strstr(buf, "SIM_NODATA='maybe'"), "got: %s", buf);
    cr_assert_eq(run_child_capture(bad_gbps, buf, sizeof buf), 2);
    cr_assert(strstr(buf, "SIM_D2H_GBPS='-3'"), "got: %s", buf);
}

static void cap_env(void)
{
    setenv("SIM_CAPACITY", "1.5GiB", 1);
}
Test(core, capacity_suffixes, .init = cap_env)
{
    setup_ctx();
    size_t fr = 0, tot = 0;
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(tot, 3ull << 29);
    cr_assert_eq(fr, tot);
    CUdeviceptr p;
    cr_assert_eq(cuMemAlloc(&p, 1 << 20), CUDA_SUCCESS);
    cr_assert_eq(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
    cr_assert_eq(fr, tot - (1 << 20));
    sim_stats_t st;
    cr_assert_eq(simGetStats(&st), CUDA_SUCCESS);
    cr_assert_eq(st.capacity_bytes, 3ull << 29);
}

// The exit line: printed by sim_fault before _exit as by the destructor at
// normal exit (same function). Read from a child that faults.
// A pool's reserve at exit: the block is freed but its chunk is the pool's,
// and a touch of it faults naming both.
static void pool_fault_child(void)
{
    setenv("SIM_QUIET", "0", 1);
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUdeviceptr p, q;
    cuMemAllocAsync(&p, 3 << 20, NULL);
    cuMemFreeAsync(p, NULL);
    cuMemAlloc(&q, 4096);
    *(volatile char *)(uintptr_t)p = 1; // use after free
}

Test(core, exit_line_counts_the_pool_reserve)
{
    char buf[4096];
    cr_assert_eq(run_child_capture(pool_fault_child, buf, sizeof buf), SIM_EXIT_FAULT, "got: %s",
                 buf);
    cr_assert(strstr(buf, "no live allocation (free in the memory pool's reserve); last: "
                          "cuMemAllocAsync buffer"),
              "got: %s", buf);
    // 4 MiB of chunk and a page: the device's bytes, and cuMemGetInfo's.
    cr_assert(strstr(buf, "simgpu: peak_device_bytes=4198400 current_device_bytes=4198400 "),
              "got: %s", buf);
    cr_assert(strstr(buf, " live_pinned_bytes=0 pool_reserved_bytes=4194304 "
                          "peak_in_use_bytes=4198400 peak_pool_unused_bytes=4194304 "
                          "map_calls=0 vmm_host_ns=0\n"),
              "got: %s", buf);
}

static void fault_child(void)
{
    setenv("SIM_QUIET", "0", 1);
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUdeviceptr p;
    cuMemAlloc(&p, 8192);
    cuMemFree(p);
    *(volatile char *)(uintptr_t)p = 1; // use after free
}

Test(core, exit_line_and_fault_diagnostic)
{
    char buf[4096];
    cr_assert_eq(run_child_capture(fault_child, buf, sizeof buf), SIM_EXIT_FAULT, "got: %s", buf);
    cr_assert(strstr(buf, "simgpu: FAULT: host access kernel=- stream=host address=0x"), "got: %s",
              buf);
    cr_assert(strstr(buf, "cuMemAlloc buffer"), "got: %s", buf);
    cr_assert(strstr(buf, "freed (cuMemFree)"), "got: %s", buf);
    cr_assert(
        strstr(
            buf,
            "simgpu: peak_device_bytes=8192 current_device_bytes=0 races=0 faults=1 elapsed_ns="),
        "got: %s", buf);
    cr_assert(strstr(buf, " pin_calls=0 mem_create=0 address_reserve=0 set_access=0 "
                          "live_handles=0 live_mappings=0 live_pinned_bytes=0 "
                          "pool_reserved_bytes=0 peak_in_use_bytes=8192 "
                          "peak_pool_unused_bytes=0 map_calls=0 vmm_host_ns=0\n"),
              "got: %s", buf);
}

// --- cuGetProcAddress ----------------------------------------------------------------------
Test(proc, lookup_by_name_version_flags)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    // Valid before cuInit: the runtime resolves cuInit itself this way.
    cr_assert_eq(cuGetProcAddress_v2("cuInit", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
                 CUDA_SUCCESS);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
    cr_assert_eq(fn, (void *)cuInit);
    cr_assert_eq(((CUresult(*)(unsigned))fn)(0), CUDA_SUCCESS);
    CUcontext c;
    cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);

    // cuMemAlloc at 12.0 is the _v2 ABI: and it works.
    cr_assert_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &st), CUDA_SUCCESS);
    cr_assert_eq(fn, (void *)cuMemAlloc_v2);
    CUdeviceptr p = 0;
    cr_assert_eq(((CUresult(*)(CUdeviceptr *, size_t))fn)(&p, 4096), CUDA_SUCCESS);
    cr_assert_neq(p, 0);
    *(volatile int *)(uintptr_t)p = 7;
    cr_assert_eq(cuGetProcAddress_v2("cuMemFree", &fn, 13000, 0, &st), CUDA_SUCCESS);
    cr_assert_eq(((CUresult(*)(CUdeviceptr))fn)(p), CUDA_SUCCESS);

    // Unknown name: not found, pfn NULL.
    fn = (void *)1;
    cr_assert_eq(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    cr_assert_null(fn);
    // Prefix is not a match.
    cr_assert_eq(cuGetProcAddress_v2("cuMemAll", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);

    // The name exists only above the requested version.
    fn = (void *)1;
    cr_assert_eq(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    cr_assert_null(fn);
    // The 32-bit v1 ABI of cuMemAlloc is not provided: asking for 3.1 is
    // "version not sufficient", never the v2 ABI.
    cr_assert_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 3010, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

    // Bad arguments.
    cr_assert_eq(cuGetProcAddress_v2(NULL, &fn, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuGetProcAddress_v2("cuInit", NULL, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuGetProcAddress_v2("cuInit", &fn, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    // symbolStatus is optional.
    cr_assert_eq(cuGetProcAddress_v2("cuInit", &fn, 12000, 0, NULL), CUDA_SUCCESS);
}

Test(proc, per_thread_variants)
{
    void *fn;
    CUdriverProcAddressQueryResult st;
    cr_assert_eq(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000,
                                     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                 CUDA_SUCCESS);
    cr_assert_eq(fn, (void *)cuMemAllocAsync_ptsz);
    cr_assert_eq(
        cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st),
        CUDA_SUCCESS);
    cr_assert_eq(fn, (void *)cuMemAllocAsync);
    cr_assert_eq(
        cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
        CUDA_SUCCESS);
    cr_assert_eq(fn, (void *)cuMemAllocAsync);
    // No per-thread twin: the legacy entry point (documented fallback).
    cr_assert_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000,
                                     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                 CUDA_SUCCESS);
    cr_assert_eq(fn, (void *)cuMemAlloc_v2);

    // Names whose exported symbol differs from the base name: every one the
    // library exports must come back as exactly that symbol.
    struct {
        const char *name;
        int version;
        const char *legacy, *ptsz;
    } cases[] = {
        {"cuMemcpyHtoD", 12000, "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"},
        {"cuMemcpyDtoHAsync", 12000, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"},
        {"cuLaunchKernel", 12000, "cuLaunchKernel", "cuLaunchKernel_ptsz"},
        {"cuStreamBeginCapture", 12000, "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz"},
        {"cuStreamBeginCapture", 10000, "cuStreamBeginCapture", "cuStreamBeginCapture_ptsz"},
        {"cuEventElapsedTime", 13000, "cuEventElapsedTime_v2", NULL},
        {"cuEventElapsedTime", 12000, "cuEventElapsedTime", NULL},
        // CUDA 13 gave both a context argument; a CUDA 12 caller gets none.
        {"cuCtxSynchronize", 13000, "cuCtxSynchronize_v2", NULL},
        {"cuCtxSynchronize", 12090, "cuCtxSynchronize", NULL},
        {"cuCtxGetDevice", 13000, "cuCtxGetDevice_v2", NULL},
        {"cuCtxGetDevice", 12090, "cuCtxGetDevice", NULL},
        {"cuEventDestroy", 12000, "cuEventDestroy_v2", NULL},
        {"cuStreamDestroy", 12000, "cuStreamDestroy_v2", NULL},
        {"cuDevicePrimaryCtxRelease", 12000, "cuDevicePrimaryCtxRelease_v2", NULL},
        {"cuMemHostRegister", 12000, "cuMemHostRegister_v2", NULL},
        {"cuMemFreeAsync", 12000, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *want = dlsym(RTLD_DEFAULT, cases[i].legacy);
        cr_assert_not_null(want, "%s is not exported", cases[i].legacy);
        cr_assert_eq(cuGetProcAddress_v2(cases[i].name, &fn, cases[i].version,
                                         CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st),
                     CUDA_SUCCESS, "%s@%d", cases[i].name, cases[i].version);
        cr_assert_eq(fn, want, "%s@%d legacy", cases[i].name, cases[i].version);
        if (cases[i].ptsz) {
            void *wantp = dlsym(RTLD_DEFAULT, cases[i].ptsz);
            cr_assert_not_null(wantp, "%s is not exported", cases[i].ptsz);
            cr_assert_eq(cuGetProcAddress_v2(cases[i].name, &fn, cases[i].version,
                                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                         CUDA_SUCCESS);
            cr_assert_eq(fn, wantp, "%s@%d per-thread", cases[i].name, cases[i].version);
        }
    }
}

Test(proc, returns_itself_v1_and_v2)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    void *v1 = dlsym(RTLD_DEFAULT, "cuGetProcAddress");
    cr_assert_not_null(v1);
    cr_assert_neq(v1, (void *)cuGetProcAddress_v2);
    cr_assert_eq(cuGetProcAddress_v2("cuGetProcAddress", &fn, 11030, 0, &st), CUDA_SUCCESS);
    cr_assert_eq(fn, v1);
    cr_assert_eq(cuGetProcAddress_v2("cuGetProcAddress", &fn, 12000, 0, &st), CUDA_SUCCESS);
    cr_assert_eq(fn, (void *)cuGetProcAddress_v2);
    cr_assert_eq(cuGetProcAddress_v2("cuGetProcAddress", &fn, 11020, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    // The v1 entry point works with 4 arguments.
    void *init = NULL;
    cr_assert_eq(((getproc_v1_t)v1)("cuInit", &init, 11030, 0), CUDA_SUCCESS);
    cr_assert_eq(init, (void *)cuInit);
    cr_assert_eq(((getproc_v1_t)v1)("cuNoSuch", &init, 11030, 0), CUDA_ERROR_NOT_FOUND);
    cr_assert_null(init);
}

Test(proc, sim_extensions_and_coverage)
{
    void *fn;
    CUdriverProcAddressQueryResult st;
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(cuGetProcAddress_v2("simGetStats", &fn, 12000, 0, &st), CUDA_SUCCESS);
    sim_stats_t s;
    memset(&s, 0xff, sizeof s);
    cr_assert_eq(((CUresult(*)(sim_stats_t *))fn)(&s), CUDA_SUCCESS);
    cr_assert_eq(s.capacity_bytes, 80ull << 30);
    const char *ext[] = {"simKernelCreate", "simResetStats", "simLastRace"};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(cuGetProcAddress_v2(ext[i], &fn, 12000, 0, &st), CUDA_SUCCESS, "%s", ext[i]);
        cr_assert_eq(fn, dlsym(RTLD_DEFAULT, ext[i]));
    }
    char race[64] = "x";
    cr_assert_eq(cuGetProcAddress_v2("simLastRace", &fn, 12000, 0, &st), CUDA_SUCCESS);
    cr_assert_eq(((CUresult(*)(char *, size_t))fn)(race, sizeof race), CUDA_SUCCESS);
    cr_assert_str_eq(race, "", "no race yet");

    // What the runtime and the shim need from the driver, at CUDA 13.0.
    const char *need[] = {
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuDeviceGetName",
        "cuDeviceGetAttribute",
        "cuDeviceTotalMem",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuCtxGetDevice",
        "cuCtxSynchronize",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuMemGetInfo",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemAllocAsync",
        "cuMemFreeAsync",
        "cuMemHostAlloc",
        "cuMemFreeHost",
        "cuMemAllocHost",
        "cuMemHostRegister",
        "cuMemHostUnregister",
        "cuMemHostGetDevicePointer",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemSetAccess",
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemGetAllocationGranularity",
        "cuPointerGetAttribute",
        "cuPointerGetAttributes",
        "cuStreamCreate",
        "cuStreamDestroy",
        "cuStreamSynchronize",
        "cuStreamQuery",
        "cuStreamWaitEvent",
        "cuEventCreate",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuEventQuery",
        "cuEventDestroy",
        "cuEventElapsedTime",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuFuncGetParamInfo",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoDAsync",
        "cuMemcpyAsync",
        "cuMemsetD8",
        "cuMemsetD8Async",
        "cuMemsetD32Async",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuStreamIsCapturing",
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        fn = NULL;
        cr_expect_eq(cuGetProcAddress_v2(need[i], &fn, 13000, 0, &st), CUDA_SUCCESS, "%s not found",
                     need[i]);
        cr_expect_not_null(fn, "%s", need[i]);
    }
}

// --- exit line at a normal exit ------------------------------------------------------------
// The child closes every descriptor but stderr before exit(), so nothing of
// criterion's own plumbing inherited from the worker can be touched by its
// exit handlers; the library destructor then prints the line.
static void normal_exit_child(void)
{
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    setenv("SIM_QUIET", "0", 1);
    CUcontext c;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    CUdeviceptr a, b;
    cuMemAlloc(&a, 3 * 4096);
    cuMemAlloc(&b, 4096);
    cuMemFree(a);
    void *h;
    cuMemHostAlloc(&h, 4096, 0);
    exit(0);
}

static void quiet_exit_child(void)
{
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    setenv("SIM_QUIET", "1", 1);
    cuInit(0);
    exit(0);
}

Test(core, exit_line_at_normal_exit)
{
    char buf[4096];
    cr_assert_eq(run_child_capture(normal_exit_child, buf, sizeof buf), 0, "got: %s", buf);
    // (Sanitizer builds may add their own lines: look at ours only.)
    const char *line = strstr(buf, "simgpu: ");
    cr_assert_not_null(line, "got: %s", buf);
    cr_assert(strncmp(line,
                      "simgpu: peak_device_bytes=16384 current_device_bytes=4096 races=0 faults=0 "
                      "elapsed_ns=",
                      86) == 0,
              "got: %s", buf);
    // The host allocation is still held at exit: a pinned leak of one page.
    cr_assert(strstr(line, " launches=0 pin_calls=1 mem_create=0 address_reserve=0 set_access=0 "
                           "live_handles=0 live_mappings=0 live_pinned_bytes=4096 "
                           "pool_reserved_bytes=0 peak_in_use_bytes=16384 "
                           "peak_pool_unused_bytes=0 map_calls=0 vmm_host_ns=0\n"),
              "got: %s", buf);
    cr_assert_null(strstr(line + 1, "simgpu: "), "one line: %s", buf);
    cr_assert_eq(run_child_capture(quiet_exit_child, buf, sizeof buf), 0);
    cr_assert_null(strstr(buf, "simgpu: "), "SIM_QUIET=1 prints nothing: %s", buf);
}

// SIM_DEINIT_AT_EXIT: the driver's exit handler, registered at the first
// cuInit, runs before the handlers registered earlier (and before the
// destructors of libraries loaded earlier). A handler from before cuInit
// finds every call refused with CUDA_ERROR_DEINITIALIZED, save those valid
// before cuInit; one from after finds the driver up. Unset, the driver stays
// up to the end.
static void probe(const char *when)
{
    CUcontext c;
    int v;
    CUresult r = cuCtxGetCurrent(&c), rv = cuDriverGetVersion(&v);
    dprintf(2, "%s ctx=%d version=%d\n", when, (int)r, (int)rv);
}
static void registered_before_init(void)
{
    probe("before");
}
static void registered_after_init(void)
{
    probe("after");
}
static void deinit_child(bool deinit)
{
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    setenv("SIM_QUIET", "0", 1);
    if (deinit) setenv("SIM_DEINIT_AT_EXIT", "1", 1);
    atexit(registered_before_init);
    CUcontext c;
    cuInit(0);
    atexit(registered_after_init);
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    exit(0);
}
static void deinit_on(void)
{
    deinit_child(true);
}
static void deinit_off(void)
{
    deinit_child(false);
}

Test(core, deinit_at_exit)
{
    char buf[4096];
    cr_assert_eq(run_child_capture(deinit_on, buf, sizeof buf), 0, "got: %s", buf);
    const char *after = strstr(buf, "after ctx=0 version=0\n");
    const char *before = strstr(buf, "before ctx=4 version=0\n"); // CUDA_ERROR_DEINITIALIZED
    cr_assert(after && before && after < before, "got: %s", buf);
    cr_assert(strstr(buf, " deinit_refused=1\n"), "got: %s", buf);
    cr_assert_eq(run_child_capture(deinit_off, buf, sizeof buf), 0, "got: %s", buf);
    cr_assert(strstr(buf, "after ctx=0 version=0\n"), "got: %s", buf);
    cr_assert(strstr(buf, "before ctx=0 version=0\n"), "unset, the driver stays up: %s", buf);
    cr_assert_null(strstr(buf, "deinit_refused="), "the key only when asked for: %s", buf);
}

// --- profiles: link bandwidth -----------------------------------------------------------------
// 1 GiB device-to-host on a pinned buffer: 2^30 / 50e9 s = 21.47 ms on the
// h100 profile (GB = 1e9 bytes), within 1% with the copy latency.
static uint64_t d2h_1gib_ns(void)
{
    CUcontext c;
    cr_assert_eq(cuInit(0), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
    CUdeviceptr d;
    void *h;
    CUstream s;
    cr_assert_eq(cuMemAlloc(&d, 1ull << 30), CUDA_SUCCESS);
    cr_assert_eq(cuMemHostAlloc(&h, 1ull << 30, 0), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    sim_stats_t s0, s1;
    cr_assert_eq(simGetStats(&s0), CUDA_SUCCESS);
    cr_assert_eq(cuMemcpyDtoHAsync(h, d, 1ull << 30, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamSynchronize(s), CUDA_SUCCESS);
    cr_assert_eq(simGetStats(&s1), CUDA_SUCCESS);
    // The host waited exactly as long as the D2H engine was busy.
    uint64_t busy = s1.busy_ns_d2h - s0.busy_ns_d2h, waited = s1.host_ns - s0.host_ns;
    cr_assert(busy <= waited && waited - busy < 10000, "busy d2h %llu, host waited %llu",
              (unsigned long long)busy, (unsigned long long)waited);
    return waited;
}

static void nodata_env(void)
{
    setenv("SIM_NODATA", "1", 1);
}
Test(profile, h100_d2h_1gib_21_5ms, .init = nodata_env)
{
    double ns = (double)d2h_1gib_ns();
    cr_assert(ns > 21.5e6 * 0.99 && ns < 21.5e6 * 1.01, "1 GiB D2H took %.0f ns", ns);
}

static void a100_nodata_env(void)
{
    setenv("SIM_NODATA", "1", 1);
    setenv("SIM_PROFILE", "a100", 1);
}
Test(profile, a100_d2h_1gib_43ms, .init = a100_nodata_env)
{
    double ns = (double)d2h_1gib_ns();
    double want = (double)(1ull << 30) / 25.0; // 25 GB/s
    cr_assert(ns > want * 0.99 && ns < want * 1.01, "1 GiB D2H took %.0f ns, want %.0f", ns, want);
}

static void override_env(void)
{
    setenv("SIM_NODATA", "1", 1);
    setenv("SIM_D2H_GBPS", "100", 1);
}
Test(profile, d2h_override, .init = override_env)
{
    double ns = (double)d2h_1gib_ns();
    double want = (double)(1ull << 30) / 100.0;
    cr_assert(ns > want * 0.99 && ns < want * 1.01, "1 GiB D2H took %.0f ns, want %.0f", ns, want);
}

static void forked_child_of_gpu_process(void)
{
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    setenv("SIM_QUIET", "0", 1);
    cuInit(0);
    pid_t pid = fork();
    if (pid == 0) exit(0); // destructor runs in the grandchild: must stay silent
    waitpid(pid, NULL, 0);
    _exit(0); // the GPU process itself skips its line here
}

Test(core, forked_child_prints_no_exit_line)
{
    char buf[1024];
    cr_assert_eq(run_child_capture(forked_child_of_gpu_process, buf, sizeof buf), 0);
    cr_assert_null(strstr(buf, "simgpu: "), "got: %s", buf);
}
