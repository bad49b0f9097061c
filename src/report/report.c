// SPDX-License-Identifier: MIT
// Where the report goes: file names with %p/%r/%h, one warning for a file
// that cannot be written, and the order of the writers at exit.
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

// One file: expanded, written whole to a temporary name and renamed, so a
// reader never sees half a report; on failure, one warning and on we go.
static void write_file(const char *var, const char *pattern, void (*writer)(int fd))
{
    char path[4096], tmp[4200];
    if (!ao_report_path(pattern, path, sizeof path)) {
        ao_log(AO_LOG_WARN, "%s='%s': file name too long; no file written", var, pattern);
        return;
    }
    // A device, a pipe or /dev/stdout is written in place: renaming a
    // temporary file over it would replace the device node.
    struct stat st;
    bool direct = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    int fd = open(direct ? path : tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ao_log(AO_LOG_WARN, "%s: cannot write %s: %s", var, path, strerror(errno));
        return;
    }
    ao_emit_any_failed = false;
    writer(fd);
    // No fsync: at exit it would wait for the disk; a full disk already
    // shows as a failed write(2).
    int werr = ao_emit_any_failed ? ao_emit_errno : 0;
    bool ok = !ao_emit_any_failed;
    if (close(fd) != 0) ok = false, werr = errno;
    if (ok && !direct && rename(tmp, path) != 0) ok = false, werr = errno;
    if (!ok) {
        ao_log(AO_LOG_WARN, "%s: cannot write %s: %s", var, path, strerror(werr));
        if (!direct) unlink(tmp);
    }
}

void ao_report_all(bool summary)
{
    if (summary) ao_summary_write(2);
    if (ao_config.report) write_file("AOSHIM_REPORT", ao_config.report, ao_report_json);
    if (ao_config.trace) write_file("AOSHIM_TRACE", ao_config.trace, ao_report_trace);
    if (ao_config.report_html)
        write_file("AOSHIM_REPORT_HTML", ao_config.report_html, ao_report_html);
}
