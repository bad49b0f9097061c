// SPDX-License-Identifier: MIT
// Every allocation entry point aoshim hooks tracks an allocation made inside
// a layer, and the memory it hands out holds the bytes written to it.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const paths[] = {
    "cudaMalloc",
    "cudaMallocAsync",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuGetProcAddress_v2:cuMemAlloc",
    "cuGetProcAddress_v2:cuMemAllocAsync",
    "cuGetProcAddress_v2:cuMemAllocAsync_ptsz",
    "cuGetProcAddress_v1:cuMemAlloc",
    "cudaGetDriverEntryPointByVersion:cuMemAlloc",
    "cudaGetDriverEntryPoint:cuMemAllocAsync",
};

// Run the program (with the shim preloaded or not); its stdout in out.
static void run(bool preload, char *out, size_t len)
{
    const char *prog = getenv("AO_TEST_ENTRY_POINTS"), *shim = getenv("AO_TEST_SHIM");
    cr_assert(prog && shim, "harness variables not set");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env %s%s AOSHIM_QUIET=1 SIM_QUIET=1 %s",
             preload ? "LD_PRELOAD=" : "", preload ? shim : "", prog);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d:\n%s", st, out);
}

Test(entry_points, every_path_is_tracked_with_the_shim)
{
    char out[8192], want[256];
    run(true, out, sizeof out);
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        snprintf(want, sizeof want, "path=%s rc=0 tracked=1 bytes_ok=1\n", paths[i]);
        cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    }
    cr_expect(strstr(out, "path=outside_layer rc=0 tracked=0 bytes_ok=1\n") != NULL, "%s", out);
}

// The runtime the program runs on (AO_TEST_CUDART: the meson variant's) and
// the ABI its version-less cudaGetDriverEntryPoint hands out through
// aoshim: CUDA 12 gets the context-less cuCtxSynchronize, CUDA 13 the _v2
// that takes one, and each works called that way.
Test(entry_points, driver_entry_point_has_the_runtimes_abi)
{
    const char *want_rt = getenv("AO_TEST_CUDART");
    cr_assert(want_rt, "AO_TEST_CUDART not set by the test harness");
    char out[8192], want[128];
    for (int preload = 1; preload >= 0; preload--) {
        run(preload, out, sizeof out);
        snprintf(want, sizeof want, "runtime=%s abi=%s rc=0\n", want_rt,
                 atoi(want_rt) >= 13000 ? "v2" : "v1");
        cr_expect(strstr(out, want) != NULL, "preload=%d: missing \"%s\" in:\n%s", preload, want,
                  out);
    }
}

Test(entry_points, nothing_is_tracked_without_the_shim)
{
    char out[8192], want[256];
    run(false, out, sizeof out);
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        snprintf(want, sizeof want, "path=%s rc=0 tracked=0 bytes_ok=1\n", paths[i]);
        cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    }
}

// The safety net on every launch and copy path: layer 0's buffer is
// offloaded, then read through the path; the bytes come back right and one
// late reload is counted for it.
static const char *const launch_paths[] = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernel:extra",
    "cuLaunchKernelEx",
    "cuGetProcAddress:cuLaunchKernel",
    "cudaGetDriverEntryPoint:cuLaunchKernel",
    "cudaMemcpyAsync",
    "cuMemcpyDtoH",
    "cudaMemcpy:DeviceToDevice",
    "static-runtime:dlsym:cuLaunchKernel",
    "static-runtime:cuGetProcAddress:cuLaunchKernel",
    "__cudaLaunchKernel",
    "ncclAllReduce",
};

static size_t slurp(const char *cmd, char *out, size_t len, int *status)
{
    FILE *f = popen(cmd, "r");
    cr_assert(f, "%s", cmd);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    *status = pclose(f);
    return n;
}

