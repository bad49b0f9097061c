// SPDX-License-Identifier: MIT
// An nvcc-built program (nvcc_prog.cu, CUDA 13, -cudart shared) on the
// simulated runtime: its <<<>>> launches reach the simulator through the
// generated host stubs, its bytes are right, the simulator (not the program)
// counted its launches, and a launch on a freed buffer faults.
//
// meson builds the program when it finds nvcc and passes its path in
// NVCC_PROG / NVCC_PROG_PTDS; without nvcc meson runs skip77.c in this
// test's place (exit 77: skipped), and run by hand without the variables
// each test here skips.
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct run_s {
    int status; // exit status, or 128 + signal
    char out[4096], err[8192];
} run_t;

static void slurp(int fd, char *buf, size_t len)
{
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
}

// Run prog [arg] with the simulator's exit line on (SIM_QUIET=0), capturing
// stdout and stderr in temporary files (no pipe can fill up and block).
static void run(const char *prog, const char *arg, run_t *r)
{
    if (!prog) cr_skip_test("nvcc_prog not built (no nvcc)");
    char o[] = "/tmp/simnvcc.outXXXXXX", e[] = "/tmp/simnvcc.errXXXXXX";
    int fo = mkstemp(o), fe = mkstemp(e);
    cr_assert(fo >= 0 && fe >= 0);
    unlink(o);
    unlink(e);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        setenv("SIM_QUIET", "0", 1);
        execl(prog, prog, arg, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    cr_assert(waitpid(pid, &st, 0) == pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(fo, r->out, sizeof r->out);
    slurp(fe, r->err, sizeof r->err);
}

// The simulator's own count, from its exit line on stderr.
static long exit_line_launches(const char *err)
{
    const char *p = strstr(err, "simgpu: peak_device_bytes=");
    if (!p) return -1;
    p = strstr(p, " launches=");
    return p ? strtol(p + 10, NULL, 10) : -1;
}

static long expected_sum(void)
{
    long s = 0;
    for (int i = 0; i < 1000; i++)
        s += 3 * (i % 17) + 2 * (i % 5);
    return s;
}

static void check_ok(const char *prog)
{
    run_t r;
    run(prog, NULL, &r);
    cr_assert_eq(r.status, 0, "status %d\nstdout: %s\nstderr: %s", r.status, r.out, r.err);
    char want[512];
    // 2 launches ran; the kernel with no implementation failed with
    // cudaErrorInvalidDeviceFunction (98); the runtime in use is the
    // simulator's, resolved through the rpath / LD_LIBRARY_PATH.
    snprintf(want, sizeof want, "nvcc_prog: ok sum=%ld launches=2 missing=98 libcudart=%s/",
             expected_sum(), getenv("SIM_DIR"));
    cr_assert(strstr(r.out, want), "want '%s' in: %s", want, r.out);
    cr_assert_eq(exit_line_launches(r.err), 2, "stderr: %s", r.err);
    cr_assert(strstr(r.err, " races=0 faults=0 "), "stderr: %s", r.err);
}

static bool file_has(const char *path, const char *needle)
{
    int fd = open(path, O_RDONLY);
    cr_assert(fd >= 0);
    struct stat sb;
    cr_assert(fstat(fd, &sb) == 0);
    char *buf = malloc((size_t)sb.st_size);
    cr_assert(buf);
    cr_assert_eq(read(fd, buf, (size_t)sb.st_size), sb.st_size);
    close(fd);
    bool hit = memmem(buf, (size_t)sb.st_size, needle, strlen(needle)) != NULL;
    free(buf);
    return hit;
}

Test(nvcc, stub_launches_run_on_the_simulator)
{
    const char *prog = getenv("NVCC_PROG");
    if (!prog) cr_skip_test("nvcc_prog not built (no nvcc)");
    // The program's imports are the CUDA 13 host-stub ABI, not cudaLaunchKernel.
    cr_assert(file_has(prog, "__cudaLaunchKernel"));
    cr_assert(file_has(prog, "__cudaGetKernel"));
    cr_assert(!file_has(prog, "__cudaLaunchKernel_ptsz"));
    check_ok(prog);
}

Test(nvcc, per_thread_default_stream_stubs)
{
    const char *prog = getenv("NVCC_PROG_PTDS");
    if (!prog) cr_skip_test("nvcc_prog not built (no nvcc)");
    cr_assert(file_has(prog, "__cudaLaunchKernel_ptsz"));
    check_ok(prog);
}

Test(nvcc, launch_on_freed_buffer_faults)
{
    run_t r;
    run(getenv("NVCC_PROG"), "fault", &r);
    cr_assert_eq(r.status, 86, "status %d\nstdout: %s\nstderr: %s", r.status, r.out, r.err);
    cr_assert(strstr(r.err, "FAULT: kernel kernel=_Z5scalePffi"), "stderr: %s", r.err);
    cr_assert(strstr(r.err, "freed"), "stderr: %s", r.err);
}
