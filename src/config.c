// SPDX-License-Identifier: MIT
// Parsing of every AOSHIM_* variable, in one place (see config.h's table).
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

ao_config_t ao_config;

// --- low-level parsers ----------------------------------------------------------
int ao_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0) return *out = false, 0;
    }
    return -1;
}

// Digits only: strtoull alone would accept " 12", "+12" and "-1" (as 2^64-1).
static int parse_digits(const char **sp, uint64_t *out)
{
    const char *s = *sp;
    if (!isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -1;
    *out = v;
    *sp = end;
    return 0;
}

int ao_parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    if (parse_digits(&s, &v) < 0) return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*s)) {
    case '\0':
    case 'B':
        break;
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        return -1;
    }
    // A unit letter, then optionally "iB" or "B" (both binary: 1KB = 1KiB =
    // 1024); or a lone "B" for bytes (4096B).
    if (toupper((unsigned char)*s) == 'B') {
        s++;
    } else if (*s) {
        s++;
        if (strcasecmp(s, "ib") == 0 || strcasecmp(s, "b") == 0) s += strlen(s);
    }
    if (*s) return -1;
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    *out = v << shift;
    return 0;
}

int ao_parse_uint(const char *s, unsigned max, unsigned *out)
{
    uint64_t v;
    if (parse_digits(&s, &v) < 0 || *s || v > max) return -1;
    *out = (unsigned)v;
    return 0;
}

// The one reader of "N%" (AOSHIM_OFFLOAD_LAYERS and AOSHIM_BUDGET). The
// digits go through ao_parse_uint, so no sign, blank or fraction; at most 7
// characters before the '%' (a leading-zero "0000050%" is 50, "00000050%" is
// refused), as both options always took them.
int ao_parse_percent(const char *s, unsigned *out)
{
    size_t len = strlen(s);
    if (len < 2 || s[len - 1] != '%') return 1; // another form: the caller's to parse
    char digits[8];
    if (len - 1 >= sizeof digits) return -1;
    memcpy(digits, s, len - 1);
    digits[len - 1] = '\0';
    return ao_parse_uint(digits, 100, out);
}

int ao_parse_layers(const char *s, ao_layerset_t *out)
{
    memset(out, 0, sizeof *out);
    if (strcasecmp(s, "all") == 0) return out->kind = AO_LAYERS_ALL, 0;
    if (strcasecmp(s, "none") == 0) return out->kind = AO_LAYERS_LIST, 0;
    if (strcasecmp(s, "auto") == 0) return out->kind = AO_LAYERS_AUTO, 0;
    int r = ao_parse_percent(s, &out->percent);
    if (r < 0) return -1;
    if (r == 0) return out->kind = AO_LAYERS_PERCENT, 0;
    if (strpbrk(s, ",-") == NULL) {
        if (ao_parse_uint(s, AO_MAX_LAYERS, &out->count) < 0) return -1;
        out->kind = AO_LAYERS_COUNT;
        return 0;
    }
    // A list of items "a" or "a-b", comma-separated, no empty items.
    out->kind = AO_LAYERS_LIST;
    for (;;) {
        uint64_t lo, hi;
        if (parse_digits(&s, &lo) < 0 || lo >= AO_MAX_LAYERS) return -1;
        hi = lo;
        if (*s == '-') {
            s++;
            if (parse_digits(&s, &hi) < 0 || hi >= AO_MAX_LAYERS || hi < lo) return -1;
        }
        for (uint64_t l = lo; l <= hi; l++)
            out->bits[l / 64] |= 1ull << (l % 64);
        if (*s == '\0') return 0;
        if (*s++ != ',') return -1;
    }
}

int ao_parse_share(const char *s, ao_share_t *out)
{
    memset(out, 0, sizeof *out);
    int r = ao_parse_percent(s, &out->percent);
    if (r < 0 || (r == 0 && out->percent == 0)) return -1; // a budget of nothing
    if (r == 0) return 0;
    if (ao_parse_size(s, &out->bytes) < 0 || out->bytes == 0) return -1;
    return 0;
}

// A Python attribute path as the Python side resolves it from the model:
// parts separated by dots, each an identifier (attribute) or a decimal
// integer (an index into a ModuleList or Sequential); the first is an
// identifier. The boolean spellings are words too: false/no/off mean off,
// and true/yes/on are refused rather than taken for attribute names (auto is
// the default; a user who wrote AOSHIM_TORCH=on meant that).
int ao_parse_torch(const char *s, const char **out)
{
    bool b;
    if (strcasecmp(s, "auto") == 0) return *out = "auto", 0;
    if (ao_parse_bool(s, &b) == 0) return b ? -1 : (*out = "0", 0);
    if (strlen(s) > 255) return -1;
    for (const char *p = s, *part = s;; p++) {
        if (*p == '.' || *p == '\0') {
            if (p == part) return -1; // an empty part: "a..b", ".a", "a."
            if (isdigit((unsigned char)*part)) {
                if (part == s) return -1; // the root's attribute is a name
                for (const char *q = part; q < p; q++)
                    if (!isdigit((unsigned char)*q)) return -1;
            } else {
                for (const char *q = part; q < p; q++)
                    if (!(isalnum((unsigned char)*q) || *q == '_')) return -1;
            }
            if (*p == '\0') break;
            part = p + 1;
        }
    }
    *out = s;
    return 0;
}