// Run the test program named by the variable prog_var under the shim, with
// the variables in settings (AOSHIM_QUIET=1 SIM_QUIET=1 added), bounded to
// 60 s when bounded, and its arguments args; its output in out, its status
// returned.
static int shimmed(const char *prog_var, const char *settings, bool bounded, const char *args,
                   char *out, size_t len)
{
    const char *prog = getenv(prog_var), *shim = getenv("AO_TEST_SHIM");
    cr_assert(prog && shim, "%s or AO_TEST_SHIM not set", prog_var);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env LD_PRELOAD=%s %s AOSHIM_QUIET=1 SIM_QUIET=1 %s%s %s", shim,
             settings, bounded ? "timeout 60 " : "", prog, args);
    int st;
    slurp(cmd, out, len, &st);
    return st;
}

// shimmed() with AOSHIM_REPORT set to a temporary file, bounded: the
// report's JSON into json (the file removed). Returns the wait status.
static int shimmed_report(const char *prog_var, const char *settings, const char *args, char *out,
                          size_t len, char *json, size_t jlen)
{
    char rep[] = "/tmp/aoshim-report-XXXXXX";
    int fd = mkstemp(rep);
    cr_assert(fd >= 0);
    close(fd);
    char all[512], cmd[128];
    snprintf(all, sizeof all, "%s AOSHIM_REPORT=%s", settings, rep);
    int st = shimmed(prog_var, all, true, args, out, len);
    snprintf(cmd, sizeof cmd, "cat %s", rep);
    int cst;
    slurp(cmd, json, jlen, &cst);
    unlink(rep);
    return st;
}

// A program run under the simulator's checks ended well: exit 0, not the
// simulator's fault (86) or race (87) exit; the test stops here otherwise.
static void exited_clean(int st, const char *out)
{
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault, 87: a race):\n%s",
              WIFEXITED(st) ? WEXITSTATUS(st) : st, out);
}

// The number after "key": in a report (its first occurrence); the test
// fails where there is none.
static unsigned long long report_u64(const char *json, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *k = strstr(json, quoted);
    cr_assert(k, "no %s in the report", key);
    return strtoull(k + strlen(quoted), NULL, 10);
}

Test(safety_net, every_launch_and_copy_path_reloads_first)
{
    char out[8192], want[256];
    // A single number is a count of first layers: 1 offloads layer 0.
    int st = shimmed("AO_TEST_LAUNCH_PATHS", "AOSHIM_OFFLOAD_LAYERS=1", false, "", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault):\n%s", st, out);
    for (size_t i = 0; i < sizeof launch_paths / sizeof *launch_paths; i++) {
        snprintf(want, sizeof want, "path=%s ok=1 late=1\n", launch_paths[i]);
        cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    }
}

// The same on the pitched (2D/3D), peer and 16-bit/2D set paths, each in its
// own process (copy_paths.c): the checksum of what the path produced equals
// the run without aoshim, one late reload is counted, the simulator saw no
// race and no fault, and aoshim's late-reload warning names the entry point
// expected to catch it: a runtime path missing its hook would be caught by
// the driver wrapper the runtime calls through, under a driver name.

Test(safety_net, every_pitched_and_peer_path_reloads_first, .timeout = 110)
{
    const char *prog = getenv("AO_TEST_COPY_PATHS"), *shim = getenv("AO_TEST_SHIM");
    cr_assert(prog && shim);
    static char plain[32768], labels[8192], out[16384];
    char cmd[2048], want[512];
    int st;
    snprintf(cmd, sizeof cmd, "env SIM_QUIET=1 %s", prog);
    slurp(cmd, plain, sizeof plain, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "without aoshim: exit %d:\n%s", st, plain);
    snprintf(cmd, sizeof cmd, "%s --list", prog);
    slurp(cmd, labels, sizeof labels, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int npaths = 0;
    for (char *l = strtok(labels, "\n"); l; l = strtok(NULL, "\n"), npaths++) {
        // Without aoshim: "path=<l> hook=<h> late=0 sum=<s>".
        snprintf(want, sizeof want, "path=%s hook=", l);
        const char *line = strstr(plain, want);
        cr_assert(line, "no line for %s without aoshim:\n%s", l, plain);
        char hook[128], sum[32];
        cr_assert_eq(sscanf(line + strlen(want), "%127s late=0 sum=%31s", hook, sum), 2, "%s",
                     line);
        snprintf(cmd, sizeof cmd,
                 "env LD_PRELOAD=%s AOSHIM_OFFLOAD_LAYERS=1 SIM_QUIET=0 %s '%s' 2>&1", shim, prog,
                 l);
        slurp(cmd, out, sizeof out, &st);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: exit %d (86: a fault):\n%s", l, st,
                  out);
        snprintf(want, sizeof want, "path=%s hook=%s late=1 sum=%s\n", l, hook, sum);
        cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
        snprintf(want, sizeof want, "late reload: %s touched layer 0", hook);
        cr_expect(strstr(out, want) != NULL, "%s: no \"%s\" in:\n%s", l, want, out);
        cr_expect(strstr(out, "races=0 faults=0") != NULL, "%s:\n%s", l, out);
    }
    cr_expect_geq(npaths, 78, "only %d paths listed", npaths);
}

