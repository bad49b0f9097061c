// SPDX-License-Identifier: MIT
// What the simulator's tests share: the check on a driver call, the fixture
// that brings the simulated GPU up, and a child process whose stderr a test
// reads back. Header-only (static inline): each test program is one file.
#ifndef SIM_TEST_H
#define SIM_TEST_H

#include <criterion/criterion.h>
#include <cuda.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

// A driver call that must succeed: a failure names the call.
#define OK(x) cr_assert_eq((x), CUDA_SUCCESS, "%s", #x)

// The simulated driver up and device 0's primary context current on this
// thread, as a program's first driver calls make it; returns that context.
// A runtime call made afterwards finds it current and keeps it. Criterion runs
// each test in its own process: the SIM_* variables a test sets before this
// are the ones cuInit reads.
static inline CUcontext start(void)
{
    OK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    OK(cuDeviceGet(&dev, 0));
    OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    OK(cuCtxSetCurrent(ctx));
    return ctx;
}

// Runs fn in a forked child whose stderr goes to out (at most len - 1 bytes,
// NUL-terminated): for what the simulator prints on its way out (a bad SIM_*
// value, a fault, the exit line). Returns the child's exit status, or 128 +
// the signal that ended it.
//
// The child first closes every descriptor but the pipe's: criterion's own
// plumbing is inherited from the worker, and the child's exit handlers must
// not touch it. If fn returns, the child exits normally (exit(0)), so the
// simulator's destructor prints its exit line as at a program's end.
static inline int run_child_capture(void (*fn)(void), char *out, size_t len)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        for (int fd = 3; fd < 1024; fd++)
            if (fd != fds[1]) close(fd);
        dup2(fds[1], 2);
        close(fds[1]);
        fn();
        exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < len && (k = read(fds[0], out + n, len - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif // SIM_TEST_H