int ao_parse_schedule(const char *s, unsigned *out)
{
    if (strcasecmp(s, "aoshim") == 0) return *out = AO_SCHEDULE_AOSHIM, 0;
    if (strcasecmp(s, "te") == 0) return *out = AO_SCHEDULE_TE, 0;
    return -1;
}

int ao_parse_serve(const char *s, unsigned *out)
{
    if (strcasecmp(s, "auto") == 0) return *out = AO_SERVE_AUTO, 0;
    bool b;
    if (ao_parse_bool(s, &b) < 0) return -1;
    return *out = b ? AO_SERVE_ON : AO_SERVE_OFF, 0;
}

bool ao_layerset_has(const ao_layerset_t *s, unsigned layer, unsigned nlayers)
{
    if (layer >= AO_MAX_LAYERS) return false;
    switch (s->kind) {
    case AO_LAYERS_ALL:
    case AO_LAYERS_AUTO: // the engine asks its plan once it has one
        return true;     // the engine never offloads the last layer
    case AO_LAYERS_COUNT:
        return layer < s->count;
    case AO_LAYERS_PERCENT:
        // Until the layer count is known (the first step), every layer, as
        // 'all' does: offloading none would make the first step's peak the
        // run's peak, the peak without aoshim.
        return nlayers == 0 || layer < (nlayers * s->percent + 50) / 100;
    case AO_LAYERS_LIST:
        return (s->bits[layer / 64] >> (layer % 64)) & 1;
    }
    return false;
}

// --- the table ----------------------------------------------------------------
static int set_bool(void *f, const char *v)
{
    return ao_parse_bool(v, f);
}
static int set_size(void *f, const char *v)
{
    return ao_parse_size(v, f);
}
static int set_uint(void *f, const char *v)
{
    return ao_parse_uint(v, 64, f);
}
static int set_level(void *f, const char *v)
{
    return ao_parse_uint(v, 2, f);
}
static int set_layers(void *f, const char *v)
{
    return ao_parse_layers(v, f);
}
static int set_sched(void *f, const char *v)
{
    return ao_parse_schedule(v, f);
}
static int set_serve(void *f, const char *v)
{
    return ao_parse_serve(v, f);
}
static int set_torch(void *f, const char *v)
{
    return ao_parse_torch(v, f);
}
// Empty, as the default, is "not set": the engine works it out at start.
static int set_share(void *f, const char *v)
{
    return *v ? ao_parse_share(v, f) : (memset(f, 0, sizeof(ao_share_t)), 0);
}
// A path is kept as given (it points into the environment, which outlives
// the run). Empty means "no file", as it does for the built-in default: the
// README documents the default as empty, so AOSHIM_REPORT= (a wrapper
// script's unset value, say) must not stop the program.
static int set_path(void *f, const char *v)
{
    return *(const char **)f = *v ? v : NULL, 0;
}

#define AO_SET_DEFAULT_bool   set_bool
#define AO_SET_DEFAULT_size   set_size
#define AO_SET_DEFAULT_uint   set_uint
#define AO_SET_DEFAULT_level  set_level
#define AO_SET_DEFAULT_layers set_layers
#define AO_SET_DEFAULT_torch  set_torch
#define AO_SET_DEFAULT_sched  set_sched
#define AO_SET_DEFAULT_serve  set_serve
#define AO_SET_DEFAULT_path   set_path
#define AO_SET_DEFAULT_share  set_share

typedef struct ao_option_s {
    const char *name; // without the AOSHIM_ prefix
    size_t offset;
    int (*set)(void *field, const char *value);
    int (*set_default)(void *field, const char *value);
    const char *def, *accepted, *help;
} ao_option_t;

