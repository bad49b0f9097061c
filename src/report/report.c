// SPDX-License-Identifier: MIT
// Where the report goes: file names with %p/%r/%h, checked at start (a bad
// one stops the program as a bad value does), written safely (a temporary
// name, then rename), one warning for a file that still cannot be written at
// exit, and the order of the writers at exit.
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "emitter.h"
#include "log.h"

bool ao_report_path(const char *pattern, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char tmp[256];
        const char *add = tmp;
        if (*p != '%' || !p[1]) {
            tmp[0] = *p, tmp[1] = '\0';
        } else {
            switch (*++p) {
            case 'p':
                snprintf(tmp, sizeof tmp, "%d", (int)getpid());
                break;
            case 'r':
                snprintf(tmp, sizeof tmp, "%d", ao_report_rank());
                break;
            case 'h':
                if (gethostname(tmp, sizeof tmp - 1) != 0) strcpy(tmp, "host");
                tmp[sizeof tmp - 1] = '\0';
                break;
            case '%':
                add = "%";
                break;
            default:
                snprintf(tmp, sizeof tmp, "%%%c", *p);
                break; // kept as written
            }
        }
        size_t k = strlen(add);
        if (n + k >= size) return false;
        memcpy(out + n, add, k);
        n += k;
    }
    out[n] = '\0';
    return n > 0;
}

// --- one warning per file ------------------------------------------------------------
// A file that cannot be written is said once over the run: a later failure
// (the exit after an aoshim_report_now that failed) says nothing more.
static const char *const path_vars[] = {"AOSHIM_REPORT", "AOSHIM_TRACE", "AOSHIM_REPORT_HTML",
                                        "AOSHIM_CONTROL_LOG", "AOSHIM_RECORD"};
static bool warned[sizeof path_vars / sizeof *path_vars];

void ao_report_path_warn(const char *var, const char *fmt, ...)
{
    for (size_t i = 0; i < sizeof path_vars / sizeof *path_vars; i++)
        if (strcmp(var, path_vars[i]) == 0 &&
            __atomic_exchange_n(&warned[i], true, __ATOMIC_RELAXED))
            return;
    va_list ap;
    va_start(ap, fmt);
    ao_vlog(AO_LOG_WARN, fmt, ap);
    va_end(ap);
}

// The program's own streams, written in place (as the control log does): a
// user naming them means the stream, and the names are symlinks into /proc,
// which ao_report_write refuses for any other name.
static int stream_fd(const char *path)
{
    return strcmp(path, "/dev/stdout") == 0 ? 1 : strcmp(path, "/dev/stderr") == 0 ? 2 : -1;
}

