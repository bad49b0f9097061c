// SPDX-License-Identifier: MIT
// Threads against the engine, for a bounded time, built to run under
// ThreadSanitizer (scripts/test.sh's TSan pass) as well as plainly.
//
//   stress_tsan [--threads N] [--seconds S] [--watchdog W]
//
// N threads (8 by default) run for S seconds (10), each on streams of its
// own, each iteration:
//  - a training step of its own layers, when it is its turn: the engine has
//    one open forward layer per process and a layer belongs to the thread
//    that began it, so the threads take the steps in turn (a round-robin
//    turn counter; the holder runs forward and backward of LAYERS layers,
//    step_end, then passes the turn on). Its buffers are tracked (allocated
//    inside its layers); layer l reads layer l-1's output; backward checks
//    every byte. Layer 0's buffer is published to the other threads for the
//    whole step.
//  - free-running work, whatever the turn: allocate, fill, launch over, check
//    and free buffers outside any layer (untracked, passed through); read the
//    published layer-0 buffer from its own stream, by a kernel (the launch
//    scan) or a device-to-device copy (the range check), ordered by events (a
//    read after its release point is a late reload), and check the bytes;
//    read the statistics.
// One more thread makes control calls only, with no CUDA call between them
// (so no lock of the simulator's orders it after the engine's start-up):
// aoshim_keep of a buffer aoshim passed through (a no-op: 0) and the
// statistics, while the engine starts and runs.
// A watchdog fails the run (exit 3) when a thread or the turn makes no
// progress for W seconds (10), also while the threads are being joined.
// Prints "stress_tsan ok=<0|1> threads=<n> steps=<n> iters=<n> late=<n>
// offloaded=<n> failures=<n>"; exit 1 on a wrong byte.
#define PROG "stress_tsan"
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aoshim.h"
#include "plus_one.h"

#define MAX_THREADS 64
#define LAYERS      6
#define N           (16u * 1024u) // floats per buffer: 64 KiB (the test sets AOSHIM_MIN_BYTES)

static int nthreads = 8;
static atomic_bool done;
static atomic_int failures;
static atomic_uint turn;                     // the thread whose step it is: turn % nthreads
static atomic_ullong steps;                  // steps completed
static atomic_ullong iters[MAX_THREADS + 1]; // per thread, then the control thread: iterations

// Layer 0's buffer of the step in progress (NULL between steps) and the
// value it holds, handed between threads under pub_mu. The GPU work is
// ordered by events, which the simulator's race checker sees (a mutex orders
// only the host threads): `filled` after the owner's fill, read_done[t]
// after thread t's last read, which the owner's free waits for.
static pthread_mutex_t pub_mu = PTHREAD_MUTEX_INITIALIZER;
static float *pub;
static float pub_base;
static cudaEvent_t filled, read_done[MAX_THREADS];

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void launch(const float *in, float *out, cudaStream_t s)
{
    unsigned n = N;
    void *args[] = {&in, &out, &n};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
}

// Every element i of the buffer: base + i % 101.
static void fill(float *dev, float base, cudaStream_t s)
{
    static _Thread_local float host[N];
    for (unsigned i = 0; i < N; i++)
        host[i] = base + (float)(i % 101);
    CHECK(cudaMemcpyAsync(dev, host, N * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s)); // host[] is reused by the next fill
}