// Rows a granule or more apart are scanned row by row (offload/scan.h): the
// second row of this copy lies in another layer's buffer than the first, and
// must be reloaded too (the simulator faults otherwise), with the bytes of a
// run without aoshim.
Test(safety_net, pitched_rows_in_two_layers_reload_both)
{
    const char *prog = getenv("AO_TEST_COPY_PATHS"), *shim = getenv("AO_TEST_SHIM");
    cr_assert(prog && shim);
    char cmd[2048], plain[1024], out[8192], sum[32], want[256];
    int st;
    snprintf(cmd, sizeof cmd, "env SIM_QUIET=1 %s --two-layers", prog);
    slurp(cmd, plain, sizeof plain, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "without aoshim: exit %d:\n%s", st, plain);
    cr_assert_eq(sscanf(plain, "path=two-layers hook=cuMemcpy2D_v2 late=0 sum=%31s", sum), 1, "%s",
                 plain);
    snprintf(cmd, sizeof cmd,
             "env LD_PRELOAD=%s AOSHIM_OFFLOAD_LAYERS=2 AOSHIM_QUIET=1 SIM_QUIET=0 %s --two-layers "
             "2>&1",
             shim, prog);
    slurp(cmd, out, sizeof out, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault):\n%s", st, out);
    snprintf(want, sizeof want, "path=two-layers hook=cuMemcpy2D_v2 late=2 sum=%s\n", sum);
    cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    cr_expect(strstr(out, "races=0 faults=0") != NULL, "%s", out);
}

// A captured graph over layer 0's buffer keeps it on the device (a replay
// cannot wait for a reload issued outside it) and replays right; the same
// kernel launched without a graph lets layer 0 be offloaded (and reloaded
// late): so it is the graph that keeps it.
static void graph_run(bool capture, char *out, size_t len)
{
    int st = shimmed("AO_TEST_GRAPH_PIN",
                     capture ? "AOSHIM_OFFLOAD_LAYERS=1"
                             : "AOSHIM_OFFLOAD_LAYERS=1 GRAPH_PIN_NO_CAPTURE=1",
                     false, "", out, len);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault):\n%s", st, out);
}

Test(safety_net, captured_graph_keeps_its_buffers)
{
    char out[1024];
    unsigned long long off = 1, kept = 0;
    int ok = 0;
    graph_run(true, out, sizeof out);
    cr_assert_eq(sscanf(out, "graph ok=%d offloaded=%llu kept=%llu", &ok, &off, &kept), 3, "%s",
                 out);
    cr_expect_eq(ok, 1, "replays read the wrong bytes");
    cr_expect_eq(off, 0, "a buffer a graph uses was offloaded");
    cr_expect_gt(kept, 0, "nothing counted as kept for a graph");
    graph_run(false, out, sizeof out);
    cr_assert_eq(sscanf(out, "graph ok=%d offloaded=%llu kept=%llu", &ok, &off, &kept), 3, "%s",
                 out);
    cr_expect_eq(ok, 1);
    cr_expect_gt(off, 0, "without the graph, layer 0 should have been offloaded");
}

