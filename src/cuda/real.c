// SPDX-License-Identifier: MIT
#include "real.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "cuda/guard.h"
#include "log.h"

ao_real_t ao_real;
AO_TLS int ao_in_hook;
bool ao_cuda_touched;

// --- dlsym --------------------------------------------------------------------------------
// The real dlsym (aoshim interposes dlsym, see dlsym.c): resolved with
// dlvsym, which aoshim does not interpose.
//
// The hazard: a sanitizer runtime finds the functions it intercepts with
// dlsym(RTLD_NEXT, name) while it initialises, from its own constructor,
// before aoshim's and before its own interceptors and per-thread state are
// ready. That dlsym is aoshim's trampoline, which calls this function. So
// it must run nothing the sanitizer instruments (function entry, atomics:
// they would use the runtime's state before it exists) and call nothing it
// intercepts (dlopen, malloc, pthread_*: the real functions are not yet
// found). Hence no instrumentation, and dlvsym alone. The pointer is
// published with a release store, read with acquire loads (the trampoline's
// plain x86-64 load is one); the value is a function in libc, relocated
// before any constructor runs, so any thread that sees it may call it.
// Racing first calls store the same address.
#if __has_attribute(disable_sanitizer_instrumentation)
#define AO_NO_SANITIZE __attribute__((disable_sanitizer_instrumentation)) // clang: none at all
#else
#define AO_NO_SANITIZE __attribute__((no_sanitize_thread, no_sanitize_address)) // gcc: none
#endif
void *(*ao_real_dlsym)(void *, const char *);

AO_NO_SANITIZE void *ao_dlsym_init(void)
{
    void *p = (void *)__atomic_load_n(&ao_real_dlsym, __ATOMIC_ACQUIRE);
    if (p) return p;
    p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    // Not found (not glibc, or too early to tell): nothing stored, so the
    // next call asks again; the trampoline answers NULL meanwhile.
    if (p) __atomic_store_n(&ao_real_dlsym, (void *(*)(void *, const char *))p, __ATOMIC_RELEASE);
    return p;
}

void *ao_dlsym_real(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = (void *(*)(void *, const char *))ao_dlsym_init();
    return real ? real(handle, name) : NULL;
}

// --- runtime --------------------------------------------------------------------
// RTLD_NEXT finds the program's libcudart when it is in the global scope. A
// runtime loaded later with RTLD_LOCAL (a Python extension's dependency) is
// not, so fall back to asking the already-loaded library by its soname:
// CUDA 13's or CUDA 12's, whichever the process has (never both: a program
// mixing the two would have two runtimes).
static void *runtime_sym(const char *name)
{
    static const char *const sonames[] = {"libcudart.so.13", "libcudart.so.12"};
    void *p = dlsym(RTLD_NEXT, name);
    for (size_t i = 0; !p && i < sizeof sonames / sizeof *sonames; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) p = ao_dlsym_real(h, name);
    }
    return p;
}

