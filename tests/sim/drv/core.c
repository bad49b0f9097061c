// SPDX-License-Identifier: MIT
// Simulated driver core: global state and lock, configuration, devices,
// contexts, error names, statistics and the exit line.
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "internal.h"

// --- global state --------------------------------------------------------------------
sim_config_t sim_cfg;
sim_stats_t sim_st;
bool sim_initialized;
uint64_t sim_host_ns;

// One plain (non-recursive) lock: every exported entry point takes it exactly
// once and internal functions assume it held, so a recursive lock would only
// hide a double entry.
static pthread_mutex_t sim_mu = PTHREAD_MUTEX_INITIALIZER;

static char sim_last_race[1024];

void sim_lock(void)
{
    pthread_mutex_lock(&sim_mu);
}
void sim_unlock(void)
{
    pthread_mutex_unlock(&sim_mu);
}

// SIM_DEINIT_AT_EXIT: set by the exit handler cuInit registers. Atomic, not
// under the lock: exit() from one thread while another holds the lock must
// not hang in the handler.
static atomic_bool sim_torn_down;

CUresult sim_enter(void)
{
    sim_lock();
    if (!sim_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (atomic_load_explicit(&sim_torn_down, memory_order_relaxed)) {
        sim_st.deinit_refused++;
        return CUDA_ERROR_DEINITIALIZED;
    }
    sim_host_advance(sim_cfg.api_ns);
    return CUDA_SUCCESS;
}

void sim_leave(void)
{
    sim_unlock();
}

void sim_log(const char *fmt, ...)
{
    // Formatted into a stack buffer and written with one write(2) so lines
    // from several threads never interleave and nothing allocates.
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "simgpu: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2) len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len);
    (void)w;
}

void sim_set_last_race(const char *text)
{
    snprintf(sim_last_race, sizeof sim_last_race, "%s", text ? text : "");
}

// --- configuration ---------------------------------------------------------------------
// A bad SIM_* value stops the program before it runs, like a bad AOSHIM_*
// value: a test double that silently falls back to defaults would measure
// something other than what the test asked for.
void sim_cfg_die(const char *var, const char *val, const char *accepted)
{
    // Long enough for SIM_FAIL's list of calls; a longer line is cut, but
    // still ends with its newline (tests read exactly one line).
    char buf[4096];
    int n = snprintf(buf, sizeof buf - 1, "simgpu: error: %s='%s': %s", var, val, accepted);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
    _exit(2);
}

// zero: 0 is a size this variable may take (a context that holds nothing).
static uint64_t cfg_size(const char *var, uint64_t dflt, bool zero)
{
    const char *v = getenv(var);
    if (!v || !*v) return dflt;
    const char *accepted =
        "a size in bytes with optional K/M/G/T suffix (powers of 1024), optional iB";
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || errno || !(x > 0 || (zero && x == 0)) || !isfinite(x))
        sim_cfg_die(var, v, accepted);
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "ib") == 0 || strcmp(end, "B") == 0))
        end += strlen(end);
    else if (mul == 1 && strcmp(end, "B") == 0)
        end++;
    if (*end) sim_cfg_die(var, v, accepted);
    double bytes = x * mul;
    if ((bytes < 1 && !(zero && bytes == 0)) || bytes > 1.8e19) sim_cfg_die(var, v, accepted);
    return (uint64_t)bytes;
}

// A positive number; zero: 0 allowed too (a cost turned off).
static double cfg_double(const char *var, double dflt, bool zero)
{
    const char *v = getenv(var);
    if (!v || !*v) return dflt;
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !(x > 0 || (zero && x == 0)) || !isfinite(x))
        sim_cfg_die(var, v, zero ? "a number of at least 0" : "a positive number");
    return x;
}

static bool cfg_bool(const char *var)
{
    const char *v = getenv(var);
    if (!v || !*v) return false;
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) return true;
        if (strcasecmp(v, no[i]) == 0) return false;
    }
    sim_cfg_die(var, v, "1/0/true/false/yes/no/on/off");
}

