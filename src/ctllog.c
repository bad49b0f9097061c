// SPDX-License-Identifier: MIT
// The control log (ctllog.h). Each line is one write(2) on an O_APPEND file:
// lines from different threads (PyTorch's autograd thread calls the backward
// boundaries) never interleave, and no lock, stdio or allocation is needed.
#include "ctllog.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "aoshim.h"
#include "config.h"
#include "report/report.h"

// The file is opened at the first logged call, not at load: a process that
// never calls the control API (a launcher, a compiler) creates no file, and
// the pid in the name is the caller's own.
enum { LOG_CLOSED, LOG_OPENING, LOG_OPEN, LOG_OFF };
static atomic_int state = LOG_CLOSED;
static int fd = -1;       // valid once state is LOG_OPEN
static atomic_int cur_mb; // the microbatch as the program set it
static bool forked;       // this process is a forked child

static const char *const names[] = {
    [AO_CTL_LAYER_BEGIN] = "layer_begin",
    [AO_CTL_LAYER_END] = "layer_end",
    [AO_CTL_BACKWARD_BEGIN] = "backward_begin",
    [AO_CTL_BACKWARD_END] = "backward_end",
    [AO_CTL_STEP_END] = "step_end",
    [AO_CTL_SET_MICROBATCH] = "set_microbatch",
    [AO_CTL_SET_SCHEDULE] = "set_schedule",
    [AO_CTL_OFFLOAD_LAYER] = "offload_layer",
    [AO_CTL_RELEASE_LAYER] = "release_layer",
    [AO_CTL_RELOAD_LAYER] = "reload_layer",
};

// Whether the name has a %p of its own (not the tail of a "%%").
static bool has_pid(const char *pattern)
{
    for (const char *p = pattern; *p; p++)
        if (*p == '%' && p[1]) {
            if (p[1] == 'p') return true;
            p++;
        }
    return false;
}

static int open_log(void)
{
    const char *pattern = ao_config.control_log;
    // A forked child whose file name does not change with the pid would
    // truncate, or write into, its parent's log: it logs nothing.
    if (forked && !has_pid(pattern)) return -1;
    char path[4096];
    if (!ao_report_path(pattern, path, sizeof path)) {
        ao_report_path_warn("AOSHIM_CONTROL_LOG",
                            "AOSHIM_CONTROL_LOG='%s': file name too long; no control log", pattern);
        return -1;
    }
    // The program's own streams, for a user watching boundaries go by: they
    // are symlinks, which O_NOFOLLOW refuses, and must not be truncated.
    // Elsewhere O_NOFOLLOW: a planted symlink in a shared directory (/tmp)
    // must not redirect the truncation to another file.
    int f;
    if (strcmp(path, "/dev/stdout") == 0)
        f = fcntl(1, F_DUPFD_CLOEXEC, 3);
    else if (strcmp(path, "/dev/stderr") == 0)
        f = fcntl(2, F_DUPFD_CLOEXEC, 3);
    else
        f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f < 0)
        ao_report_path_warn("AOSHIM_CONTROL_LOG",
                            "AOSHIM_CONTROL_LOG: cannot write %s: %s; no control log", path,
                            strerror(errno)); // passed the start-up check: changed since
    return f;
}

static int log_fd(void)
{
    for (;;) {
        int st = atomic_load_explicit(&state, memory_order_acquire);
        if (st == LOG_OPEN) return fd;
        if (st == LOG_OFF) return -1;
        int closed = LOG_CLOSED;
        if (st == LOG_CLOSED && atomic_compare_exchange_strong(&state, &closed, LOG_OPENING)) {
            int f = open_log();
            fd = f;
            atomic_store_explicit(&state, f >= 0 ? LOG_OPEN : LOG_OFF, memory_order_release);
            return f;
        }
        sched_yield(); // another thread is opening it: a few microseconds
    }
}

static size_t put_int(char *out, int v)
{
    char tmp[12];
    size_t n = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do
        tmp[n++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    size_t k = 0;
    if (v < 0) out[k++] = '-';
    while (n)
        out[k++] = tmp[--n];
    return k;
}

void ao_ctllog(ao_ctl_call_t call, int arg)
{
    if (!ao_config.control_log) return;
    int f = log_fd();
    if (f < 0) return;
    int layer = arg, mb = atomic_load_explicit(&cur_mb, memory_order_relaxed);
    if (call == AO_CTL_STEP_END)
        layer = mb = -1;
    else if (call == AO_CTL_SET_MICROBATCH)
        layer = -1, mb = arg;
    else if (call == AO_CTL_SET_SCHEDULE)
        mb = -1;
    char line[64];
    size_t n = strlen(names[call]);
    memcpy(line, names[call], n);
    line[n++] = ' ';
    n += put_int(line + n, layer);
    line[n++] = ' ';
    n += put_int(line + n, mb);
    line[n++] = '\n';
    while (write(f, line, n) < 0 && errno == EINTR) {
    }
}

void ao_ctllog_done(ao_ctl_call_t call, int arg, int rc)
{
    if (!ao_config.control_log) return;
    // A microbatch the engine refused (out of range, inside a layer) is not
    // the one later lines belong to; a disabled engine refuses nothing.
    if (call == AO_CTL_SET_MICROBATCH && rc != AOSHIM_EINVAL && rc != AOSHIM_ESTATE)
        atomic_store_explicit(&cur_mb, arg, memory_order_relaxed);
    else if (call == AO_CTL_STEP_END)
        atomic_store_explicit(&cur_mb, 0, memory_order_relaxed);
}

// Runs in the child right after fork(), before anything else can: no other
// thread exists, so plain stores are enough. A parent caught mid-open leaves
// LOG_OPENING behind, which is reset here too.
void ao_ctllog_forked(void)
{
    forked = true;
    if (atomic_load(&state) == LOG_OPEN) close(fd);
    fd = -1;
    atomic_store(&state, LOG_CLOSED);
}