// The pin lasts exactly while something can replay the captured work: the
// graph, a clone of it, or an executable graph instantiated from either
// (graph_pin.c --lifetimes, one step per case, through the runtime, the
// driver and cuGetProcAddress). Destroyed before layer 0's release point,
// all of them: layer 0 is offloaded there, all its bytes; any one alive: it
// is kept, and a replay after the release point reads the right bytes. A
// graph left from the step before, whose chunk was released and reused for
// this step's buffer, unpins nothing when destroyed.
Test(safety_net, graph_pin_lasts_until_graph_and_execs_are_destroyed)
{
    const char *prog = getenv("AO_TEST_GRAPH_PIN"), *shim = getenv("AO_TEST_SHIM");
    cr_assert(prog && shim);
    static const struct {
        const char *name;
        bool offloaded;
    } want[] = {
        {"both-alive", false}, {"exec-gone", false},      {"both-gone", true},
        {"graph-gone", false}, {"graph-then-exec", true}, {"clone-alive", false},
        {"clone-gone", true},  {"left-alive", false},     {"stale-pins", false},
    };
    char cmd[2048], out[16384], key[64];
    int st;
    snprintf(cmd, sizeof cmd,
             "env LD_PRELOAD=%s AOSHIM_OFFLOAD_LAYERS=1 AOSHIM_QUIET=1 SIM_QUIET=0 %s --lifetimes "
             "2>&1",
             shim, prog);
    slurp(cmd, out, sizeof out, &st);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault):\n%s", st, out);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        snprintf(key, sizeof key, "step=%s ", want[i].name);
        const char *line = strstr(out, key);
        cr_assert(line, "no step %s in:\n%s", want[i].name, out);
        int ok = 0;
        unsigned long long off = 1, kept = 0;
        cr_assert_eq(sscanf(line + strlen(key), "ok=%d offloaded=%llu kept=%llu", &ok, &off, &kept),
                     3, "%s", line);
        cr_expect_eq(ok, 1, "%s: wrong bytes", want[i].name);
        if (want[i].offloaded) {
            cr_expect_eq(off, (unsigned long long)(1u << 20) * sizeof(float),
                         "%s: nothing can replay the graph, layer 0 should have been offloaded",
                         want[i].name);
            cr_expect_eq(kept, 0, "%s", want[i].name);
        } else {
            cr_expect_eq(off, 0, "%s: offloaded while the graph can still replay", want[i].name);
            cr_expect_gt(kept, 0, "%s: not counted as kept for a graph", want[i].name);
        }
    }
    cr_expect(strstr(out, "lifetimes ok=1\n") != NULL, "%s", out);
    cr_expect(strstr(out, "races=0 faults=0") != NULL, "%s", out);
}

