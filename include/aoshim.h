// SPDX-License-Identifier: MIT
// aoshim control API.
//
// A program tells aoshim where its layers begin and end; aoshim does the rest
// from inside the CUDA calls it interposes. Every function here returns 0 on
// success and a negative AOSHIM_E* code on misuse; none of them ever stops
// the program.
//
// Programs that want to run with or without the shim loaded call the
// aoshim_try_* wrappers below: they bind to the preloaded library when it is
// there and cost one NULL check when it is not.
#ifndef AOSHIM_H
#define AOSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOSHIM_VERSION_MAJOR 0
#define AOSHIM_VERSION_MINOR 2
#define AOSHIM_VERSION_PATCH 0

#if defined(__GNUC__)
#define AOSHIM_API __attribute__((visibility("default")))
#else
#define AOSHIM_API
#endif

// --- error codes -----------------------------------------------------------
enum {
    AOSHIM_OK = 0,
    AOSHIM_EINVAL = -1,     // bad argument (negative id, NULL pointer)
    AOSHIM_ESTATE = -2,     // call out of order (end without begin, ...)
    AOSHIM_ENOTFOUND = -3,  // pointer not in any buffer aoshim knows
    AOSHIM_EDISABLED = -4,  // aoshim is loaded but AOSHIM_ENABLE=0
    AOSHIM_ENOTLOADED = -5, // returned by aoshim_try_* when the shim is absent
};

// --- statistics --------------------------------------------------------------
// Callers set .size = sizeof(aoshim_stats_t); fields past the library's own
// struct size are left zero, so old callers and new libraries agree.
typedef struct aoshim_stats_s {
    size_t size;
    uint64_t peak_device_bytes; // peak of device memory aoshim saw allocated
    uint64_t offloaded_bytes;   // bytes copied device -> host
    uint64_t reloaded_bytes;    // bytes copied host -> device
    uint64_t tracked_buffers;   // buffers ever tracked
    uint64_t kept_resident;     // candidates that stayed on the device
    uint64_t late_reloads;      // reloads forced by a launch, not the schedule
    uint64_t reload_wait_ns;    // time the compute stream waited on reloads
    uint64_t pinned_host_bytes; // pinned host pool size
} aoshim_stats_t;

// --- the control API (defined by libaoshim.so) --------------------------------
// Layer boundaries refer to the calling thread's current stream: the stream
// set by aoshim_set_stream() on this thread, else the last stream this thread
// launched work on, else the legacy default stream.
//
// No control call starts CUDA. In a process that has not used CUDA yet (a
// CPU-only run, or boundaries before the first cudaMalloc) the calls are
// checked and remembered as usual and return the same codes (0 for a correct
// sequence, not AOSHIM_EDISABLED: nothing is disabled, there is only nothing
// to move yet); the engine starts at the program's first CUDA allocation,
// also one inside a layer already begun. AOSHIM_EDISABLED means offloading is
// off for the whole process: AOSHIM_ENABLE=0, a forked child, an allocator
// configuration aoshim declines, or a GPU aoshim could not set up.
//
// AOSHIM_CONTROL_LOG=file records every boundary call below (not set_stream,
// keep), one line "<call> <layer> <microbatch>" each, before aoshim acts on
// it: also when offloading is off or there is no GPU.
AOSHIM_API int aoshim_layer_begin(int layer);
AOSHIM_API int aoshim_layer_end(int layer);
AOSHIM_API int aoshim_backward_begin(int layer);
AOSHIM_API int aoshim_backward_end(int layer);
AOSHIM_API int aoshim_step_end(void);
AOSHIM_API int aoshim_set_microbatch(int microbatch);
AOSHIM_API int aoshim_set_stream(void *cuda_stream);

