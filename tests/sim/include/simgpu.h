// SPDX-License-Identifier: MIT
// simgpu: the simulated GPU's own extensions to the CUDA API.
//
// Everything else the simulator offers has the real CUDA prototype from the
// toolkit headers. These few calls exist only because a simulated GPU cannot
// run device code: a kernel is a host function registered with its parameter
// layout, the ranges it reads and writes, and its cost; and tests read the
// simulator's own measurements through simGetStats, so nothing under test can
// grade itself.
//
// Driver level (libcuda.so.1): simKernelCreate, simGetStats, simReset... are
// exported and also reachable through cuGetProcAddress under the same names.
// Runtime level (libcudart.so.13): simrtRegisterKernel, simrtRegisterDeviceKernel,
// simrtGetStats.
//
// Configuration is read from the environment at cuInit:
//   SIM_CAPACITY   device memory, bytes with K/M/G/T suffix (default 80G)
//   SIM_PROFILE    h100 (default: PCIe Gen5) or a100 (PCIe Gen4)
//   SIM_NODATA     1: keep sizes and times, never run kernel bodies or copy data
//   SIM_QUIET      1: no exit line on stderr
//   SIM_RACE_FATAL 1: exit with SIM_EXIT_RACE at the first race
//   SIM_D2H_GBPS, SIM_H2D_GBPS, SIM_TFLOPS: override the profile's figures
//   SIM_FAIL       <call>:<n>[:<count>[:<error>]][,...]: the n-th call of that
//                  driver entry point (and count-1 more) fails with that CUDA
//                  error and does nothing else (tests/sim/README.md)
#ifndef SIMGPU_H
#define SIMGPU_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Exit status when a kernel, copy or memset touches device memory that is not
// mapped and accessible (never mapped, unmapped, freed, access not set).
#define SIM_EXIT_FAULT 86
// Exit status at the first race when SIM_RACE_FATAL=1.
#define SIM_EXIT_RACE 87

#define SIM_MAX_PARAMS 32
#define SIM_MAX_ACCESSES 16

enum sim_acc_mode { SIM_R = 1, SIM_W = 2, SIM_RW = 3 };

// One pointer parameter's footprint: it reads and/or writes
//   bytes = scale * (count_param >= 0 ? value of integer param count_param : 1)
// starting at the pointer's value. Integer params may be 4 or 8 bytes.
typedef struct sim_access_s {
    int param;
    int mode;        // enum sim_acc_mode
    int count_param; // -1: bytes = scale
    uint64_t scale;
} sim_access_t;

typedef struct sim_launch_s {
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    CUstream stream;
} sim_launch_t;

// args[i] points at parameter i's value, as in cuLaunchKernel's kernelParams.
typedef void (*sim_kernel_fn)(void **args, const sim_launch_t *launch);

typedef struct sim_kernel_desc_s {
    const char *name;                    // device-side name (cuFuncGetName)
    sim_kernel_fn fn;                    // host implementation (not run in no-data mode)
    int nparams;
    uint32_t param_size[SIM_MAX_PARAMS]; // offsets: natural alignment, min(size, 8)
    int naccess;
    sim_access_t access[SIM_MAX_ACCESSES];
    // Cost on the compute engine: ns_fixed + flops / (profile TFLOP/s), where
    // flops = flops_scale * (flops_param >= 0 ? value of that param : 1).
    uint64_t ns_fixed;
    int flops_param;
    double flops_scale;
} sim_kernel_desc_t;