// libaoshim.so resolves CUDA at run time: no NEEDED entry for either library,
// and it exports only the entry points it interposes and the aoshim_ API.
Test(libaoshim, links_no_cuda_library_and_exports_only_its_api)
{
    const char *shim = getenv("AO_TEST_SHIM");
    cr_assert(shim);
    char cmd[1024], line[512];
    snprintf(cmd, sizeof cmd, "readelf -dW %s", shim);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    int needed = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "(NEEDED)")) continue;
        needed++;
        cr_expect(strstr(line, "libcuda") == NULL && strstr(line, "libcudart") == NULL, "%s", line);
    }
    cr_assert_eq(pclose(f), 0);
    cr_assert_gt(needed, 0, "readelf printed no NEEDED entries at all");
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s", shim);
    f = popen(cmd, "r");
    cr_assert(f);
    int exported = 0;
    while (fgets(line, sizeof line, f)) {
        char *name = strrchr(line, ' ');
        cr_assert(name);
        name++;
        exported++;
        // The control API; the CUDA runtime and driver entry points (cuda*,
        // __cuda*, cu*); NCCL's collectives; dlsym.
        cr_expect(strncmp(name, "aoshim_", 7) == 0 || strncmp(name, "cu", 2) == 0 ||
                      strncmp(name, "__cuda", 6) == 0 || strncmp(name, "nccl", 4) == 0 ||
                      strcmp(name, "dlsym\n") == 0,
                  "unexpected export %s", name);
        // One build serves libcudart.so.12 and .13, so it hooks no runtime
        // call whose prototype (or struct) differs between them: a hook
        // would call one ABI's function with the other's arguments. The
        // names (and their _ptsz, _v2, _v3 forms), from CUDA 12.9's and
        // 13.0's cuda_runtime_api.h compared.
        static const char *const differ[] = {
            "cudaGraphAddDependencies",
            "cudaGraphAddNode",
            "cudaGraphGetEdges",
            "cudaGraphKernelNodeCopyAttributes",
            "cudaGraphNodeGetDependencies",
            "cudaGraphNodeGetDependentNodes",
            "cudaGraphRemoveDependencies",
            "cudaMemAdvise",
            "cudaMemPrefetchAsync",
            "cudaMemcpy3DBatchAsync",
            "cudaMemcpyBatchAsync",
            "cudaSignalExternalSemaphoresAsync",
            "cudaWaitExternalSemaphoresAsync",
            "cudaStreamGetCaptureInfo",
            "cudaStreamUpdateCaptureDependencies",
            "cudaGetDeviceProperties",
            "cudaPointerGetAttributes",
        };
        for (size_t i = 0; i < sizeof differ / sizeof *differ; i++) {
            size_t n = strlen(differ[i]);
            cr_expect(!(strncmp(name, differ[i], n) == 0 && (name[n] == '\n' || name[n] == '_')),
                      "libaoshim.so hooks %s, whose ABI differs between CUDA 12 and 13", name);
        }
    }
    cr_assert_eq(pclose(f), 0);
    cr_assert_gt(exported, 20);
}

// Leftover words (leftover_words.c): a place in a kernel's parameters once
// seen pointing at freed memory is not read as a touch of an offloaded
// layer again; a real pointer to one still reloads it, with the right
// bytes; a real pointer at a learned place into a layer being reloaded
// still waits for the reload (no race: it raced when learned places were
// skipped in any state); a capture with such a word completes. AOSHIM_SKIP_LEFTOVERS=0
// reads every word as a pointer.
static void leftover_run(bool skip, char *out, size_t len)
{
    int st = shimmed("AO_TEST_LEFTOVER_WORDS",
                     skip ? "AOSHIM_OFFLOAD_LAYERS=1 AOSHIM_SKIP_LEFTOVERS=1"
                          : "AOSHIM_OFFLOAD_LAYERS=1 AOSHIM_SKIP_LEFTOVERS=0",
                     true, "", out, len);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault):\n%s", st, out);
}

Test(safety_net, leftover_words_are_learned_and_real_pointers_still_reload)
{
    char out[4096];
    leftover_run(true, out, sizeof out);
    static const char *const want[] = {
        "leftover step=0 late=1 ok=1\n", "stale step=0 late=0 ok=1\n",
        "pointer step=0 late=0 ok=1\n",  "leftover step=1 late=0 ok=1\n",
        "stale step=1 late=0 ok=1\n",    "pointer step=1 late=1 ok=1\n",
        "leftover step=2 late=0 ok=1\n", "pointer step=2 late=1 ok=1\n",
        "reloading races=0 ok=1\n",      "capture ok=1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(out, want[i]) != NULL, "missing \"%s\" in:\n%s", want[i], out);
}

Test(safety_net, every_word_is_a_pointer_with_skip_leftovers_off)
{
    char out[4096];
    leftover_run(false, out, sizeof out);
    for (int step = 0; step < 3; step++) {
        char want[64];
        snprintf(want, sizeof want, "leftover step=%d late=1 ok=1\n", step);
        cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    }
}