// Figures: DESIGN.md "Facts that shape the design".
//  - Links: H100 PCIe Gen5 measured ~53 GB/s D2H and 35-50 GB/s H2D pinned;
//    we use 50/50 so that 1 GiB D2H takes 21.5 ms (GB = 1e9 bytes). A100
//    PCIe Gen4 ~25 GB/s measured both ways. Pageable copies stage through a
//    driver bounce buffer: about a third of pinned, and synchronous.
//  - VMM costs: measured on an NVIDIA H200 (driver 580.159.04, CUDA 13.0) by
//    tests/bench/bench_vmm.c on 2026-11-27 (gpu-check; the figures are in
//    tests/replay/data/h200-2026-11-27/gpt16/runs.json), one 256 MiB range
//    as 128 granule handles and as one handle: cuMemCreate 12.7 us a granule,
//    37 us for 256 MiB; cuMemMap 0.88 and 7.0 us; cuMemSetAccess 3762 us
//    over the 128 granule mappings and 79 us over the one; cuMemUnmap 2502
//    and 35 us; cuMemRelease 14.0 and 142 us. So set-access and unmap cost
//    per mapping the range covers (29.4 and 19.5 us a granule), not per
//    call: each is modelled as a cost per handle or mapping plus one per
//    MiB, fitted to the two sizes. cuMemAddressReserve 19 us (A100,
//    kvcached's benchmark; not measured here). Used for both profiles.
//  - Pinning: cudaHostAlloc ~0.4 s per GiB (RMM #2523).
//  - Launch ~2.5 us host cost; cuMemAlloc/cuMemFree ~10 us (commonly quoted
//    order of magnitude; not from a single benchmark: an assumption).
//  - Effective dense throughput: H100 ~600 TFLOP/s, A100 ~200 TFLOP/s (BF16
//    tensor cores at realistic utilisation: an assumption, override with
//    SIM_TFLOPS).
//  - Device-to-device copies: read + write of HBM; H100 3.35 TB/s HBM3 and
//    A100 2.0 TB/s HBM2e give ~1500 and ~800 GB/s of copy (assumption).
static void cfg_load(void)
{
    sim_config_t c;
    memset(&c, 0, sizeof c);
    const char *prof = getenv("SIM_PROFILE");
    if (!prof || !*prof || strcasecmp(prof, "h100") == 0) {
        c.profile_name = "h100";
        c.d2h_gbps = 50.0;
        c.h2d_gbps = 50.0;
        c.d2d_gbps = 1500.0;
        c.tflops = 600.0;
    } else if (strcasecmp(prof, "a100") == 0) {
        c.profile_name = "a100";
        c.d2h_gbps = 25.0;
        c.h2d_gbps = 25.0;
        c.d2d_gbps = 800.0;
        c.tflops = 200.0;
    } else {
        sim_cfg_die("SIM_PROFILE", prof, "h100 or a100");
    }
    c.capacity = cfg_size("SIM_CAPACITY", 80ull << 30, false);
    // A real context holds device memory of its own from its creation
    // (code, stacks, the driver's heaps): total less free was 0.70 GiB on
    // an H200 after PyTorch's first tensor, before the model. Not modelled
    // unless asked (every test's figures assume 0); the replay of a trace
    // recorded on a GPU sets it to what that GPU had in use before the model.
    c.context_bytes = cfg_size("SIM_CONTEXT_BYTES", 0, true);
    if (c.context_bytes > c.capacity) sim_cfg_die("SIM_CONTEXT_BYTES", getenv("SIM_CONTEXT_BYTES"), "at most SIM_CAPACITY");
    c.d2h_gbps = cfg_double("SIM_D2H_GBPS", c.d2h_gbps, false);
    c.h2d_gbps = cfg_double("SIM_H2D_GBPS", c.h2d_gbps, false);
    c.tflops = cfg_double("SIM_TFLOPS", c.tflops, false);
    double slow = c.d2h_gbps < c.h2d_gbps ? c.d2h_gbps : c.h2d_gbps;
    c.pageable_gbps = slow / 3.0;
    c.copy_latency_ns = 2000; // a few us per copy: DMA setup and completion
    c.nodata = cfg_bool("SIM_NODATA");
    c.quiet = cfg_bool("SIM_QUIET");
    c.race_fatal = cfg_bool("SIM_RACE_FATAL");
    c.trace_gaps = cfg_bool("SIM_TRACE_GAPS");
    c.deinit_at_exit = cfg_bool("SIM_DEINIT_AT_EXIT");
    c.api_ns = 100;
    c.launch_ns = 2500;
    c.mem_create = (sim_vmm_cost_t){12500, 96};  // per handle
    c.mem_map = (sim_vmm_cost_t){840, 24};       // per mapping
    c.set_access = (sim_vmm_cost_t){29000, 195}; // per mapping the range covers
    c.unmap = (sim_vmm_cost_t){19000, 63};       // per mapping the range covers
    c.release = (sim_vmm_cost_t){13000, 500};    // per handle
    // While copies to and from pinned host memory ran on both engines, an
    // H200's cuMemMap took 306 to 677 us a call whatever the mapping's size
    // (2 to 512 MiB; 1.2 idle), and cuMemSetAccess 363 to 798 us per mapping
    // of up to 128 MiB the range covered (29 to 33 idle), 155 for 512 MiB:
    // about the time the link takes for 32 MiB, as if each waited for the
    // copy under way to reach a boundary. Unmapping, making and releasing
    // cost 1.2 to 1.8x idle there, not modelled; under compute alone or a
    // busy launch path 0.9 to 1.4x idle (tests/bench/bench_vmm_load.c;
    // tests/replay/data/h200-2026-11-28/vmm/). Charged while a copy is on
    // the link, per call and per mapping covered: 600 us, near the higher of
    // the two runs (stricter).
    c.map_in_copy = (sim_vmm_cost_t){600000, 0};
    c.set_access_in_copy = (sim_vmm_cost_t){600000, 0};
    // SIM_VMM_COST scales those five (0: the host maps for free), so that a
    // measurement can say how much of a step's time is the host's mapping.
    double vmm = cfg_double("SIM_VMM_COST", 1.0, true);
    sim_vmm_cost_t *costs[] = {&c.mem_create, &c.mem_map,     &c.set_access,        &c.unmap,
                               &c.release,    &c.map_in_copy, &c.set_access_in_copy};
    for (unsigned i = 0; i < sizeof costs / sizeof *costs; i++) {
        costs[i]->ns = (uint64_t)((double)costs[i]->ns * vmm);
        costs[i]->ns_per_mib *= vmm;
    }
    // SIM_VMM_IN_COPY scales the two costs while a copy runs (0: none, as
    // before 2026-11-28), so that a measurement can say how much they are.
    double in_copy = cfg_double("SIM_VMM_IN_COPY", 1.0, true);
    c.map_in_copy.ns = (uint64_t)((double)c.map_in_copy.ns * in_copy);
    c.set_access_in_copy.ns = (uint64_t)((double)c.set_access_in_copy.ns * in_copy);
    c.reserve_ns = 19000;
    c.alloc_ns = 10000;
    c.free_ns = 10000;
    c.pin_ns_per_byte = 0.4e9 / (double)(1ull << 30);
    sim_cfg = c;
    sim_fail_load();
}