static const char *file_kind(mode_t m)
{
    return S_ISLNK(m)    ? "a symbolic link"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISDIR(m)  ? "a directory"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

// What a write at exit would refuse, found now. The reports replace only a
// regular file (ao_report_write); the control log is opened in place, so a
// device (/dev/null, a terminal) is fine there, but a FIFO would block the
// program at its first control call and a directory or symlink fails open.
static bool refused_kind(bool in_place, mode_t m)
{
    if (S_ISREG(m)) return false;
    return !(in_place && (S_ISCHR(m) || S_ISBLK(m)));
}

int ao_report_check_paths(bool reports, char *err, size_t errlen)
{
    const char **field[] = {&ao_config.report, &ao_config.trace, &ao_config.report_html,
                            &ao_config.control_log, &ao_config.record};
    for (size_t i = 0; i < sizeof field / sizeof *field; i++) {
        char path[4096], dir[4096], shown[256], shown_path[256];
        const char *pattern = *field[i];
        if (!pattern || (i < 3 && !reports)) continue;
        bool in_place = i >= 3; // the control log and the step trace, written as they go
        // Escaped as a bad value is (config.c): one line whatever the name holds.
        ao_escape(shown, sizeof shown, pattern, strlen(pattern), true);
        if (!ao_report_path(pattern, path, sizeof path)) {
            snprintf(err, errlen,
                     "aoshim: error: %s='%s': file name too long (at most %zu bytes after "
                     "%%p/%%r/%%h expansion)",
                     path_vars[i], shown, sizeof path - 1);
            return -1;
        }
        if (stream_fd(path) >= 0) continue;
        ao_escape(shown_path, sizeof shown_path, path, strlen(path), true);
        // The directory the file (and its temporary) will be created in.
        const char *slash = strrchr(path, '/');
        if (!slash)
            strcpy(dir, ".");
        else if (slash == path)
            strcpy(dir, "/");
        else
            memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = '\0';
        // Only stat/lstat/access: a check that created the file (or its
        // directory) would leave one behind in a process that never writes
        // a report (a launcher, a compiler under the same LD_PRELOAD).
        struct stat st;
        int e = 0;
        if (stat(dir, &st) != 0)
            e = errno;
        else if (!S_ISDIR(st.st_mode))
            e = ENOTDIR;
        else if (access(dir, W_OK | X_OK) != 0)
            e = errno;
        else if (lstat(path, &st) == 0) {
            if (refused_kind(in_place, st.st_mode)) {
                snprintf(err, errlen, "aoshim: error: %s='%s': cannot write %s: it is %s; %s",
                         path_vars[i], shown, shown_path, file_kind(st.st_mode),
                         in_place ? "only a regular file or a device is written"
                                  : "only a regular file is replaced");
                return -1;
            }
            // Opened in place with O_TRUNC: the file itself must be writable
            // (a report is renamed over it, which needs only the directory).
            if (in_place && access(path, W_OK) != 0) e = errno;
        } else if (errno != ENOENT) {
            e = errno; // a name too long for the file system, say
        }
        // The temporary name is longer than the file's: it must fit too.
        char tmp[4200];
        if (!e && !in_place) {
            if (!ao_report_tmp_name(path, 0, tmp, sizeof tmp))
                e = ENAMETOOLONG;
            else if (lstat(tmp, &st) != 0 && errno != ENOENT)
                e = errno;
        }
        if (!e) continue;
        // A bad value, as a bad AOSHIM_* value is (exit 2 before main): a
        // name found wrong only at exit costs the user the whole run.
        snprintf(err, errlen, "aoshim: error: %s='%s': cannot write %s: %s", path_vars[i], shown,
                 shown_path, strerror(e));
        return -1;
    }
    return 0;
}

// --- writing a file ----------------------------------------------------------------------
// The temporary name: in the file's directory (rename does not cross file
// systems), with the pid and 64 bits from a per-process random seed, so
// that no one can know it beforehand and two processes never share one.
// O_EXCL|O_NOFOLLOW makes a planted name fail rather than be written
// through; the next attempt takes the next name.
static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

bool ao_report_tmp_name(const char *path, unsigned attempt, char *out, size_t size)
{
    static uint64_t seed;
    uint64_t s = __atomic_load_n(&seed, __ATOMIC_RELAXED);
    if (!s) {
        if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            s = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
            s ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&ts;
        }
        s |= 1; // never 0, the "not drawn yet" mark
        uint64_t zero = 0;
        if (!__atomic_compare_exchange_n(&seed, &zero, s, false, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            s = zero; // another thread drew first: use its seed
    }
    int n = snprintf(out, size, "%s.aoshim-%d-%016llx.tmp", path, (int)getpid(),
                     (unsigned long long)splitmix(s + attempt));
    return n > 0 && (size_t)n < size;
}

// One file: expanded, written whole to a temporary name and renamed, so a
// reader never sees half a report and nothing at the name is written
// through. Only a regular file (or nothing) at the name is replaced: a
// symlink, FIFO, device or directory there is refused with one warning, and
// never opened (a FIFO with no reader would block the program at exit).
bool ao_report_write(const char *var, const char *pattern, void (*writer)(int fd))
{
    char path[4096], tmp[4200];
    if (!ao_report_path(pattern, path, sizeof path)) {
        ao_report_path_warn(var, "%s='%s': file name too long; no file written", var, pattern);
        return false;
    }
    int fd = stream_fd(path);
    bool stream = fd >= 0;
    if (!stream) {
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            ao_report_path_warn(var,
                                "%s: cannot write %s: it is %s; only a regular file is replaced",
                                var, path, file_kind(st.st_mode));
            return false;
        }
        for (unsigned attempt = 0; fd < 0 && attempt < 16; attempt++) {
            if (!ao_report_tmp_name(path, attempt, tmp, sizeof tmp)) {
                errno = ENAMETOOLONG;
                break;
            }
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd < 0 && errno != EEXIST) break;
        }
        if (fd < 0) {
            ao_report_path_warn(var, "%s: cannot write %s: %s", var, path, strerror(errno));
            return false;
        }
    }
    ao_emit_any_failed = false;
    writer(fd);
    // No fsync: at exit it would wait for the disk; a full disk already
    // shows as a failed write(2).
    int werr = ao_emit_any_failed ? ao_emit_errno : 0;
    bool ok = !ao_emit_any_failed;
    if (!stream) {
        if (close(fd) != 0 && ok) ok = false, werr = errno;
        if (ok && rename(tmp, path) != 0) ok = false, werr = errno;
        if (!ok) unlink(tmp);
    }
    if (!ok) ao_report_path_warn(var, "%s: cannot write %s: %s", var, path, strerror(werr));
    return ok;
}

void ao_report_all(bool summary)
{
    if (summary) ao_summary_write(2);
    if (ao_config.report) ao_report_write("AOSHIM_REPORT", ao_config.report, ao_report_json);
    if (ao_config.trace) ao_report_write("AOSHIM_TRACE", ao_config.trace, ao_report_trace);
    if (ao_config.report_html)
        ao_report_write("AOSHIM_REPORT_HTML", ao_config.report_html, ao_report_html);
}