static bool expect(const float *dev, float base, cudaStream_t s)
{
    static _Thread_local float back[N];
    CHECK(cudaMemcpyAsync(back, dev, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (unsigned i = 0; i < N; i++)
        if (back[i] != base + (float)(i % 101)) return false;
    return true;
}

// A control call: 0, or AOSHIM_ENOTLOADED when run without the shim.
#define CTL(x)                                                                                     \
    do {                                                                                           \
        int r_ = (x);                                                                              \
        if (r_ && r_ != AOSHIM_ENOTLOADED) {                                                       \
            fprintf(stderr, PROG ": %s returned %d\n", #x, r_);                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void fail(const char *what, int t)
{
    fprintf(stderr, PROG ": thread %d: wrong bytes in %s\n", t, what);
    atomic_fetch_add(&failures, 1);
}

// --- a training step of this thread's own layers (its turn) ----------------------------------
static void train_step(int t, cudaStream_t s, unsigned long long step)
{
    // Small integers: every value stays exact in a float.
    const float base = (float)(100 * (t + 1) + (int)(step % 50));
    float *buf[LAYERS];
    CTL(aoshim_try_set_stream(s));
    for (int l = 0; l < LAYERS; l++) {
        CTL(aoshim_try_layer_begin(l));
        CHECK(cudaMallocAsync((void **)&buf[l], N * sizeof(float), s));
        if (l == 0)
            fill(buf[0], base, s);
        else
            launch(buf[l - 1], buf[l], s); // reads layer l-1: tracked, maybe being copied out
        CTL(aoshim_try_layer_end(l));
        if (l == 0) {
            pthread_mutex_lock(&pub_mu);
            CHECK(cudaEventRecord(filled, s));
            pub = buf[0];
            pub_base = base;
            pthread_mutex_unlock(&pub_mu);
        }
    }
    for (int l = LAYERS - 1; l >= 0; l--) {
        CTL(aoshim_try_backward_begin(l));
        if (!expect(buf[l], base + (float)l, s)) fail("its own layer", t);
        if (l == 0) {
            pthread_mutex_lock(&pub_mu);
            pub = NULL;
            for (int i = 0; i < nthreads; i++) // every reader's last read
                CHECK(cudaStreamWaitEvent(s, read_done[i], 0));
            CHECK(cudaFreeAsync(buf[0], s));
            pthread_mutex_unlock(&pub_mu);
        } else {
            CHECK(cudaFreeAsync(buf[l], s));
        }
        CTL(aoshim_try_backward_end(l));
    }
    CTL(aoshim_try_step_end());
}

// --- free-running work --------------------------------------------------------------------
static void untracked(int t, cudaStream_t s, unsigned long long i)
{
    float *a, *b;
    const float base = (float)(t + (int)(i % 7));
    CHECK(cudaMallocAsync((void **)&a, N * sizeof(float), s));
    CHECK(cudaMallocAsync((void **)&b, N * sizeof(float), s));
    fill(a, base, s);
    launch(a, b, s);
    if (!expect(b, base + 1.0f, s)) fail("an untracked buffer", t);
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaFreeAsync(b, s));
}

// Another thread's layer 0, from this thread's stream: resident, being
// copied out, or offloaded (then reloaded for this use). By a kernel (the
// launch scan) or a device-to-device copy (the range check), in turn.
static void read_published(int t, cudaStream_t s, float *out, unsigned long long i)
{
    const bool by_kernel = i % 2 == 0;
    pthread_mutex_lock(&pub_mu); // the owner frees it only under this lock
    float *in = pub, base = pub_base;
    if (in) {
        CHECK(cudaStreamWaitEvent(s, filled, 0));
        if (by_kernel)
            launch(in, out, s);
        else
            CHECK(cudaMemcpyAsync(out, in, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
        CHECK(cudaEventRecord(read_done[t], s));
    }
    pthread_mutex_unlock(&pub_mu);
    if (in && !expect(out, base + (by_kernel ? 1.0f : 0.0f), s)) fail("a published layer", t);
}

static void *worker(void *arg)
{
    const int t = (int)(intptr_t)arg;
    cudaStream_t train, s;
    CHECK(cudaStreamCreateWithFlags(&train, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *out;
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    for (unsigned long long i = 0; !atomic_load(&done); i++) {
        unsigned tu = atomic_load(&turn);
        if (tu % (unsigned)nthreads == (unsigned)t) {
            train_step(t, train, tu / (unsigned)nthreads);
            atomic_fetch_add(&steps, 1);
            atomic_fetch_add(&turn, 1); // only the holder moves it on
        }
        untracked(t, s, i);
        read_published(t, s, out, i);
        aoshim_stats_t st = {.size = sizeof st};
        aoshim_try_get_stats(&st);
        atomic_fetch_add(&iters[t], 1);
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamSynchronize(train));
    CHECK(cudaFree(out));
    return NULL;
}

// --- control calls only ----------------------------------------------------------------------
static void *controller(void *arg)
{
    const void *untracked_buf = arg;
    while (!atomic_load(&done)) {
        CTL(aoshim_try_keep(untracked_buf));
        aoshim_stats_t st = {.size = sizeof st};
        CTL(aoshim_try_get_stats(&st));
        atomic_fetch_add(&iters[nthreads], 1);
        usleep(100);
    }
    return NULL;
}

// --- the watchdog: progress, or the run fails ---------------------------------------------
static double watchdog_s = 10;
static atomic_bool joined;

static void *watchdog(void *arg)
{
    (void)arg;
    unsigned long long last[MAX_THREADS + 1] = {0};
    unsigned last_turn = 0;
    double since[MAX_THREADS + 1], turn_since = now();
    for (int t = 0; t <= nthreads; t++)
        since[t] = turn_since;
    while (!atomic_load(&joined)) {
        usleep(50 * 1000);
        double n = now();
        unsigned tu = atomic_load(&turn);
        if (tu != last_turn) {
            last_turn = tu;
            turn_since = n;
        }
        bool stuck = n - turn_since > watchdog_s;
        for (int t = 0; t <= nthreads; t++) {
            unsigned long long it = atomic_load(&iters[t]);
            if (it != last[t]) {
                last[t] = it;
                since[t] = n;
            }
            // A thread that has left its loop (done) has nothing to count.
            if (n - since[t] > watchdog_s && !atomic_load(&done)) stuck = true;
        }
        if (atomic_load(&done) && n - turn_since > watchdog_s) stuck = true; // join hangs
        if (stuck) {
            fprintf(stderr,
                    PROG ": watchdog: no progress for %g s (turn %u, %s); iterations:", watchdog_s,
                    tu, atomic_load(&done) ? "joining" : "running");
            for (int t = 0; t <= nthreads; t++)
                fprintf(stderr, " %llu", last[t]);
            fprintf(stderr, "\n");
            _exit(3);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 10;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--threads"))
            nthreads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seconds"))
            seconds = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--watchdog"))
            watchdog_s = atof(argv[++i]);
        else {
            fprintf(stderr, PROG ": usage: " PROG " [--threads N] [--seconds S] [--watchdog W]\n");
            return 2;
        }
    }
    if (nthreads < 1 || nthreads > MAX_THREADS || !(seconds > 0) || !(watchdog_s > 0)) {
        fprintf(stderr, PROG ": --threads 1..%d, --seconds and --watchdog > 0\n", MAX_THREADS);
        return 2;
    }
    plus_one_register(2000);
    CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    for (int t = 0; t < nthreads; t++)
        CHECK(cudaEventCreateWithFlags(&read_done[t], cudaEventDisableTiming));
    float *kept; // allocated outside any layer: passed through
    CHECK(cudaMalloc((void **)&kept, N * sizeof(float)));
    pthread_t wd, th[MAX_THREADS + 1];
    pthread_create(&wd, NULL, watchdog, NULL);
    pthread_create(&th[nthreads], NULL, controller, kept);
    for (int t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    const double end = now() + seconds;
    while (now() < end)
        usleep(20 * 1000);
    atomic_store(&done, true);
    for (int t = 0; t <= nthreads; t++)
        pthread_join(th[t], NULL);
    atomic_store(&joined, true);
    pthread_join(wd, NULL);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(kept));

    unsigned long long it = 0;
    for (int t = 0; t < nthreads; t++)
        it += atomic_load(&iters[t]);
    aoshim_stats_t st = {.size = sizeof st};
    aoshim_try_get_stats(&st);
    int f = atomic_load(&failures);
    printf("stress_tsan ok=%d threads=%d steps=%llu iters=%llu late=%llu offloaded=%llu "
           "failures=%d\n",
           !f, nthreads, atomic_load(&steps), it, (unsigned long long)st.late_reloads,
           (unsigned long long)st.offloaded_bytes, f);
    return f ? 1 : 0;
}
