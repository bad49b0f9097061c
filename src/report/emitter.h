// SPDX-License-Identifier: MIT
// One emitter writes the text summary and the JSON report from the same
// calls (after jemalloc's emitter), so the two cannot disagree: a row is
// emitted once, with its JSON key and its text label, and the format decides
// which one shows. Output goes through a fixed buffer and write(2): no
// allocation, no stdio, safe at exit.
//
//   text:  "aoshim: <label, padded>  <value><value>..."  one line per row
//   JSON:  "key": value, nested in objects and arrays, indented
#ifndef AO_EMITTER_H
#define AO_EMITTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ao_emit_fmt_e { AO_EMIT_TEXT, AO_EMIT_JSON } ao_emit_fmt_t;

typedef enum ao_emit_type_e {
    AO_T_U64,   // integer
    AO_T_I64,   // signed integer
    AO_T_BYTES, // JSON: integer bytes; text: "12.4 GiB"
    AO_T_NS,    // JSON: integer nanoseconds; text: "1.234 ms"
    AO_T_PCT,   // double; text: "34.5%"
    AO_T_GBPS,  // double, GB/s (1e9 bytes/s); text: "48.2 GB/s"
    AO_T_DBL,   // double
    AO_T_STR,   // string (JSON-escaped); NULL: JSON null, text "-"
    AO_T_BOOL,
} ao_emit_type_t;

typedef struct ao_emit_val_s {
    ao_emit_type_t type;
    union {
        uint64_t u;
        int64_t i;
        double d;
        const char *s;
        bool b;
    };
} ao_emit_val_t;

#define AO_U64(x)   ((ao_emit_val_t){.type = AO_T_U64, .u = (uint64_t)(x)})
#define AO_I64(x)   ((ao_emit_val_t){.type = AO_T_I64, .i = (int64_t)(x)})
#define AO_BYTES(x) ((ao_emit_val_t){.type = AO_T_BYTES, .u = (uint64_t)(x)})
#define AO_NS(x)    ((ao_emit_val_t){.type = AO_T_NS, .u = (uint64_t)(x)})
#define AO_PCT(x)   ((ao_emit_val_t){.type = AO_T_PCT, .d = (double)(x)})
#define AO_GBPS(x)  ((ao_emit_val_t){.type = AO_T_GBPS, .d = (double)(x)})
#define AO_DBL(x)   ((ao_emit_val_t){.type = AO_T_DBL, .d = (double)(x)})
#define AO_STR(x)   ((ao_emit_val_t){.type = AO_T_STR, .s = (x)})
#define AO_BOOL(x)  ((ao_emit_val_t){.type = AO_T_BOOL, .b = (x)})

// A column of a table: JSON key, text header, text width (right-aligned).
typedef struct ao_emit_col_s {
    const char *key, *header;
    int width;
} ao_emit_col_t;

typedef struct ao_emitter_s {
    int fd;
    ao_emit_fmt_t fmt;
    int depth;
    bool first[32]; // no item yet at this depth (JSON commas)
    bool arr[32];   // this depth is an array: items have no key
    bool in_row;    // text: a row is open
    bool failed;    // a write failed
    const ao_emit_col_t *cols;
    int ncols;
    size_t len;
    char buf[8192];
} ao_emitter_t;

void ao_emit_init(ao_emitter_t *e, int fd, ao_emit_fmt_t fmt);
// Set when any emitter's write failed (a full disk): the file writer checks
// it, since the writers themselves return nothing.
extern bool ao_emit_any_failed;
extern int ao_emit_errno; // the failed write's errno
// Flush; false if any write failed.
bool ao_emit_flush(ao_emitter_t *e);

// The document (JSON: the outer object).
void ao_emit_begin(ao_emitter_t *e);
void ao_emit_end(ao_emitter_t *e);
// A nested object (JSON only; key NULL inside an array).
void ao_emit_obj_begin(ao_emitter_t *e, const char *key);
void ao_emit_obj_end(ao_emitter_t *e);
// A JSON array (text: nothing).
void ao_emit_arr_begin(ao_emitter_t *e, const char *key);
void ao_emit_arr_end(ao_emitter_t *e);

// A text row: label, then values, each after its text prefix. In JSON each
// value with a key is one "key": value; a NULL key is text only, a NULL
// label shows nothing in text (JSON only).
void ao_emit_row_begin(ao_emitter_t *e, const char *label);
void ao_emit_val(ao_emitter_t *e, const char *prefix, const char *key, ao_emit_val_t v);
void ao_emit_row_end(ao_emitter_t *e);
// One value in one row.
void ao_emit_kv(ao_emitter_t *e, const char *label, const char *key, ao_emit_val_t v);
// JSON only.
void ao_emit_json(ao_emitter_t *e, const char *key, ao_emit_val_t v);
// A sentence on a line of its own: text "aoshim: <text>"; JSON "key": text.
// NULL text: no line, JSON null.
void ao_emit_note(ao_emitter_t *e, const char *key, const char *text);

// A table: text, a header line then one line per row; JSON, an array of
// objects with the columns' keys.
void ao_emit_table_begin(ao_emitter_t *e, const char *key, const char *title,
                         const ao_emit_col_t *cols, int ncols);
void ao_emit_table_row(ao_emitter_t *e, const ao_emit_val_t *vals);
void ao_emit_table_end(ao_emitter_t *e);

// Raw bytes, as given (the HTML and trace writers share the buffer).
void ao_emit_raw(ao_emitter_t *e, const char *s, size_t n);
// A string literal, its length counted by the compiler.
#define AO_LIT(e, s) ao_emit_raw((e), s, sizeof s - 1)
void ao_emit_printf(ao_emitter_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// s, JSON-escaped (no quotes added); html: HTML-escaped instead.
void ao_emit_escaped(ao_emitter_t *e, const char *s, bool html);

// "12.4 GiB".
const char *ao_fmt_bytes(char *buf, unsigned long size, unsigned long long bytes);

#endif // AO_EMITTER_H
