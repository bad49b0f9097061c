// SPDX-License-Identifier: MIT
// Every AOSHIM_* environment variable, defined once.
//
// AO_OPTIONS is the single table: it generates the config struct, the parser
// dispatch, the defaults, the verbose listing, the report's options and
// aoshim-run's --help (through aoshim_option_info, options.c), so they cannot
// drift apart. The README's option table is written by hand: the unit test
// config/readme_documents_every_option (tests/unit/test_config.c, given the
// README as AO_TEST_README) fails when a row "| `AOSHIM_X` | `default` |"
// is missing for an option of this table. It checks names and defaults only:
// a changed meaning or accepted value, or a removed option's row, must be
// carried to the README by hand.
#ifndef AO_CONFIG_H
#define AO_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AO_MAX_LAYERS 4096

// Which layers to offload: every layer but the last (ALL), the first N
// (COUNT), a fraction of the layers (PERCENT, resolved once the layer count is
// known), or an explicit set (LIST).
typedef enum ao_layers_kind_e {
    AO_LAYERS_ALL,
    AO_LAYERS_COUNT,
    AO_LAYERS_PERCENT,
    AO_LAYERS_LIST,
    AO_LAYERS_AUTO, // planned from a measured step (offload/plan.h); the first step as ALL
} ao_layers_kind_t;

// AOSHIM_SERVE: whether aoshim's memory serves the program's own
// stream-ordered allocations (offload/serve.c).
enum ao_serve { AO_SERVE_OFF, AO_SERVE_ON, AO_SERVE_AUTO };

// AOSHIM_SCHEDULE: whose timing the engine's copies follow (offload/sched.h).
enum ao_schedule { AO_SCHEDULE_AOSHIM, AO_SCHEDULE_TE };

// A size, or a percentage of something known later (AOSHIM_BUDGET: of the
// device's memory). Neither set: the default.
typedef struct ao_share_s {
    uint64_t bytes;
    unsigned percent; // 1..100, 0: bytes (or the default, when bytes is 0 too)
} ao_share_t;

typedef struct ao_layerset_s {
    ao_layers_kind_t kind;
    unsigned count;                    // COUNT
    unsigned percent;                  // PERCENT, 0..100
    uint64_t bits[AO_MAX_LAYERS / 64]; // LIST
} ao_layerset_t;

// X(NAME, field, type, default, accepted, help)
// type is one of: bool, size, uint, layers, path, level, torch, share, sched, serve
#define AO_OPTIONS(X)                                                                              \
    X(ENABLE, enable, bool, "1", "a boolean (1/0, true/false, yes/no, on/off)",                    \
      "0 makes aoshim a pure pass-through")                                                        \
    X(OFFLOAD_LAYERS, offload_layers, layers, "auto",                                              \
      "'all', 'auto', 'none', a count of first layers (12), a list with ranges (0-11,14) or a "    \
      "percentage (50%)",                                                                          \
      "forward layers whose activations go to host memory; 'auto' plans from the first step "      \
      "what AOSHIM_BUDGET needs (a step that fits offloads nothing); 'all' means every layer but " \
      "the last 2 + AOSHIM_PREFETCH, whose reload would start as soon as backward begins")         \
    X(BUDGET, budget, share, "",                                                                   \
      "a size such as 40G, or a percentage of the device's memory (90%)",                          \
      "the device memory AOSHIM_OFFLOAD_LAYERS=auto keeps under; empty: the device's free memory " \
      "at start less 5% of its total (at least 256 MiB)")                                          \
    X(PREFETCH, prefetch, uint, "1", "an integer from 0 to 64",                                    \
      "layers reloaded ahead: when backward of layer L begins, layers L-1 .. L-1-d come back")     \
    X(MIN_BYTES, min_bytes, size, "1MiB", "a size such as 4096, 512K, 1MiB, 2G",                   \
      "buffers smaller than this are never offloaded")                                             \
    X(HOST_LIMIT, host_limit, size, "0", "a size such as 64G (0: no limit)",                       \
      "cap on the pinned host memory pool")                                                        \
    X(SCHEDULE, schedule, sched, "aoshim", "'aoshim' or 'te'",                                     \
      "when copies start and end: aoshim's own timing, or TransformerEngine's default schedule "   \
      "for AOSHIM_OFFLOAD_LAYERS=K (its num_layers), as a baseline to compare with")               \
    X(VERBOSE, verbose, level, "0", "0, 1 or 2", "1: version and every effective option at start") \
    X(QUIET, quiet, bool, "0", "a boolean (1/0, true/false, yes/no, on/off)",                      \
      "1: no summary at exit")                                                                     \
    X(REPORT, report, path, "", "a file name (%p: pid, %r: rank, %h: host)",                       \
      "write the run's report as JSON to this file at exit (docs/report-schema.md)")               \
    X(TRACE, trace, path, "", "a file name (%p: pid, %r: rank, %h: host)",                         \
      "write a Chrome/Perfetto trace (copies, waits, memory counters) to this file at exit")       \
    X(REPORT_HTML, report_html, path, "", "a file name (%p: pid, %r: rank, %h: host)",             \
      "write a self-contained HTML page with the memory timeline to this file at exit")            \
    X(STACKS, stacks, bool, "1", "a boolean (1/0, true/false, yes/no, on/off)",                    \
      "0: do not capture call stacks of tracked allocations (the report's call sites)")            \
    X(CHECK, check, bool, "0", "a boolean (1/0, true/false, yes/no, on/off)",                      \
      "1: a freed tracked buffer is unmapped at once and its address never reused, so a "          \
      "use after free faults as it would without aoshim (each buffer its own 2 MiB mapping: "      \
      "for debugging, not for speed)")                                                             \
    X(SKIP_LEFTOVERS, skip_leftovers, bool, "1", "a boolean (1/0, true/false, yes/no, on/off)",    \
      "1: a place in a kernel's parameters once found holding the address of freed memory is "     \
      "the host stack's leftovers for that kernel, not a pointer it reads, and is not taken as a " \
      "touch of an offloaded layer again (PyTorch's elementwise kernels carry such words); 0: "    \
      "every word may be a pointer (a program whose own kernels may pass a real pointer there)")   \
    X(SERVE, serve, serve, "auto", "'auto' or a boolean (1/0, true/false, yes/no, on/off)",        \
      "while layers are offloaded, the program's own stream-ordered allocations (cudaMallocAsync " \
      "from the default pool: gradients, optimizer state, temporaries) come from aoshim's memory " \
      "too, one pool for both, as the program's pool alone would be without aoshim. 1: from the "  \
      "start; auto: from a forward's start where the program's pool keeps what it frees (its "     \
      "release threshold, as PyTorch sets it) or holds at least 64 MiB and 1% of the device's "    \
      "memory in use unused; 0: never, they go to the program's pool beside aoshim's")             \
    X(CONTROL_LOG, control_log, path, "", "a file name (%p: pid, %r: rank, %h: host)",             \
      "write one line per layer-boundary call, '<call> <layer> <microbatch>', to this file, "      \
      "also in a process without a GPU")                                                           \
    X(RECORD, record, path, "", "a file name (%p: pid, %r: rank, %h: host)",                       \
      "write a step trace (docs/trace-format.md) of what the program asked of CUDA to this file, " \
      "gzip-compressed, as the program runs; also with AOSHIM_ENABLE=0 (record only)")             \
    X(TORCH, torch, torch, "auto",                                                                 \
      "'auto', '0' (off; also false/no/off) or a dotted attribute path of identifiers and "        \
      "integers (model.layers, stages.1.blocks)",                                                  \
      "auto: find the model's repeated block list at the first forward; 0: off; a dotted path "    \
      "(model.layers): that module list")

