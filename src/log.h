// SPDX-License-Identifier: MIT
// Messages: one family of prefixes ("aoshim: ", "aoshim: warning: ",
// "aoshim: error: "), formatted into a stack buffer and written with one
// write(2), so they are safe from any thread and never allocate.
#ifndef AO_LOG_H
#define AO_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

enum ao_log_level { AO_LOG_INFO, AO_LOG_WARN, AO_LOG_ERROR };

#define AO_MAX_WARNINGS 32

// Thread-local state on the hot path. The initial-exec model makes an access
// one instruction instead of a __tls_get_addr call; it needs the library to
// be loaded at start-up, which LD_PRELOAD does (glibc keeps surplus static
// TLS for the few bytes a library loaded later would need).
#define AO_TLS                                                                                     \
    __thread __attribute__((tls_model("initial-exec"))) // later warnings are counted, not printed

// Every message is one line ending in a newline, whatever it holds: control
// characters in it are escaped (ao_escape) and a line past AO_LOG_LINE bytes
// is cut, ending in "...".
#define AO_LOG_LINE 1024
void ao_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ao_vlog(int level, const char *fmt, va_list ap);
// The same on another file descriptor (AOSHIM_VERBOSE's option listing).
void ao_log_fd(int fd, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Warn at most once per call site: `static int once; ao_warn_once(&once, ...)`.
void ao_warn_once(int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Write a whole preformatted line (adds nothing).
void ao_write_line(int fd, const char *buf, size_t len);

// --- process exit ---------------------------------------------------------------
// The real driver shuts itself down while the process exits, before the
// destructors of the libraries loaded ahead of it (this one among them run
// after its exit handler), and every call then answers
// CUDA_ERROR_DEINITIALIZED. A warning about that is noise a user should not
// see (an H200 showed one at the exit of 8 runs in 10): aoshim says nothing
// about its own calls failing so.
//
// Exit has begun: aoshim's destructor has started, or the driver said it is
// shutting down.
void ao_exit_begin(void);
bool ao_exiting(void);
// True for a CUDA error that only says the driver is gone because the process
// is exiting: CUDA_ERROR_DEINITIALIZED (the driver answers it only while it
// shuts down, so it marks the exit as begun too), or CUDA_ERROR_NOT_INITIALIZED
// once the exit has begun (earlier it is a real error). A call site skips its
// warning then: `if (!ao_cuda_gone_at_exit(r)) WARN_ONCE(...)`.
bool ao_cuda_gone_at_exit(int cuda_rc);

// The length of the valid UTF-8 sequence at s (at most n bytes): 1 to 4, or
// 0 for a byte that does not start one (overlong forms, surrogates and code
// points past U+10FFFF are not valid, as strict JSON readers hold).
size_t ao_utf8_seq(const char *s, size_t n);
// s (n bytes) as one printable line into out (size bytes, NUL-terminated):
// \n, \r, \t and \xHH for the other control characters (C0, DEL, and
// C1 = U+0080..U+009F as its two bytes) and for bytes that are not UTF-8;
// a backslash doubled when backslash is true (a value shown so that it can
// be read back exactly). What does not fit is cut at a character boundary
// and ends in "...". Returns the length written.
size_t ao_escape(char *out, size_t size, const char *s, size_t n, bool backslash);

#endif // AO_LOG_H
