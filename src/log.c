// SPDX-License-Identifier: MIT
#include "log.h"

#include <errno.h>
#include <stdatomic.h>
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

void ao_vlog(int level, const char *fmt, va_list ap)
{
    static const char *const prefix[] = {"aoshim: ", "aoshim: warning: ", "aoshim: error: "};
    if (level == AO_LOG_WARN) {
        unsigned n = atomic_fetch_add(&warnings, 1);
        if (n == AO_MAX_WARNINGS) {
            static const char cap[] = "aoshim: warning: further warnings suppressed\n";
            ao_write_line(2, cap, sizeof cap - 1);
        }
        if (n >= AO_MAX_WARNINGS) return;
    }
    char buf[1024];
    size_t p = strlen(prefix[level]);
    memcpy(buf, prefix[level], p);
    int n = vsnprintf(buf + p, sizeof buf - p - 1, fmt, ap);
    if (n < 0) n = 0;
    p += (size_t)n < sizeof buf - p - 1 ? (size_t)n : sizeof buf - p - 2;
    buf[p++] = '\n';
    ao_write_line(2, buf, p);
}

void ao_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ao_vlog(level, fmt, ap);
    va_end(ap);
}

void ao_warn_once(int *flag, const char *fmt, ...)
{
    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED)) return;
    va_list ap;
    va_start(ap, fmt);
    ao_vlog(AO_LOG_WARN, fmt, ap);
    va_end(ap);
}