void ao_real_runtime_init(void)
{
#define X(name, ret, params)                                                                       \
    if (!ao_real.name) __atomic_store_n(&ao_real.name, runtime_sym(#name), __ATOMIC_RELEASE);
    AO_REAL_RUNTIME(X)
#undef X
}

// Asked lazily, not at load: a runtime loaded after the shim is only seen
// then. 0 is not stored, so a later call asks again; racing first calls
// store the same value.
int ao_real_runtime_version(void)
{
    static int version;
    int v = __atomic_load_n(&version, __ATOMIC_ACQUIRE);
    if (v) return v;
    cudaError_t (*get)(int *) = __atomic_load_n(&ao_real.cudaRuntimeGetVersion, __ATOMIC_ACQUIRE);
    if (!get) {
        ao_real_runtime_init();
        get = __atomic_load_n(&ao_real.cudaRuntimeGetVersion, __ATOMIC_ACQUIRE);
    }
    if (!get || get(&v) != cudaSuccess || v <= 0) return 0;
    __atomic_store_n(&version, v, __ATOMIC_RELEASE);
    return v;
}

// --- driver -------------------------------------------------------------------------
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static bool driver_ok;

// Entry points an older driver may lack: without parameter info the launch
// scan is off (said once), and the schedule alone decides.
static bool optional(const char *sym)
{
    // And those only the step trace (AOSHIM_RECORD), the pool's reading
    // (offload/auto.c) or serving (offload/serve.c: without them nothing is
    // served) calls: the trace's wrappers are handed out only where
    // the driver has the real function; without the pool's, its unused
    // reserve is taken for 0.
    static const char *const names[] = {
        "cuFuncGetParamInfo",    "cuKernelGetParamInfo",   "cuFuncGetName",
        "cuKernelGetName",       "cuEventRecordWithFlags", "cuStreamCreateWithPriority",
        "cuMemPoolSetAttribute", "cuMemPoolTrimTo",        "cuDeviceGetDefaultMemPool",
        "cuMemPoolGetAttribute", "cuDeviceGetMemPool"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(sym, names[i]) == 0) return true;
    return false;
}

// The headers' version, or an older driver's own: a driver refuses a
// version above its own (CUDA_ERROR_INVALID_VALUE), as a 12.x driver under a
// CUDA 12 runtime would. Asked at that driver's version, each name gives the
// newest ABI the driver has, which for every entry here has the prototype
// aoshim calls. Set once, in driver_init.
static int ask_version = CUDA_VERSION;

// The version each driver entry point is asked for: ask_version, so the
// newest ABI of a name comes back, except where CUDA 13 gave the name a new
// ABI that aoshim does not call: those are asked for at the version the
// table gives (introduced). At 13000 cuCtxGetDevice is cuCtxGetDevice_v2
// (device, context): called with the device alone it would read a stray
// context.
static int abi_version(const char *sym, int introduced)
{
    return strcmp(sym, "cuCtxGetDevice") == 0 ? introduced : ask_version;
}

static void driver_init(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        ao_log(AO_LOG_WARN, "cannot load libcuda.so.1 (%s): offloading disabled", dlerror());
        return;
    }
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t,
                     CUdriverProcAddressQueryResult *))ao_dlsym_real(h, "cuGetProcAddress_v2");
    if (!gpa) {
        ao_log(AO_LOG_WARN, "libcuda.so.1 has no cuGetProcAddress_v2: offloading disabled");
        return;
    }
    CUresult (*driver_version)(int *) = (CUresult(*)(int *))ao_dlsym_real(h, "cuDriverGetVersion");
    int dv = 0;
    if (driver_version && driver_version(&dv) == CUDA_SUCCESS && dv > 0 && dv < ask_version)
        ask_version = dv;
    bool ok = true;
#define X(field, sym, ver, flags, ret, params)                                                     \
    {                                                                                              \
        void *p = NULL;                                                                            \
        CUdriverProcAddressQueryResult st;                                                         \
        if ((gpa(sym, &p, abi_version(sym, ver), flags, &st) != CUDA_SUCCESS || !p) &&             \
            !optional(sym)) {                                                                      \
            ao_log(AO_LOG_WARN, "driver entry point %s not found: offloading disabled", sym);      \
            ok = false;                                                                            \
        }                                                                                          \
        ao_real.field = (ret(*) params)p;                                                          \
    }
    AO_REAL_DRIVER(X)
#undef X
    // The v1 entry is an older version of the same name: ask by version.
    void *v1 = NULL;
    if (gpa("cuGetProcAddress", &v1, 11030, 0, NULL) == CUDA_SUCCESS && v1)
        ao_real.cuGetProcAddress_v1 = (CUresult(*)(const char *, void **, int, cuuint64_t))v1;
    void *gi = NULL;
    if (gpa("cuGraphInstantiate", &gi, 10000, 0, NULL) == CUDA_SUCCESS && gi)
        ao_real.cuGraphInstantiate_v1 = (__typeof__(ao_real.cuGraphInstantiate_v1))gi;
    gi = NULL;
    if (gpa("cuGraphInstantiate", &gi, 11000, 0, NULL) == CUDA_SUCCESS && gi)
        ao_real.cuGraphInstantiate_v2 = (__typeof__(ao_real.cuGraphInstantiate_v2))gi;
    void *sync = NULL;
    if (gpa("cuCtxSynchronize", &sync, 2000, 0, NULL) == CUDA_SUCCESS && sync)
        ao_real.cuCtxSynchronize = (CUresult(*)(void))sync;
    sync = NULL;
    if (ask_version >= 13000 && gpa("cuCtxSynchronize", &sync, 13000, 0, NULL) == CUDA_SUCCESS &&
        sync)
        ao_real.cuCtxSynchronize_v2 = (CUresult(*)(CUcontext))sync;
    driver_ok = ok;
}

bool ao_real_driver(void)
{
    pthread_once(&driver_once, driver_init);
    return driver_ok;
}