// --- exit line -----------------------------------------------------------------------------
static uint64_t elapsed_now(void)
{
    return sim_host_ns > sim_st.elapsed_ns ? sim_host_ns : sim_st.elapsed_ns;
}

// New keys go at the end: tests and scripts read the line by key, some by
// its first keys in order.
void sim_exit_line(void)
{
    if (!sim_initialized) return;
    if (!sim_cfg.quiet) {
        uint64_t handles, mappings, pinned;
        sim_mem_live(&handles, &mappings, &pinned);
        char deinit[48] = ""; // only when asked for: other lines end as they always did
        if (sim_cfg.deinit_at_exit)
            snprintf(deinit, sizeof deinit, " deinit_refused=%llu",
                     (unsigned long long)sim_st.deinit_refused);
        sim_log("peak_device_bytes=%llu current_device_bytes=%llu races=%llu faults=%llu "
                "elapsed_ns=%llu busy_compute_ns=%llu busy_d2h_ns=%llu busy_h2d_ns=%llu "
                "launches=%llu pin_calls=%llu mem_create=%llu address_reserve=%llu "
                "set_access=%llu live_handles=%llu live_mappings=%llu live_pinned_bytes=%llu "
                "pool_reserved_bytes=%llu peak_in_use_bytes=%llu peak_pool_unused_bytes=%llu "
                "map_calls=%llu vmm_host_ns=%llu%s",
                (unsigned long long)sim_mem_peak_bytes(),
                (unsigned long long)sim_mem_current_bytes(), (unsigned long long)sim_st.races,
                (unsigned long long)sim_st.faults, (unsigned long long)elapsed_now(),
                (unsigned long long)sim_st.busy_ns_compute, (unsigned long long)sim_st.busy_ns_d2h,
                (unsigned long long)sim_st.busy_ns_h2d, (unsigned long long)sim_st.launches,
                (unsigned long long)sim_st.pin_calls, (unsigned long long)sim_st.mem_create_calls,
                (unsigned long long)sim_st.address_reserve_calls,
                (unsigned long long)sim_st.set_access_calls, (unsigned long long)handles,
                (unsigned long long)mappings, (unsigned long long)pinned,
                (unsigned long long)sim_mem_pool_reserved_bytes(),
                (unsigned long long)sim_mem_peak_in_use_bytes(),
                (unsigned long long)sim_mem_peak_pool_unused_bytes(),
                (unsigned long long)sim_st.map_calls, (unsigned long long)sim_st.vmm_host_ns,
                deinit);
    }
    // After the exit line, and even with SIM_QUIET=1: a test that asked for
    // failures always learns which fired (SIM_QUIET silences the statistics,
    // not what the test itself asked for).
    sim_fail_report();
}