typedef struct ao_config_s {
#define AO_FIELD_bool                             bool
#define AO_FIELD_size                             uint64_t
#define AO_FIELD_uint                             unsigned
#define AO_FIELD_level                            unsigned
#define AO_FIELD_path                             const char *
#define AO_FIELD_layers                           ao_layerset_t
#define AO_FIELD_share                            ao_share_t
#define AO_FIELD_sched                            unsigned // enum ao_schedule
#define AO_FIELD_serve                            unsigned // enum ao_serve
#define AO_FIELD_torch                            const char * // "auto", "0" or the path
#define X(NAME, field, type, def, accepted, help) AO_FIELD_##type field;
    AO_OPTIONS(X)
#undef X
} ao_config_t;

extern ao_config_t ao_config;

// Parse one value into *cfg. A bad value: err gets the one-line message
// "aoshim: error: AOSHIM_X='v': <accepted>", returns -1. An unknown name:
// err gets a warning (with the closest known name), returns 1.
int ao_config_set(ao_config_t *cfg, const char *name, const char *value, char *err, size_t errlen);
// Defaults, then every AOSHIM_* variable from env (NULL: the process
// environment). An unknown AOSHIM_ variable is warned about (a typo must not
// pass silently) and ignored. Returns 0, or -1 with err filled.
int ao_config_load(ao_config_t *cfg, char *const *env, char *err, size_t errlen);
// Whether layer (of nlayers, 0 if not yet known) is chosen by the set.
bool ao_layerset_has(const ao_layerset_t *s, unsigned layer, unsigned nlayers);
// Print every effective option (AOSHIM_VERBOSE) to fd.
void ao_config_print(int fd);
// The table, for documentation checks: option i's name (without AOSHIM_),
// default and help; false past the end.
bool ao_config_describe(size_t i, const char **name, const char **def, const char **help);

// Low-level parsers, exposed for tests.
int ao_parse_bool(const char *s, bool *out);
int ao_parse_size(const char *s, uint64_t *out);
int ao_parse_uint(const char *s, unsigned max, unsigned *out);
// "N%", N an integer from 0 to 100: 0 with *out = N; -1 for a value that ends
// in '%' but is no such percentage; 1, *out untouched, for one that does not
// end in '%' (or is "%" alone): some other form, for the caller to parse.
int ao_parse_percent(const char *s, unsigned *out);
int ao_parse_layers(const char *s, ao_layerset_t *out);
// A size (ao_parse_size) or a percentage from 1 to 100 ("90%").
int ao_parse_share(const char *s, ao_share_t *out);
// AOSHIM_TORCH: *out is "auto", "0" (any boolean false spelling) or s itself
// (a dotted path); -1 for anything else.
int ao_parse_torch(const char *s, const char **out);
// AOSHIM_SCHEDULE: "aoshim" or "te" (any case); -1 for anything else.
int ao_parse_schedule(const char *s, unsigned *out);
// AOSHIM_SERVE: "auto" or a boolean (ao_parse_bool); -1 for anything else.
int ao_parse_serve(const char *s, unsigned *out);

#endif // AO_CONFIG_H
