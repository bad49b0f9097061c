// SPDX-License-Identifier: MIT
#include "log.h"

#include <cuda.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static atomic_uint warnings;

void ao_write_line(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        buf += n;
        len -= (size_t)n;
    }
}

// --- escaping ---------------------------------------------------------------------
size_t ao_utf8_seq(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) return 0;
    if (u[0] < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((u[0] & 0xe0) == 0xc0)
        len = 2, cp = u[0] & 0x1f, min = 0x80;
    else if ((u[0] & 0xf0) == 0xe0)
        len = 3, cp = u[0] & 0x0f, min = 0x800;
    else if ((u[0] & 0xf8) == 0xf0)
        len = 4, cp = u[0] & 0x07, min = 0x10000;
    else
        return 0; // a continuation byte, or 0xf8..0xff
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (u[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

size_t ao_escape(char *out, size_t size, const char *s, size_t n, bool backslash)
{
    if (size == 0) return 0;
    size_t room = size - 1, len = 0;
    size_t cut = 0; // the length after the last whole unit that leaves room for "..."
    for (size_t i = 0; i < n;) {
        char unit[4];
        const char *src = unit;
        size_t k, adv = 1;
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\r' || c == '\t' || (c == '\\' && backslash)) {
            unit[0] = '\\';
            unit[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : '\\';
            k = 2;
        } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && (adv = ao_utf8_seq(s + i, n - i)) == 0) ||
                   // U+0080..U+009F, the C1 controls: valid UTF-8, yet a
                   // terminal may act on one (U+009B is CSI, an escape
                   // sequence's start). Its two bytes are shown as \xHH.
                   (c == 0xc2 && adv == 2 && (unsigned char)s[i + 1] < 0xa0)) {
            static const char hex[] = "0123456789abcdef";
            unit[0] = '\\', unit[1] = 'x', unit[2] = hex[c >> 4], unit[3] = hex[c & 15];
            k = 4, adv = 1;
        } else {
            src = s + i, k = adv; // printable ASCII, or a whole UTF-8 character
        }
        if (len + k > room) {
            len = cut;
            for (size_t d = 0; d < 3 && len < room; d++)
                out[len++] = '.';
            break;
        }
        memcpy(out + len, src, k);
        len += k, i += adv;
        if (len + 3 <= room) cut = len;
    }
    out[len] = '\0';
    return len;
}

// --- lines ----------------------------------------------------------------------------
static void vlog_fd(int fd, int level, const char *fmt, va_list ap)
{
    static const char *const prefix[] = {"aoshim: ", "aoshim: warning: ", "aoshim: error: "};
    if (level == AO_LOG_WARN) {
        unsigned n = atomic_fetch_add(&warnings, 1);
        if (n == AO_MAX_WARNINGS) {
            static const char cap[] = "aoshim: warning: further warnings suppressed\n";
            ao_write_line(fd, cap, sizeof cap - 1);
        }
        if (n >= AO_MAX_WARNINGS) return;
    }
    // Formatted first, then escaped into the line: a file name or value with a
    // newline or a terminal escape in it must not break the line nor reach the
    // terminal as a control sequence. A message longer than the body buffer is
    // longer than the line too, so the cut below shows it with "...".
    char body[2 * AO_LOG_LINE], buf[AO_LOG_LINE];
    int n = vsnprintf(body, sizeof body, fmt, ap);
    size_t blen = n < 0 ? 0 : (size_t)n < sizeof body ? (size_t)n : sizeof body - 1;
    size_t p = strlen(prefix[level]);
    memcpy(buf, prefix[level], p);
    p += ao_escape(buf + p, sizeof buf - p, body, blen, false);
    if (p > sizeof buf - 1) p = sizeof buf - 1; // never: ao_escape stays in its room
    buf[p++] = '\n';                            // over ao_escape's NUL: at most sizeof buf
    ao_write_line(fd, buf, p);
}

void ao_vlog(int level, const char *fmt, va_list ap)
{
    vlog_fd(2, level, fmt, ap);
}

void ao_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_fd(2, level, fmt, ap);
    va_end(ap);
}

void ao_log_fd(int fd, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_fd(fd, level, fmt, ap);
    va_end(ap);
}

void ao_warn_once(int *flag, const char *fmt, ...)
{
    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED)) return;
    va_list ap;
    va_start(ap, fmt);
    vlog_fd(2, AO_LOG_WARN, fmt, ap);
    va_end(ap);
}

// --- process exit ---------------------------------------------------------------
static atomic_bool exiting;

void ao_exit_begin(void)
{
    atomic_store_explicit(&exiting, true, memory_order_relaxed);
}

bool ao_exiting(void)
{
    return atomic_load_explicit(&exiting, memory_order_relaxed);
}

bool ao_cuda_gone_at_exit(int cuda_rc)
{
    if (cuda_rc == CUDA_ERROR_DEINITIALIZED) {
        ao_exit_begin();
        return true;
    }
    return cuda_rc == CUDA_ERROR_NOT_INITIALIZED && ao_exiting();
}