// A destructor rather than atexit so it also runs when the library is
// unloaded. It reads counters only (plain integers that are never freed) and
// takes the lock only if it is free: exit() from one thread while another
// holds it must not hang the process.
static pid_t sim_init_pid;

__attribute__((destructor)) static void sim_at_exit(void)
{
    // A forked child (a data-loader worker, say) never prints its parent's
    // line: tests read exactly one line per process that used the GPU.
    if (getpid() != sim_init_pid) return;
    bool locked = pthread_mutex_trylock(&sim_mu) == 0;
    sim_exit_line();
    if (locked) sim_unlock();
}

// --- teardown at exit ---------------------------------------------------------------------
// SIM_DEINIT_AT_EXIT=1: the driver tears itself down once the process starts
// to exit, as the real one does. Its handler is registered at the first
// cuInit, so it runs during exit() before the handlers registered earlier
// and before any library's destructor; from then on every call that needs
// an initialised driver answers CUDA_ERROR_DEINITIALIZED (the runtime maps
// it to cudaErrorCudartUnloading). On an H200 under PyTorch, aoshim's event
// queries at exit got exactly that. Calls valid before cuInit
// (cuDriverGetVersion, cuGetProcAddress, the error names) still answer. The exit line counts
// the refused calls (deinit_refused), so a test knows that something really
// called the driver after its teardown; what was still held then shows in
// its live_* counts, as the real driver reclaims it with the context.
static void sim_teardown(void)
{
    atomic_store(&sim_torn_down, true);
}

// --- init and version -------------------------------------------------------------------
SIM_EXPORT CUresult cuInit(unsigned int flags)
{
    sim_lock();
    if (flags != 0) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!sim_initialized) {
        cfg_load();
        sim_mem_init();
        sim_initialized = true;
        sim_init_pid = getpid();
        sim_st.capacity_bytes = sim_cfg.capacity;
        if (sim_cfg.deinit_at_exit) atexit(sim_teardown);
    }
    sim_host_advance(sim_cfg.api_ns);
    sim_unlock();
    return CUDA_SUCCESS;
}