// The manual schedule, for programs that schedule their own copies (a
// pipeline schedule, TransformerEngine's manual synchronization). In
// AOSHIM_SCHEDULE_AUTO (the default) every ended layer that the policy
// (AOSHIM_OFFLOAD_LAYERS; by default 'auto', the plan that keeps the step
// under AOSHIM_BUDGET, which for a step that fits is no layer at all)
// selects is copied out and brought back by aoshim.
// In AOSHIM_SCHEDULE_MANUAL nothing moves unless the program says so:
//   aoshim_offload_layer(L)  layer L (of the current microbatch, ended this
//                            step) is copied to host memory at its release
//                            point: once the next layer has ended, so that
//                            every read and write of L's outputs in the
//                            forward pass is enqueued (now, if that passed);
//                            its device memory goes when the copy is done.
//   aoshim_release_layer(L)  the program is done with L in this forward: the
//                            copy starts now if it has not, the host waits
//                            for it and the memory is released on return.
//   aoshim_reload_layer(L)   L comes back now, asynchronously; backward
//                            kernels wait for it on the GPU.
// Whatever the schedule, a kernel that touches an offloaded layer gets it
// back first (counted as a late reload), so no order of calls gives wrong
// data. A layer never named stays on the device. Set the schedule outside
// any open layer; it holds for the whole process.
enum { AOSHIM_SCHEDULE_AUTO = 0, AOSHIM_SCHEDULE_MANUAL = 1 };
AOSHIM_API int aoshim_set_schedule(int schedule);
AOSHIM_API int aoshim_offload_layer(int layer);
AOSHIM_API int aoshim_release_layer(int layer);
AOSHIM_API int aoshim_reload_layer(int layer);
AOSHIM_API int aoshim_keep(const void *device_ptr);
AOSHIM_API int aoshim_get_stats(aoshim_stats_t *out);
AOSHIM_API int aoshim_report_now(void);
AOSHIM_API const char *aoshim_version(void);
// Who marks the layers, in one line for the report (aoshim's Python side
// says which block list it found). Returns AOSHIM_EINVAL for NULL.
AOSHIM_API int aoshim_set_frontend(const char *text);
// The AOSHIM_* options this library parses, for tools (aoshim-run --help):
// option i as one line "AOSHIM_NAME\tdefault\taccepted values\thelp", NULL
// past the last. The strings are static.
AOSHIM_API const char *aoshim_option_info(int i);

// --- weak-call wrappers --------------------------------------------------------
// The declarations are weak so that a program built without libaoshim links,
// and binds at load time when LD_PRELOAD=libaoshim.so provides the symbols.
#if defined(__GNUC__) && !defined(AOSHIM_BUILDING_LIBRARY)
#pragma weak aoshim_layer_begin
#pragma weak aoshim_layer_end
#pragma weak aoshim_backward_begin
#pragma weak aoshim_backward_end
#pragma weak aoshim_step_end
#pragma weak aoshim_set_microbatch
#pragma weak aoshim_set_stream
#pragma weak aoshim_set_schedule
#pragma weak aoshim_offload_layer
#pragma weak aoshim_release_layer
#pragma weak aoshim_reload_layer
#pragma weak aoshim_keep
#pragma weak aoshim_get_stats
#pragma weak aoshim_report_now
#pragma weak aoshim_version
#pragma weak aoshim_set_frontend
#pragma weak aoshim_option_info

#define AOSHIM_TRY_(fn, ...) ((fn) ? fn(__VA_ARGS__) : AOSHIM_ENOTLOADED)
static inline int aoshim_try_layer_begin(int l)
{
    return AOSHIM_TRY_(aoshim_layer_begin, l);
}
static inline int aoshim_try_layer_end(int l)
{
    return AOSHIM_TRY_(aoshim_layer_end, l);
}
static inline int aoshim_try_backward_begin(int l)
{
    return AOSHIM_TRY_(aoshim_backward_begin, l);
}
static inline int aoshim_try_backward_end(int l)
{
    return AOSHIM_TRY_(aoshim_backward_end, l);
}
static inline int aoshim_try_step_end(void)
{
    return aoshim_step_end ? aoshim_step_end() : AOSHIM_ENOTLOADED;
}
static inline int aoshim_try_set_microbatch(int mb)
{
    return AOSHIM_TRY_(aoshim_set_microbatch, mb);
}
static inline int aoshim_try_set_stream(void *s)
{
    return AOSHIM_TRY_(aoshim_set_stream, s);
}
static inline int aoshim_try_set_schedule(int schedule)
{
    return AOSHIM_TRY_(aoshim_set_schedule, schedule);
}
static inline int aoshim_try_offload_layer(int l)
{
    return AOSHIM_TRY_(aoshim_offload_layer, l);
}
static inline int aoshim_try_release_layer(int l)
{
    return AOSHIM_TRY_(aoshim_release_layer, l);
}
static inline int aoshim_try_reload_layer(int l)
{
    return AOSHIM_TRY_(aoshim_reload_layer, l);
}
static inline int aoshim_try_keep(const void *p)
{
    return AOSHIM_TRY_(aoshim_keep, p);
}
static inline int aoshim_try_get_stats(aoshim_stats_t *o)
{
    return AOSHIM_TRY_(aoshim_get_stats, o);
}
static inline int aoshim_loaded(void)
{
    return aoshim_version != NULL;
}
#undef AOSHIM_TRY_
#endif

#ifdef __cplusplus
}
#endif
#endif // AOSHIM_H