// Runs watched_write.c in a mode ("": through a leftover place; "wide":
// through a launch's 17th word into the chunk) and checks every step's
// bytes, with the simulator's race checker stopping the run (exit 87).
// Returns the buffers copied early and again (the report's d2h_buffers_again).
static unsigned long watched_write_run(const char *mode, int steps, unsigned long *early_off)
{
    char out[512], json[1 << 16];
    int st = shimmed_report("AO_TEST_WATCHED_WRITE", "AOSHIM_OFFLOAD_LAYERS=1 SIM_RACE_FATAL=1",
                            mode, out, sizeof out, json, sizeof json);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (87: a race, 1: wrong bytes):\n%s",
              st, out);
    const unsigned long again = report_u64(json, "d2h_buffers_again");
    for (int step = 0; step < steps; step++) {
        char want[32];
        snprintf(want, sizeof want, "step=%d ok=1\n", step);
        cr_expect(strstr(out, want) != NULL, "missing \"%s\" in:\n%s", want, out);
    }
    const unsigned long off = report_u64(json, "d2h_layers_early_off");
    if (early_off) *early_off = off;
    return again;
}

// A write after its layer's end through a learned leftover place, into a
// buffer copied out at the layer's end (early copies), is not lost: the
// place is read in a watched chunk, the buffer is copied again, the bytes
// are right in every step and nothing races. Before, steps 1-3 reloaded the
// bytes from before the write.
Test(safety_net, a_write_through_a_leftover_place_is_not_lost_to_an_early_copy)
{
    cr_expect_gt(watched_write_run("", 4, NULL), 0, "the write was not seen as one");
}

// A launch with more words into a watched chunk than the scan keeps per
// launch (AO_SCAN_WATCHED_WORDS) writes a buffer of it through the next
// word: the chunk's watch ends (every buffer taken as used), and the write
// is ordered after the early copy. Before, the chunk's waiver let the word
// by: the copy raced the write (exit 87).
Test(safety_net, a_write_past_the_watched_words_of_a_launch_is_not_lost)
{
    watched_write_run("wide", 4, NULL);
}

// Layer 1 writes one of layer 0's two buffers by turns (a, b, a, ...): a
// buffer once used after its layer's end is not copied early again, so
// only steps 1 and 2 (the first with early copies, and the first after it
// that wrote the other buffer) copy a buffer again. Learned one step at a
// time, each of steps 1-7 copied early the buffer the next layer was about
// to write (the H200 Llama's step: the next layer's first kernel waited
// 30 ms for that copy on the GPU, 3 steps in 5).
Test(safety_net, a_buffer_written_after_its_layer_once_is_not_copied_early_again)
{
    unsigned long again = watched_write_run("alternate", 8, NULL);
    cr_expect_eq(again, 2, "%lu buffers copied again in 8 steps", again);
}

// Layer 1 writes a different one of layer 0's four buffers each step: the
// uses a step learns are not the next step's. After the first watch that
// learnt nothing new, layer 0 is no longer copied early (the report's
// d2h_layers_early_off: 1), so only steps 1 and 2 copy a buffer again;
// learned one step at a time, steps 1 to 4 each did (the H200 Llama's
// steps 4 and 5: the next layer waited 30 ms on the GPU for such a copy).
// The bytes are right in every step, and nothing races.
Test(safety_net, a_layer_whose_later_uses_are_not_learnt_is_not_copied_early)
{
    unsigned long off = 0, again = watched_write_run("rotate", 8, &off);
    cr_expect_eq(again, 2, "%lu buffers copied again in 8 steps", again);
    cr_expect_eq(off, 1, "%lu layers no longer copied early", off);
}