// SIM_DRIVER_VERSION: the CUDA version this driver says it is, 13000 by
// default. A lower one stands in for an older driver (a CUDA 12 runtime is
// often run on a 12.x driver): cuDriverGetVersion reports it and
// cuGetProcAddress refuses any version above it. Read at first use, not at
// cuInit: both calls are valid before cuInit.
static int driver_version = 13000;
static pthread_once_t driver_version_once = PTHREAD_ONCE_INIT;

static void driver_version_load(void)
{
    const char *v = getenv("SIM_DRIVER_VERSION");
    if (!v || !*v) return;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < 12000 || n > 13000 || n % 10)
        sim_cfg_die("SIM_DRIVER_VERSION", v, "a CUDA version from 12000 to 13000, e.g. 12090");
    driver_version = (int)n;
}

int sim_driver_version(void)
{
    pthread_once(&driver_version_once, driver_version_load);
    return driver_version;
}

SIM_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    // Valid before cuInit, as in the real driver.
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = sim_driver_version();
    return CUDA_SUCCESS;
}

// --- errors --------------------------------------------------------------------------------
// Every code of cuda.h's CUresult enum. The texts of the codes a program is
// likely to print are the real driver's; the rare ones are their names in
// words (the real strings differ; nothing should parse them).
#define SIM_ERRORS(X)                                                                              \
    X(CUDA_SUCCESS, "no error")                                                                    \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                   \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                          \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                            \
    X(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled")                                           \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized")                             \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started")                             \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped")                             \
    X(CUDA_ERROR_STUB_LIBRARY, "stub library")                                                     \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "call requires newer driver")                         \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, "device unavailable")                                         \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                  \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                         \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED, "device not licensed")                                       \
    X(CUDA_ERROR_INVALID_IMAGE, "invalid image")                                                   \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                        \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                               \
    X(CUDA_ERROR_MAP_FAILED, "map failed")                                                         \
    X(CUDA_ERROR_UNMAP_FAILED, "unmap failed")                                                     \
    X(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped")                                               \
    X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                                        \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no binary for gpu")                                           \
    X(CUDA_ERROR_ALREADY_ACQUIRED, "already acquired")                                             \
    X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                                                \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "not mapped as array")                                       \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "not mapped as pointer")                                   \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, "ecc uncorrectable")                                           \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT, "unsupported limit")                                           \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use")                                 \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access unsupported")                               \
    X(CUDA_ERROR_INVALID_PTX, "invalid ptx")                                                       \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid graphics context")                             \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, "nvlink uncorrectable")                                     \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "jit compiler not found")                                 \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "unsupported ptx version")                               \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED, "jit compilation disabled")                             \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "unsupported exec affinity")                           \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "unsupported devside sync")                             \
    X(CUDA_ERROR_CONTAINED, "contained")                                                           \
    X(CUDA_ERROR_INVALID_SOURCE, "invalid source")                                                 \
    X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                                 \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found")                 \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object init failed")                           \
    X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")         \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                        \
    X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")          \
    X(CUDA_ERROR_LOSSY_QUERY, "lossy query")                                                       \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                              \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                                    \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")                      \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "launch out of resources")                               \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, "launch timeout")                                                 \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch incompatible texturing")                   \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access already enabled")                       \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access not enabled")                               \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active")                                 \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                                     \
    X(CUDA_ERROR_ASSERT, "assert")                                                                 \
    X(CUDA_ERROR_TOO_MANY_PEERS, "too many peers")                                                 \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                                                   \
      "part or all of the requested memory range is already mapped")                               \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,                                                       \
      "pointer does not correspond to a registered memory region")                                 \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")                                     \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "illegal instruction")                                       \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                                         \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, "invalid address space")                                   \
    X(CUDA_ERROR_INVALID_PC, "invalid pc")                                                         \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                      \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative launch too large")                     \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory leak")                                         \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                         \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                         \
    X(CUDA_ERROR_SYSTEM_NOT_READY, "system not ready")                                             \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system driver mismatch")                                 \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "compat not supported on device")                 \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED, "mps connection failed")                                   \
    X(CUDA_ERROR_MPS_RPC_FAILURE, "mps rpc failure")                                               \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY, "mps server not ready")                                     \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "mps max clients reached")                               \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "mps max connections reached")                       \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED, "mps client terminated")                                   \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED, "cdp not supported")                                           \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH, "cdp version mismatch")                                     \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")   \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,                                                       \
      "operation failed due to a previous error during capture")                                   \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "stream capture merge")                                     \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "stream capture unmatched")                             \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "stream capture unjoined")                               \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "stream capture isolation")                             \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "stream capture implicit")                               \
    X(CUDA_ERROR_CAPTURED_EVENT, "captured event")                                                 \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "stream capture wrong thread")                       \
    X(CUDA_ERROR_TIMEOUT, "timeout")                                                               \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "graph exec update failure")                           \
    X(CUDA_ERROR_EXTERNAL_DEVICE, "external device")                                               \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE, "invalid cluster size")                                     \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED, "function not loaded")                                       \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type")                                   \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration")                 \
    X(CUDA_ERROR_KEY_ROTATION, "key rotation")                                                     \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

