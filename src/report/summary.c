// SPDX-License-Identifier: MIT
#include "summary.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "stats.h"

const char *ao_fmt_bytes(char *buf, unsigned long size, unsigned long long bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, size, "%llu B", bytes);
    else snprintf(buf, size, "%.1f %s", v, unit[u]);
    return buf;
}

static void row(int fd, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void row(int fd, const char *label, const char *fmt, ...)
{
    char line[256];
    int n = snprintf(line, sizeof line, "aoshim: %-34s ", label);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ao_write_line(fd, line, (size_t)n);
}

void ao_summary_write(int fd)
{
    char a[32], b[32], c[32];
    uint64_t peak = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
    uint64_t without = ao_stat_get(AO_STAT_PEAK_WITHOUT_BYTES);
    uint64_t saved = without > peak ? without - peak : 0;
    row(fd, "memory summary", "pid %d", (int)getpid());
    row(fd, "peak device memory", "%s", ao_fmt_bytes(a, sizeof a, peak));
    row(fd, "peak without offloading", "%s (saved %s, %.1f%%)", ao_fmt_bytes(b, sizeof b, without),
        ao_fmt_bytes(c, sizeof c, saved), without ? 100.0 * (double)saved / (double)without : 0.0);
    row(fd, "offloaded / reloaded", "%s / %s", ao_fmt_bytes(a, sizeof a, ao_stat_get(AO_STAT_OFFLOADED_BYTES)),
        ao_fmt_bytes(b, sizeof b, ao_stat_get(AO_STAT_RELOADED_BYTES)));
    row(fd, "layer offloads", "%llu", (unsigned long long)ao_stat_get(AO_STAT_LAYERS_OFFLOADED));
    row(fd, "compute stream waited on reloads", "%.3f ms",
        (double)ao_stat_get(AO_STAT_RELOAD_WAIT_NS) / 1e6);
    row(fd, "prefetches missed", "%llu", (unsigned long long)ao_stat_get(AO_STAT_PREFETCH_MISSED));
    row(fd, "pinned host pool", "%s in %llu pin calls",
        ao_fmt_bytes(a, sizeof a, ao_stat_get(AO_STAT_PINNED_HOST_BYTES)),
        (unsigned long long)ao_stat_get(AO_STAT_PIN_CALLS));
    row(fd, "kept resident", "too small %llu, host limit %llu, pin failed %llu, aoshim_keep %llu, no device memory %llu",
        (unsigned long long)ao_stat_get(AO_STAT_KEPT_SMALL),
        (unsigned long long)ao_stat_get(AO_STAT_KEPT_HOST_LIMIT),
        (unsigned long long)ao_stat_get(AO_STAT_KEPT_PIN_FAILED),
        (unsigned long long)ao_stat_get(AO_STAT_KEPT_BY_USER),
        (unsigned long long)ao_stat_get(AO_STAT_KEPT_NO_DEVICE_SPACE));
}