// A buffer allocated while a freed buffer's chunk retires keeps its bytes
// (retire_tail.c): it is never placed in that chunk's free tail.
Test(safety_net, a_buffer_is_never_placed_in_a_retiring_chunk)
{
    char out[256];
    int st = shimmed("AO_TEST_RETIRE_TAIL", "AOSHIM_OFFLOAD_LAYERS=all AOSHIM_MIN_BYTES=4K", true,
                     "", out, sizeof out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d (86: a fault):\n%s", st, out);
    cr_expect_str_eq(out, "wrong=0\n");
}

// In the head (after the forward's last layer, before the backward), the
// program's allocation that idle memory covers but for 28 MiB borrows a
// kept page whose last use is still queued on its stream (head_borrow.c;
// offload/chunk.c, served_may_borrow and lend): its stream waits for that
// use on the GPU, the host does not. Without it the host waited for the
// queued copies, 10.9 ms of the simulator's clock, and the GPU's queue ran
// dry behind it. The bytes are the copies' and the new allocation's, and
// the simulator's race checker stops the run at an unordered access
// (SIM_RACE_FATAL=1: exit 87).
Test(safety_net, served_allocations_borrow_in_the_head)
{
    char out[512], json[1 << 16];
    int st = shimmed_report("AO_TEST_HEAD_BORROW",
                            "AOSHIM_SERVE=1 AOSHIM_OFFLOAD_LAYERS=all SIM_RACE_FATAL=1", "", out,
                            sizeof out, json, sizeof json);
    exited_clean(st, out);
    unsigned long us = 0;
    int ok = 0;
    cr_assert(sscanf(out, "host_wait_us=%lu ok=%d", &us, &ok) == 2, "%s", out);
    cr_expect_eq(ok, 1, "bytes: %s", out);
    cr_expect_lt(us, 1000, "the host waited %lu us for the kept page's last use", us);
    cr_expect_geq(report_u64(json, "lent_served_bytes"), 32ull << 20);
}

// A layer's buffer freed in the head, before the head's own allocation,
// is served as the program's own from the step after it was seen
// (short_lived.c; offload/alloc.c, LEARN_SHORT): its memory is the head's
// at its free, and a budget only that memory makes reachable is kept.
// Before, each layer's chunk held its 32 MiB until the layer's backward:
// 384 MiB in use after the head's allocation in every step, the budget
// 320 MiB not met. The bytes are right in every step (the short buffers at
// their free, the saved ones in the backward, layer 0's after its reload),
// and the simulator's race checker stops the run at an unordered access.
Test(e2e, a_buffer_freed_before_its_layers_backward_is_served)
{
    char out[512], json[1 << 16];
    int st =
        shimmed_report("AO_TEST_SHORT_LIVED", "AOSHIM_SERVE=1 AOSHIM_BUDGET=320M SIM_RACE_FATAL=1",
                       "", out, sizeof out, json, sizeof json);
    exited_clean(st, out);
    unsigned mib[4];
    int ok[4];
    // (After any warning: a read of a short buffer in the measuring step's
    // head may reload its layer.)
    const char *steps = strstr(out, "step=0 ");
    cr_assert(steps, "%s", out);
    cr_assert(sscanf(steps,
                     "step=0 head_in_use_mib=%u ok=%d step=1 head_in_use_mib=%u ok=%d "
                     "step=2 head_in_use_mib=%u ok=%d step=3 head_in_use_mib=%u ok=%d",
                     &mib[0], &ok[0], &mib[1], &ok[1], &mib[2], &ok[2], &mib[3], &ok[3]) == 8,
              "%s", out);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(ok[i], 1, "step %d: wrong bytes:\n%s", i, out);
    cr_expect_leq(mib[3], 320, "the last step held %u MiB after the head's allocation:\n%s", mib[3],
                  out);
    // The head's allocation in every step, and at least three layers'
    // short buffers in each of steps 1-3.
    cr_expect_geq(report_u64(json, "served_allocs"), 4 + 3 * 3);
}

// The first optimizer step's allocations, where an optimizer makes the
// state it keeps for the run, end where they do, to the granule: a 42 MiB
// one's segment is a page and a last part of 10 MiB (optimizer_state.c;
// offload/serve.c, segment_size), not two pages with 22 MiB unused for the
// run. A later optimizer step's allocation of that size takes whole pages
// (a last part made and given back each step is a driver call each way).
// Before, the state held 22 MiB past its end. The state's bytes are right,
// and the race checker stops the run at an unordered access.
Test(e2e, the_first_optimizer_steps_segments_end_where_their_allocations_do)
{
    char out[256];
    int st = shimmed("AO_TEST_OPTIMIZER_STATE",
                     "AOSHIM_SERVE=1 AOSHIM_OFFLOAD_LAYERS=all SIM_RACE_FATAL=1", true, "", out,
                     sizeof out);
    exited_clean(st, out);
    cr_expect_str_eq(out, "state_past_mib=0 temp_past_mib=22 ok=1\n");
}

// A prefetch with a backward boundary to go leaves a layer's chunks under a
// page for that boundary (small_later.c; offload/engine.c, ao_reload): in
// the first step, where each buffer has a chunk of its own, layer 0's 4 MiB
// buffer is not mapped yet once layer 4's backward began, its 64 MiB one is,
// and both are once layer 3's began; from the second step, one chunk holds
// the layer's saved set and comes back whole. Before, the 4 MiB chunk was
// mapped at layer 4's boundary too. The bytes are right in every backward;
// the race checker stops the run at an unordered access, and a kernel that
// read an unmapped buffer would fault (86). The report counts one reload of
// the layer a step, with all its bytes, and none late.
Test(e2e, a_prefetch_leaves_chunks_under_a_page_for_the_next_boundary)
{
    char out[256], json[1 << 16];
    int st = shimmed_report("AO_TEST_SMALL_LATER",
                            "AOSHIM_OFFLOAD_LAYERS=1 AOSHIM_PREFETCH=3 SIM_RACE_FATAL=1", "", out,
                            sizeof out, json, sizeof json);
    exited_clean(st, out);
    cr_expect_str_eq(out, "step=0 big_at4=1 small_at4=0 small_at3=1 ok=1\n"
                          "step=1 big_at4=1 small_at4=1 small_at3=1 ok=1\n");
    cr_expect_eq(report_u64(json, "layer_reloads"), 2);
    cr_expect_eq(report_u64(json, "reloaded_bytes"), 2 * (64 + 4) * (1ull << 20));
    cr_expect_eq(report_u64(json, "late_reloads"), 0);
}

// The program's own allocations served from aoshim's memory (served_reuse.c,
// AOSHIM_SERVE=1): reused in stream order on their own stream (the same
// address, the copy before the free reads the bytes written before it),
// not reused across streams before the other stream's work, aoshim_keep
// on one is a no-op, a range of pages asked for again in halves is split
// in place (no mapping made), a large allocation goes in a live
// segment's free space, a kept range gives only the last pages a need
// takes, a segment whose last page would be mostly unused has a last part
// of its own size, and where no kept mapping's last uses are done the host
// waits for the oldest one's (14.5 ms of the simulator's clock for the
// newer, chosen by size); the simulator's race checker stops the run at the
// first unordered access (SIM_RACE_FATAL=1: exit 87). The report counts
// the mappings aoshim made as the simulator does.
Test(safety_net, served_allocations_are_reused_in_stream_order)
{
    char out[512], json[1 << 16];
    int st = shimmed_report("AO_TEST_SERVED_REUSE",
                            "AOSHIM_SERVE=1 AOSHIM_OFFLOAD_LAYERS=all SIM_RACE_FATAL=1", "", out,
                            sizeof out, json, sizeof json);
    exited_clean(st, out);
    static const char want[] = "same_addr=1 read_ok=1 cross_ok=1 shared=1 shared_read_ok=1 "
                               "keep=0 split=1 split_read_ok=1 packed=1 packed_read_ok=1 "
                               "tail=1 lastpart=1 oldest=1\n";
    const char *maps = strstr(out, "sim_map_calls=");
    cr_assert(maps, "no sim_map_calls line:\n%s", out);
    cr_expect(maps - out == (ptrdiff_t)strlen(want) && strncmp(out, want, strlen(want)) == 0, "%s",
              out);
    // Served indeed: the 23 allocations outside the layer (the pool
    // would pass every check above too).
    cr_expect_eq(report_u64(json, "served_allocs"), 23);
    unsigned long long made = report_u64(json, "vmm_mappings");
    cr_expect(made > 0 && made == strtoull(maps + strlen("sim_map_calls="), NULL, 10),
              "report %llu mappings, simulator: %s", made, maps);
}