static const struct {
    CUresult code;
    const char *name, *text;
} sim_errors[] = {
#define X(n, s) {n, #n, s},
    SIM_ERRORS(X)
#undef X
};

bool sim_error_by_name(const char *name, CUresult *out)
{
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (strcmp(sim_errors[i].name, name) == 0) {
            *out = sim_errors[i].code;
            return true;
        }
    return false;
}

const char *sim_error_name(CUresult e)
{
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (sim_errors[i].code == e) return sim_errors[i].name;
    return NULL;
}

// Valid before cuInit (real: they are pure table lookups); unknown codes give
// CUDA_ERROR_INVALID_VALUE and *p = NULL, as documented in cuda.h.
SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (sim_errors[i].code == error) {
            *pStr = sim_errors[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (sim_errors[i].code == error) {
            *pStr = sim_errors[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

// --- devices ---------------------------------------------------------------------------------

SIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!count) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    *count = 1;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!device) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (ordinal != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    *device = 0;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!name || len <= 0) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "simgpu %s (simulated)",
             strcmp(sim_cfg.profile_name, "a100") == 0 ? "A100" : "H100");
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!uuid) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    memcpy(uuid->bytes, "simgpu-device-00", 16);
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!bytes) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    *bytes = (size_t)sim_cfg.capacity;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!pciBusId || len <= 0) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    snprintf(pciBusId, (size_t)len, "0000:01:00.0");
    SIM_RET(CUDA_SUCCESS);
}

// H100 SXM5 figures (CUDA programming guide, compute capability 9.0 table);
// the a100 profile reports 8.0 and its SM count.
static bool device_attribute(CUdevice_attribute a, int *v)
{
    bool a100 = strcmp(sim_cfg.profile_name, "a100") == 0;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        *v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        *v = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        *v = 64;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        *v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        *v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        *v = 65535;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        *v = 49152;
        break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        *v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        *v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        *v = 2147483647;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
        *v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        *v = a100 ? 1410000 : 1980000;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        *v = 512;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *v = a100 ? 108 : 132;
        break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
        *v = CU_COMPUTEMODE_DEFAULT;
        break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
        *v = 512;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        *v = a100 ? 1593000 : 2619000;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        *v = 5120;
        break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        *v = a100 ? 40 << 20 : 50 << 20;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        *v = 2048;
        break;
    // Real H100 reports 3 (DESIGN.md): still one engine per direction.
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        *v = a100 ? 2 : 3;
        break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
        *v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *v = a100 ? 8 : 9;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        *v = a100 ? 167936 : 233472;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        *v = 65536;
        break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *v = a100 ? 166912 : 232448;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        *v = 32;
        break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        *v = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        *v = a100 ? 0 : 1;
        break;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
        *v = 0;
        break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
        *v = 0;
        break;
    default:
        // A valid attribute this double does not model reads 0 (feature
        // absent), the conservative answer; out-of-range ones are invalid.
        if ((int)a <= 0 || (int)a >= (int)CU_DEVICE_ATTRIBUTE_MAX) return false;
        *v = 0;
        break;
    }
    return true;
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!pi) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    if (!device_attribute(attrib, pi)) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    SIM_RET(CUDA_SUCCESS);
}

