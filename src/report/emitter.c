// SPDX-License-Identifier: MIT
#include "emitter.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define LABEL_WIDTH 34

bool ao_emit_any_failed;
int ao_emit_errno;

// --- output -----------------------------------------------------------------------------
bool ao_emit_flush(ao_emitter_t *e)
{
    const char *p = e->buf;
    size_t n = e->len;
    while (n > 0 && !e->failed) {
        ssize_t w = write(e->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            e->failed = true;
            ao_emit_any_failed = true;
            ao_emit_errno = w < 0 ? errno : ENOSPC;
            break;
        }
        p += w, n -= (size_t)w;
    }
    e->len = 0;
    return !e->failed;
}

void ao_emit_raw(ao_emitter_t *e, const char *s, size_t n)
{
    while (n > 0) {
        if (e->len == sizeof e->buf) ao_emit_flush(e);
        size_t k = sizeof e->buf - e->len;
        if (k > n) k = n;
        memcpy(e->buf + e->len, s, k);
        e->len += k, s += k, n -= k;
    }
}

static void puts_(ao_emitter_t *e, const char *s)
{
    ao_emit_raw(e, s, strlen(s));
}

void ao_emit_printf(ao_emitter_t *e, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    ao_emit_raw(e, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// Strings come from outside (the command line, file and symbol names) and
// need not be UTF-8, which a JSON document and an HTML page must be: a byte
// that does not start a valid UTF-8 sequence becomes U+FFFD, the
// replacement character (JSON "\ufffd"), so the file stays valid and the
// rest of the string readable.
void ao_emit_escaped(ao_emitter_t *e, const char *s, bool html)
{
    size_t left = s ? strlen(s) : 0;
    for (; s && *s; s++, left--) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x80) {
            size_t k = ao_utf8_seq(s, left);
            if (k == 0) {
                if (html)
                    AO_LIT(e, "\xef\xbf\xbd");
                else
                    AO_LIT(e, "\\ufffd");
            } else {
                ao_emit_raw(e, s, k);
                s += k - 1, left -= k - 1;
            }
        } else if (html) {
            if (c == '<')
                puts_(e, "&lt;");
            else if (c == '>')
                puts_(e, "&gt;");
            else if (c == '&')
                puts_(e, "&amp;");
            else if (c == '"')
                puts_(e, "&quot;");
            else
                ao_emit_raw(e, (const char *)&c, 1);
        } else if (c == '"' || c == '\\') {
            char two[2] = {'\\', (char)c};
            ao_emit_raw(e, two, 2);
        } else if (c < 0x20) {
            ao_emit_printf(e, "\\u%04x", c);
        } else {
            ao_emit_raw(e, (const char *)&c, 1);
        }
    }
}

void ao_emit_init(ao_emitter_t *e, int fd, ao_emit_fmt_t fmt)
{
    memset(e, 0, sizeof *e);
    e->fd = fd;
    e->fmt = fmt;
}

const char *ao_fmt_bytes(char *buf, unsigned long size, unsigned long long bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    if (u == 0)
        snprintf(buf, size, "%llu B", bytes);
    else
        snprintf(buf, size, "%.1f %s", v, unit[u]);
    return buf;
}

// --- JSON structure ---------------------------------------------------------------------
static void indent(ao_emitter_t *e)
{
    ao_emit_raw(e, "\n", 1);
    for (int i = 0; i < e->depth; i++)
        ao_emit_raw(e, "  ", 2);
}

// Before an item at the current depth: comma, newline, indentation, key.
static void item(ao_emitter_t *e, const char *key)
{
    if (!e->first[e->depth]) ao_emit_raw(e, ",", 1);
    e->first[e->depth] = false;
    indent(e);
    if (key) {
        ao_emit_raw(e, "\"", 1);
        ao_emit_escaped(e, key, false);
        ao_emit_raw(e, "\": ", 3);
    }
}

static void open_(ao_emitter_t *e, const char *key, char c)
{
    if (e->fmt != AO_EMIT_JSON) return;
    if (e->depth > 0) item(e, key);
    ao_emit_raw(e, &c, 1);
    if (e->depth < 31) e->depth++;
    e->first[e->depth] = true;
    e->arr[e->depth] = c == '[';
}

static void close_(ao_emitter_t *e, char c)
{
    if (e->fmt != AO_EMIT_JSON) return;
    bool empty = e->first[e->depth];
    if (e->depth > 0) e->depth--;
    if (!empty) indent(e);
    ao_emit_raw(e, &c, 1);
}

void ao_emit_begin(ao_emitter_t *e)
{
    open_(e, NULL, '{');
}

void ao_emit_end(ao_emitter_t *e)
{
    close_(e, '}');
    if (e->fmt == AO_EMIT_JSON) ao_emit_raw(e, "\n", 1);
    ao_emit_flush(e);
}

void ao_emit_obj_begin(ao_emitter_t *e, const char *key)
{
    open_(e, key, '{');
}
void ao_emit_obj_end(ao_emitter_t *e)
{
    close_(e, '}');
}
void ao_emit_arr_begin(ao_emitter_t *e, const char *key)
{
    open_(e, key, '[');
}
void ao_emit_arr_end(ao_emitter_t *e)
{
    close_(e, ']');
}

// --- values -------------------------------------------------------------------------------
static void json_double(ao_emitter_t *e, double d)
{
    if (!isfinite(d))
        puts_(e, "null");
    else
        ao_emit_printf(e, "%.6g", d);
}