static const ao_option_t options[] = {
#define X(NAME, field, type, def, accepted, help)                                                  \
    {#NAME, offsetof(ao_config_t, field), set_##type, AO_SET_DEFAULT_##type, def, accepted, help},
    AO_OPTIONS(X)
#undef X
};
#define NOPTIONS (sizeof options / sizeof *options)

// The value as the user can read it back: one line whatever it holds (a
// newline or a terminal escape sequence in it is shown as \n, \x1b), and
// short enough that what is accepted still fits on the line.
static void error_line(char *err, size_t errlen, const char *name, const char *value,
                       const char *accepted)
{
    char shown[256];
    ao_escape(shown, sizeof shown, value, strlen(value), true);
    snprintf(err, errlen, "aoshim: error: AOSHIM_%s='%s': %s", name, shown, accepted);
}

// Edit distance, for "did you mean": option names are short.
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 64 || lb >= 64) return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static size_t find_option(const char *name)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (strcmp(options[i].name, name) == 0) return i;
    return NOPTIONS;
}

int ao_config_set(ao_config_t *cfg, const char *name, const char *value, char *err, size_t errlen)
{
    size_t i = find_option(name);
    if (i < NOPTIONS) {
        if (options[i].set((char *)cfg + options[i].offset, value) == 0) return 0;
        error_line(err, errlen, name, value, options[i].accepted);
        return -1;
    }
    size_t best = SIZE_MAX, bi = 0;
    for (i = 0; i < NOPTIONS; i++) {
        size_t d = distance(name, options[i].name);
        if (d < best) best = d, bi = i;
    }
    char shown[128];
    ao_escape(shown, sizeof shown, name, strlen(name), true);
    if (best <= 3)
        snprintf(err, errlen, "unknown variable AOSHIM_%s ignored; did you mean AOSHIM_%s?", shown,
                 options[bi].name);
    else
        snprintf(err, errlen, "unknown variable AOSHIM_%s ignored", shown);
    return 1;
}

int ao_config_load(ao_config_t *cfg, char *const *env, char *err, size_t errlen)
{
    extern char **environ;
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].set_default((char *)cfg + options[i].offset, options[i].def) != 0) {
            error_line(err, errlen, options[i].name, options[i].def, "bad built-in default");
            return -1;
        }
    // A variable can be in the environment twice (execve takes any list).
    // getenv returns the first occurrence, and everything else in aoshim that
    // shows a value reads it with getenv (AOSHIM_VERBOSE's listing, the
    // report's options): so the parser takes the first too, and says once
    // per variable that the later ones are ignored.
    unsigned char seen[NOPTIONS] = {0}; // 1: parsed, 2: a later one warned about
    char *const *list = env ? env : environ;
    for (char *const *e = list; e && *e; e++) {
        if (strncmp(*e, "AOSHIM_", 7) != 0) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[64];
        size_t n = (size_t)(eq - *e) - 7;
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, *e + 7, n);
        name[n] = '\0';
        size_t i = find_option(name);
        if (i < NOPTIONS && seen[i]) {
            if (seen[i] == 2) continue;
            seen[i] = 2;
            char var[80], first[256];
            int k = snprintf(var, sizeof var, "AOSHIM_%s=", name);
            const char *v = "";
            for (char *const *f = list; f < e; f++)
                if (strncmp(*f, var, (size_t)k) == 0) {
                    v = *f + k;
                    break;
                }
            var[k - 1] = '\0';
            ao_escape(first, sizeof first, v, strlen(v), true);
            ao_log(AO_LOG_WARN,
                   "%s is set more than once in the environment; the first value, "
                   "'%s', is used",
                   var, first);
            continue;
        }
        if (i < NOPTIONS) seen[i] = 1;
        int r = ao_config_set(cfg, name, eq + 1, err, errlen);
        if (r < 0) return -1;
        if (r > 0) ao_log(AO_LOG_WARN, "%s", err); // a typo must not pass silently
    }
    // TransformerEngine's schedule is made for its num_layers: a count.
    if (cfg->schedule == AO_SCHEDULE_TE && cfg->offload_layers.kind != AO_LAYERS_COUNT) {
        error_line(err, errlen, "SCHEDULE", "te",
                   "TransformerEngine's schedule needs AOSHIM_OFFLOAD_LAYERS=K, a count of first "
                   "layers (its num_layers)");
        return -1;
    }
    return 0;
}

// Values are shown as given: they all parsed, so the text is the effective
// value. getenv's is the one the parser took (the first, see above); a long
// one (a path) is cut with "..." by ao_log, never left without its newline.
void ao_config_print(int fd)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        char var[64];
        snprintf(var, sizeof var, "AOSHIM_%s", options[i].name);
        const char *set = getenv(var);
        ao_log_fd(fd, AO_LOG_INFO, "option %s=%s%s", var, set ? set : options[i].def,
                  set ? "" : " (default)");
    }
}

bool ao_config_describe(size_t i, const char **name, const char **def, const char **help)
{
    if (i >= NOPTIONS) return false;
    *name = options[i].name;
    *def = options[i].def;
    *help = options[i].help;
    return true;
}
