// SPDX-License-Identifier: MIT
// Helpers for the end-to-end tests: run a program as a child, with or
// without libaoshim.so preloaded, on the simulated GPU, and read back what
// it, the simulator and aoshim printed.
#ifndef E2E_RUN_H
#define E2E_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct e2e_result_s {
    int status;      // exit status, or 128 + signal
    char *out, *err; // everything the child wrote (NUL-terminated, heap)
    // From the last "train_step status=..." line (zeros when absent).
    bool have_line;
    char ts_status[16], checksum[40];
    // peak: the device's count (the simulator's peak_device_bytes, a pool's
    // unused reserve included); alloc_peak: the program's own, the most it
    // had allocated at once (alloc_peak_bytes); pool_slack: the pool's
    // reserved-but-unused bytes when the device reached peak
    // (pool_slack_at_peak), so peak - pool_slack is what was allocated at the
    // device's peak, by the simulator's count.
    uint64_t peak, alloc_peak, act_per_layer, formula, static_bytes, temp_peak, step_ns, races;
    uint64_t pool_slack;
} e2e_result_t;

// Run argv[0] (a path) with argv. preload: LD_PRELOAD=$AO_TEST_SHIM. env:
// NULL-terminated "NAME=VALUE" list applied after the harness defaults
// (LD_LIBRARY_PATH=$SIM_DIR, SIM_QUIET=1, every other AOSHIM_*/SIM_*/PYTORCH_* removed
// so that the caller's environment cannot change a figure); "NAME" alone
// unsets NAME.
void e2e_run(e2e_result_t *r, bool preload, const char *const *env, const char *const *argv);
// The same, calling on_out(everything on stdout so far, arg) after each
// read of the child's stdout (to signal it at a point it announces).
void e2e_run_ex(e2e_result_t *r, bool preload, const char *const *env, const char *const *argv,
                void (*on_out)(const char *out, void *arg), void *arg);
// train_step with the given argument string (split on spaces).
void e2e_train(e2e_result_t *r, bool preload, const char *const *env, const char *args);
void e2e_free(e2e_result_t *r);

// A "key=value" number from the line of stderr that starts with prefix
// (e.g. "simgpu: "); false if absent.
bool e2e_kv(const char *text, const char *prefix, const char *key, uint64_t *out);
// The value of an aoshim summary row ("aoshim: <label>   <value>"): a pointer
// into text just past the label's padding, or NULL.
const char *e2e_summary(const char *text, const char *label);
// "12.5 MiB" (summary format) in bytes.
double e2e_bytes(const char *s);
// Path from the harness environment; the test fails if it is not set.
const char *e2e_path(const char *var);

// A fresh directory /tmp/aoshim-<name>.XXXXXX in dir; removed with its contents.
void e2e_make_dir(char *dir, size_t size, const char *name);
void e2e_remove_dir(const char *dir);
// A whole file (heap, NUL-terminated), NULL if it cannot be read.
char *e2e_slurp(const char *path);
// The number of the program's "check <name>=<n>" line; the test fails if absent.
long long e2e_check_of(const char *out, const char *name);
// Split args (modified) on spaces into argv from index n (at most max
// entries with the NULL); returns the new count.
int e2e_split(char *args, const char **argv, int n, int max);

#endif // E2E_RUN_H