static void value(ao_emitter_t *e, ao_emit_val_t v)
{
    char b[64];
    bool json = e->fmt == AO_EMIT_JSON;
    switch (v.type) {
    case AO_T_U64:
        ao_emit_printf(e, "%llu", (unsigned long long)v.u);
        break;
    case AO_T_I64:
        ao_emit_printf(e, "%lld", (long long)v.i);
        break;
    case AO_T_BYTES:
        if (json)
            ao_emit_printf(e, "%llu", (unsigned long long)v.u);
        else
            puts_(e, ao_fmt_bytes(b, sizeof b, v.u));
        break;
    case AO_T_NS:
        if (json)
            ao_emit_printf(e, "%llu", (unsigned long long)v.u);
        else
            ao_emit_printf(e, "%.3f ms", (double)v.u / 1e6);
        break;
    case AO_T_PCT:
        if (json)
            json_double(e, v.d);
        else
            ao_emit_printf(e, "%.1f%%", v.d);
        break;
    case AO_T_GBPS:
        if (json)
            json_double(e, v.d);
        else
            ao_emit_printf(e, "%.1f GB/s", v.d);
        break;
    case AO_T_DBL:
        if (json)
            json_double(e, v.d);
        else
            ao_emit_printf(e, "%.3g", v.d);
        break;
    case AO_T_STR:
        if (!json)
            puts_(e, v.s ? v.s : "-");
        else if (!v.s)
            puts_(e, "null");
        else {
            ao_emit_raw(e, "\"", 1);
            ao_emit_escaped(e, v.s, false);
            ao_emit_raw(e, "\"", 1);
        }
        break;
    case AO_T_BOOL:
        puts_(e, v.b ? (json ? "true" : "yes") : (json ? "false" : "no"));
        break;
    }
}

void ao_emit_row_begin(ao_emitter_t *e, const char *label)
{
    if (e->fmt != AO_EMIT_TEXT) return;
    e->in_row = label != NULL;
    if (label) ao_emit_printf(e, "aoshim: %-*s ", LABEL_WIDTH, label);
}

void ao_emit_val(ao_emitter_t *e, const char *prefix, const char *key, ao_emit_val_t v)
{
    if (e->fmt == AO_EMIT_TEXT) {
        if (!e->in_row) return;
        if (prefix) puts_(e, prefix);
        value(e, v);
    } else if (key || e->arr[e->depth]) {
        item(e, key);
        value(e, v);
    }
}

void ao_emit_row_end(ao_emitter_t *e)
{
    if (e->fmt == AO_EMIT_TEXT && e->in_row) ao_emit_raw(e, "\n", 1);
    e->in_row = false;
}

void ao_emit_kv(ao_emitter_t *e, const char *label, const char *key, ao_emit_val_t v)
{
    ao_emit_row_begin(e, label);
    ao_emit_val(e, NULL, key, v);
    ao_emit_row_end(e);
}

// Not through a row: inside a text row that would end the row (its label
// NULL), and the row's later values and newline would be lost.
void ao_emit_json(ao_emitter_t *e, const char *key, ao_emit_val_t v)
{
    if (e->fmt == AO_EMIT_JSON) ao_emit_val(e, NULL, key, v);
}

void ao_emit_note(ao_emitter_t *e, const char *key, const char *text)
{
    if (e->fmt == AO_EMIT_JSON)
        ao_emit_json(e, key, AO_STR(text));
    else if (text)
        ao_emit_printf(e, "aoshim: %s\n", text);
}

// --- tables -------------------------------------------------------------------------------
void ao_emit_table_begin(ao_emitter_t *e, const char *key, const char *title,
                         const ao_emit_col_t *cols, int ncols)
{
    e->cols = cols;
    e->ncols = ncols;
    if (e->fmt == AO_EMIT_JSON) {
        ao_emit_arr_begin(e, key);
        return;
    }
    ao_emit_printf(e, "aoshim: %s\n", title);
    ao_emit_raw(e, "aoshim:", 7);
    for (int i = 0; i < ncols; i++)
        ao_emit_printf(e, " %*s", cols[i].width, cols[i].header);
    ao_emit_raw(e, "\n", 1);
}

void ao_emit_table_row(ao_emitter_t *e, const ao_emit_val_t *vals)
{
    if (e->fmt == AO_EMIT_JSON) {
        ao_emit_obj_begin(e, NULL);
        for (int i = 0; i < e->ncols; i++)
            ao_emit_json(e, e->cols[i].key, vals[i]);
        ao_emit_obj_end(e);
        return;
    }
    ao_emit_raw(e, "aoshim:", 7);
    for (int i = 0; i < e->ncols; i++) {
        // Format at the end of the buffer, then move it into a right-aligned
        // cell: values are short, so room is made first and nothing flushes.
        char cell[64];
        if (sizeof e->buf - e->len < 256) ao_emit_flush(e);
        size_t save = e->len;
        value(e, vals[i]);
        size_t n = e->len - save;
        if (n >= sizeof cell) n = sizeof cell - 1;
        memcpy(cell, e->buf + save, n);
        cell[n] = '\0';
        e->len = save;
        ao_emit_printf(e, " %*s", e->cols[i].width, cell);
    }
    ao_emit_raw(e, "\n", 1);
}

void ao_emit_table_end(ao_emitter_t *e)
{
    if (e->fmt == AO_EMIT_JSON) ao_emit_arr_end(e);
    e->cols = NULL;
    e->ncols = 0;
}