typedef struct sim_stats_s {
    uint64_t capacity_bytes;
    uint64_t peak_device_bytes;    // physical device bytes: allocs, pool reserves, cuMemCreate
    uint64_t current_device_bytes;
    uint64_t races;
    uint64_t faults;
    uint64_t host_ns;              // virtual host clock now
    uint64_t elapsed_ns;           // max(host clock, last completion on any engine)
    uint64_t busy_ns_compute, busy_ns_d2h, busy_ns_h2d;
    uint64_t launches, copies;
    uint64_t pin_calls;            // cuMemHostAlloc + cuMemHostRegister (and runtime twins)
    uint64_t pinned_bytes;
    uint64_t mem_create_calls;     // cuMemCreate
    uint64_t address_reserve_calls;
    uint64_t set_access_calls;
    uint64_t map_calls, unmap_calls;
    uint64_t alloc_calls;          // cuMemAlloc + cuMemAllocAsync
    // Held now (what a leak check at exit reads; not reset by simResetStats):
    uint64_t live_handles;         // cuMemCreate handles with a release still owed
    uint64_t live_mappings;        // cuMemMap mappings not unmapped
    uint64_t live_pinned_bytes;    // cuMemHostAlloc/AllocHost not freed + cuMemHostRegister
                                   // not unregistered (page-rounded allocations)
    uint64_t injected;             // failures injected by SIM_FAIL (a counter)
    uint64_t deinit_refused;       // calls answered CUDA_ERROR_DEINITIALIZED after the
                                   // teardown at exit (SIM_DEINIT_AT_EXIT)
    // Memory as the driver counts it (new keys are only ever appended):
    uint64_t pool_reserved_bytes;  // held by memory pools now, used or not (state)
    uint64_t peak_in_use_bytes;    // high-water mark of cuMemGetInfo's total - free
                                   // (simResetStats resets it, simResetPeak does not)
    uint64_t peak_pool_unused_bytes; // the pools' reserved-but-unused bytes at the moment
                                     // peak_device_bytes was last raised (set back with
                                     // the peak: simResetPeak, simResetStats)
    uint64_t vmm_host_ns;            // host time spent in cuMemCreate, cuMemMap,
                                     // cuMemSetAccess, cuMemUnmap and cuMemRelease
    uint64_t host_wait_ns;           // host time blocked on the GPU (synchronisations)
    uint64_t program_host_ns;        // host time the program spent outside CUDA (simHostWork)
} sim_stats_t;

// --- driver level (libcuda.so.1) ---
CUresult simKernelCreate(const sim_kernel_desc_t *desc, CUfunction *out);
CUresult simGetStats(sim_stats_t *out);
// Zero the peak (to the current value) and the counters, keep the memory.
CUresult simResetStats(void);
// Zero only the peak (to the current value): a peak per phase of a run, the
// counters and the exit line's other figures untouched.
CUresult simResetPeak(void);
// The program's own host work between two CUDA calls (its interpreter, its
// framework): the host clock moves on by ns. A replay paces itself so from
// the host times a trace recorded (tests/replay). No cost of its own.
CUresult simHostWork(uint64_t ns);
// The host clock and two of its parts so far, read without the cost every
// other call charges (api_ns): the time in the five virtual-memory calls and
// the time blocked on the GPU. Any pointer may be NULL.
CUresult simHostClock(uint64_t *host_ns, uint64_t *vmm_ns, uint64_t *wait_ns);
// Write the last race's description (empty when none) into buf.
CUresult simLastRace(char *buf, size_t len);
// Failures SIM_FAIL injected since cuInit (never reset), in the order they
// happened: how many, and the i-th (0-based; the first 4096 are kept): the
// call as cuda.h names it without _v2 ("cuMemcpyHtoDAsync"), which call of
// it failed (1-based, as in SIM_FAIL) and the error it returned.
// CUDA_ERROR_INVALID_VALUE past the end.
CUresult simInjectedCount(uint64_t *count);
CUresult simInjectedGet(uint64_t i, const char **call, uint64_t *n, CUresult *error);

// --- runtime level (libcudart.so.13) ---
// Associates host symbol hostFun with a kernel, as __cudaRegisterFunction
// does for nvcc-built programs; cudaLaunchKernel(hostFun, ...) then runs it.
int simrtRegisterKernel(const void *hostFun, const sim_kernel_desc_t *desc);
// For programs built by nvcc (the fat binary's device code cannot run here):
// the host implementation of the kernel whose device (mangled) name is
// deviceName, e.g. "_Z1kPfi". Every host stub __cudaRegisterFunction
// registered under that name, before or after this call, launches it. It must
// be registered before the kernel's first <<<>>> launch (the stub caches its
// handle then); a launch with none is cudaErrorInvalidDeviceFunction.
// Registering the same name again replaces it for later launches.
int simrtRegisterDeviceKernel(const char *deviceName, const sim_kernel_desc_t *desc);
int simrtGetStats(sim_stats_t *out);
int simrtResetStats(void);
int simrtResetPeak(void);

#ifdef __cplusplus
}
#endif
#endif // SIMGPU_H
