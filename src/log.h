// SPDX-License-Identifier: MIT
// Messages: one family of prefixes ("aoshim: ", "aoshim: warning: ",
// "aoshim: error: "), formatted into a stack buffer and written with one
// write(2), so they are safe from any thread and never allocate.
#ifndef AO_LOG_H
#define AO_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum ao_log_level { AO_LOG_INFO, AO_LOG_WARN, AO_LOG_ERROR };

#define AO_MAX_WARNINGS 32

// Thread-local state on the hot path. The initial-exec model makes an access
// one instruction instead of a __tls_get_addr call; it needs the library to
// be loaded at start-up, which LD_PRELOAD does (glibc keeps surplus static
// TLS for the few bytes a library loaded later would need).
#define AO_TLS                                                                                     \
    __thread __attribute__((tls_model("initial-exec"))) // later warnings are counted, not printed

void ao_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ao_vlog(int level, const char *fmt, va_list ap);
// Warn at most once per call site: `static int once; ao_warn_once(&once, ...)`.
void ao_warn_once(int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Write a whole preformatted line (adds nothing).
void ao_write_line(int fd, const char *buf, size_t len);

#endif // AO_LOG_H