// --- contexts --------------------------------------------------------------------------------
// One device, one primary context. The current context is per host thread,
// as in CUDA; a small per-thread stack serves cuCtxPush/PopCurrent.
struct CUctx_st {
    uint32_t magic;
    int refcount;   // primary context retains
    unsigned flags; // cuDevicePrimaryCtxSetFlags
};
#define SIM_CTX_MAGIC 0x43545854u
static struct CUctx_st sim_primary = {SIM_CTX_MAGIC, 0, 0};

#define SIM_CTX_STACK 16
static __thread CUcontext tl_ctx[SIM_CTX_STACK];
static __thread int tl_depth; // tl_ctx[tl_depth-1] is current; 0: none

static CUcontext ctx_current(void)
{
    return tl_depth ? tl_ctx[tl_depth - 1] : NULL;
}

CUresult sim_ctx_check(void)
{
    CUcontext c = ctx_current();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    // Stricter than real CUDA in one corner: a primary context released to
    // zero retains is reset there (its memory freed); we keep the memory but
    // refuse work through the stale handle.
    if (c->refcount <= 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

static bool ctx_valid(CUcontext c)
{
    return c == &sim_primary;
}

CUcontext sim_primary_ctx(void)
{
    return &sim_primary;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!pctx) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    sim_primary.refcount++;
    *pctx = &sim_primary;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    // Releasing more than retained: the real driver answers
    // CUDA_ERROR_INVALID_CONTEXT (primary context not active).
    if (sim_primary.refcount <= 0) SIM_RET(CUDA_ERROR_INVALID_CONTEXT);
    sim_primary.refcount--;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!flags || !active) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    *flags = sim_primary.flags;
    *active = sim_primary.refcount > 0;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    // Scheduling flags (0..7 and their combinations with LMEM_RESIZE_TO_MAX);
    // anything else is an invalid value.
    if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS))
        SIM_RET(CUDA_ERROR_INVALID_VALUE);
    sim_primary.flags = flags;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (dev != 0) SIM_RET(CUDA_ERROR_INVALID_DEVICE);
    // Real: destroys all allocations of the context. Not modelled: the shim
    // never resets, and a simulator that frees memory here would hide the
    // caller's use-after-reset behind fresh allocations. Say so loudly.
    sim_log("warning: cuDevicePrimaryCtxReset is not modelled (memory kept)");
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!pctx) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    *pctx = ctx_current();
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (ctx && !ctx_valid(ctx)) SIM_RET(CUDA_ERROR_INVALID_CONTEXT);
    // Replaces the top of the stack; NULL unbinds (pops), as documented.
    if (!ctx) {
        if (tl_depth) tl_depth--;
    } else if (tl_depth) {
        tl_ctx[tl_depth - 1] = ctx;
    } else {
        tl_ctx[tl_depth++] = ctx;
    }
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!ctx || !ctx_valid(ctx)) SIM_RET(CUDA_ERROR_INVALID_CONTEXT);
    if (tl_depth == SIM_CTX_STACK)
        SIM_RET(CUDA_ERROR_INVALID_VALUE); // deeper than any sane program
    tl_ctx[tl_depth++] = ctx;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!tl_depth) SIM_RET(CUDA_ERROR_INVALID_CONTEXT);
    CUcontext c = tl_ctx[--tl_depth];
    if (pctx) *pctx = c;
    SIM_RET(CUDA_SUCCESS);
}

