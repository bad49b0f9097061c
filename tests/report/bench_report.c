// SPDX-License-Identifier: MIT
// What the report costs (prints figures; not a pass/fail test):
//   1. ao_rec_alloc per tracked allocation, with and without stack capture
//      (AOSHIM_STACKS), called from a stack 12 frames deep;
//   2. writing the summary, JSON, trace and HTML at exit after a long run
//      (the record full: every bound reached).
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "report/record.h"
#include "report/report.h"
#include "stats.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// A call chain, so the unwinder has real frames to walk; each call site
// distinct in the table would be unrealistic: a program has few.
__attribute__((noinline)) static void deep(int d, int n, uint64_t bytes)
{
    if (d > 0) {
        deep(d - 1, n, bytes);
        __asm__ volatile("" ::: "memory"); // not a tail call
        return;
    }
    for (int i = 0; i < n; i++)
        ao_rec_alloc(i & 31, bytes);
}

static double per_alloc_ns(bool stacks, int n)
{
    ao_config.stacks = stacks;
    deep(12, 1000, 1 << 20); // warm: libunwind opened, caches filled
    double t = now();
    deep(12, n, 1 << 20);
    return (now() - t) / n * 1e9;
}

static double write_ms(const char *path, void (*fn)(int), off_t *size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    double t = now();
    fn(fd);
    double ms = (now() - t) * 1e3;
    struct stat st;
    fstat(fd, &st);
    *size = st.st_size;
    close(fd);
    unlink(path);
    return ms;
}

int main(void)
{
    int n = 200000;
    double off = per_alloc_ns(false, n), on = per_alloc_ns(true, n);
    printf("ao_rec_alloc: %.0f ns without stacks, %.0f ns with (stack capture adds %.0f ns per "
           "tracked "
           "allocation, 12+ frames)\n",
           off, on, on - off);

    // A long run: 96 layers, a million memory changes, 100000 steps, the
    // trace's cap of GPU intervals, ten thousand call-site captures.
    ao_config.stacks = true;
    double t = now();
    for (int i = 0; i < 1000000; i++) {
        int layer = i % 96;
        int64_t d = (i / 96) % 2 ? -(64 << 20) : (64 << 20);
        ao_stat_device(0, d, 0);
        ao_rec_memory(layer, d, 0);
        if (i % 10 == 0) ao_rec_step();
    }
    for (int i = 0; i < (1 << 16) + 100; i++)
        ao_rec_interval(i % 3, i % 96, 0, 64 << 20, (uint64_t)i * 1000000,
                        (uint64_t)i * 1000000 + 500000);
    double rec = now() - t;
    printf("recording 1e6 memory changes, 1e5 steps, 65636 GPU intervals: %.0f ns per event\n",
           rec / 1065636 * 1e9);
    off_t sz[4];
    char path[64];
    snprintf(path, sizeof path, "/tmp/aoshim-bench-report-%d", (int)getpid());
    double ms[4] = {
        write_ms(path, ao_summary_write, &sz[0]),
        write_ms(path, ao_report_json, &sz[1]),
        write_ms(path, ao_report_trace, &sz[2]),
        write_ms(path, ao_report_html, &sz[3]),
    };
    static const char *const what[] = {"summary", "JSON", "trace", "HTML"};
    for (int i = 0; i < 4; i++)
        printf("write %-8s %8.1f ms  %8.1f KiB\n", what[i], ms[i], (double)sz[i] / 1024);
    printf(
        "all four at exit: %.1f ms (timeline %d buckets, %d steps kept of %llu, %u GPU intervals, "
        "%llu dropped)\n",
        ms[0] + ms[1] + ms[2] + ms[3], ao_rec.ntl, ao_rec.nsteps, (unsigned long long)ao_rec.nstep,
        ao_rec.nspans, (unsigned long long)ao_rec.spans_dropped);
    return 0;
}