// CUDA 13's ABI of cuCtxGetDevice and cuCtxSynchronize (what
// cuGetProcAddress hands out at 13000) takes the context, NULL for the
// current one. A caller written for the older, argument-less ABI that asks
// at 13000 passes whatever its second argument register holds: anything but
// NULL or a live context is refused, as a real driver would.
static CUresult ctx_arg_check(CUcontext ctx)
{
    if (!ctx) return sim_ctx_check();
    if (!ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    return ctx->refcount > 0 ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!device) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    r = ctx_arg_check(ctx);
    if (r) SIM_RET(r);
    *device = 0;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

SIM_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!flags) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    r = sim_ctx_check();
    if (r) SIM_RET(r);
    *flags = sim_primary.flags;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!version) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (!ctx) ctx = ctx_current();
    if (!ctx || !ctx_valid(ctx)) SIM_RET(CUDA_ERROR_INVALID_CONTEXT);
    *version = 12010; // what current drivers report for a primary context
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    r = sim_ctx_check();
    if (r) SIM_RET(r);
    // Hopper and Ampere: 0 (least) to -5 (greatest).
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_FAIL_POINT(cuCtxSynchronize);
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    r = ctx_arg_check(ctx);
    if (r) SIM_RET(r);
    // Synchronising the device is a potentially unsafe call during capture.
    if ((r = sim_capture_unsafe_call())) SIM_RET(r);
    sim_device_sync();
    sim_mem_synced();
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

// --- memory info -----------------------------------------------------------------------------
SIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    r = sim_ctx_check();
    if (r) SIM_RET(r);
    if (!free_bytes || !total) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    uint64_t cur = sim_mem_current_bytes();
    *total = (size_t)sim_cfg.capacity;
    *free_bytes = (size_t)(cur < sim_cfg.capacity ? sim_cfg.capacity - cur : 0);
    SIM_RET(CUDA_SUCCESS);
}

// --- sim extensions: statistics --------------------------------------------------------------
SIM_EXPORT CUresult simGetStats(sim_stats_t *out)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!out) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    sim_st.capacity_bytes = sim_cfg.capacity;
    sim_st.peak_device_bytes = sim_mem_peak_bytes();
    sim_st.current_device_bytes = sim_mem_current_bytes();
    sim_st.host_ns = sim_host_ns;
    *out = sim_st;
    out->elapsed_ns = elapsed_now();
    sim_mem_live(&out->live_handles, &out->live_mappings, &out->live_pinned_bytes);
    out->pool_reserved_bytes = sim_mem_pool_reserved_bytes();
    out->peak_in_use_bytes = sim_mem_peak_in_use_bytes();
    out->peak_pool_unused_bytes = sim_mem_peak_pool_unused_bytes();
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult simResetStats(void)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    // Keep what describes the state (memory, clock), zero what counts events.
    uint64_t elapsed = sim_st.elapsed_ns;
    memset(&sim_st, 0, sizeof sim_st);
    sim_st.elapsed_ns = elapsed;
    sim_st.capacity_bytes = sim_cfg.capacity;
    sim_mem_reset_peak();
    sim_mem_reset_peak_in_use();
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult simResetPeak(void)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    sim_mem_reset_peak();
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult simHostWork(uint64_t ns)
{
    sim_lock();
    if (!sim_initialized) SIM_RET(CUDA_ERROR_NOT_INITIALIZED);
    sim_host_advance(ns);
    sim_st.program_host_ns += ns;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult simHostClock(uint64_t *host_ns, uint64_t *vmm_ns, uint64_t *wait_ns)
{
    sim_lock();
    if (!sim_initialized) SIM_RET(CUDA_ERROR_NOT_INITIALIZED);
    if (host_ns) *host_ns = sim_host_ns;
    if (vmm_ns) *vmm_ns = sim_st.vmm_host_ns;
    if (wait_ns) *wait_ns = sim_st.host_wait_ns;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult simLastRace(char *buf, size_t len)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!buf || !len) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    snprintf(buf, len, "%s", sim_last_race);
    SIM_RET(CUDA_SUCCESS);
}
