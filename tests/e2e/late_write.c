// SPDX-License-Identifier: MIT
// Writes to a layer's buffer after its layer_end (a fused residual update of
// the previous layer's output, an in-place set), at random points of the
// forward, must never be lost: backward reads back every layer's buffer and
// checks it byte for byte against what the program wrote last.
//
//   late_write [--seed N] [--runs N] [--threads 1|2]
//
// Each run: LAYERS layers forward; layer l allocates its output and computes
// it from layer l-1's; at seeded random points (right after layer_end(l),
// inside layer l+1, or several layers later) an in-place kernel or a memset
// rewrites an earlier layer's output, on the compute stream or (--threads 2)
// from a second thread on its own stream, ordered by an event as a program
// must. Then backward checks every layer, last first. Prints "late_write
// ok=<0|1> runs=<n> writes=<n>"; exit 1 on a wrong byte.
#define PROG "late_write"
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "plus_one.h"

#define LAYERS 8
#define BYTES  (2u << 20)
#define N      (BYTES / sizeof(float))

static float *act[LAYERS];
static float want[LAYERS]; // every element of layer l's output: one value
static float *host;
static cudaStream_t side;
static unsigned long long rng;
static int writes;

static unsigned rnd(unsigned n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(rng >> 33) % n;
}

static void launch(const float *in, float *out, cudaStream_t s)
{
    unsigned n = N;
    void *args[] = {&in, &out, &n};
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
}

// Rewrite layer l's output in place: +1 by kernel, or set to a new value.
static void rewrite_on(int l, cudaStream_t s)
{
    if (rnd(2)) {
        launch(act[l], act[l], s);
        want[l] += 1.0f;
    } else {
        int byte = 0x40 + (int)rnd(8); // every float becomes 0x4n4n4n4n: exact, about 3 to 4
        uint32_t bits = 0x01010101u * (uint32_t)byte;
        CHECK(cudaMemsetAsync(act[l], byte, BYTES, s));
        memcpy(&want[l], &bits, sizeof bits);
    }
    writes++;
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int layer; // -1: nothing to do; -2: stop
    bool done;
} job = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, false};
static cudaEvent_t ev_ready, ev_written;

// The second thread: waits on the GPU for the compute stream, rewrites, and
// the compute stream waits for it (a correctly ordered program).
static void *writer(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&job.mu);
    for (;;) {
        while (job.layer == -1)
            pthread_cond_wait(&job.cv, &job.mu);
        if (job.layer == -2) break;
        CHECK(cudaStreamWaitEvent(side, ev_ready, 0));
        rewrite_on(job.layer, side);
        CHECK(cudaEventRecord(ev_written, side));
        job.layer = -1;
        job.done = true;
        pthread_cond_broadcast(&job.cv);
    }
    pthread_mutex_unlock(&job.mu);
    return NULL;
}

static bool two_threads;

static void rewrite(int l)
{
    if (!two_threads) {
        rewrite_on(l, 0);
        return;
    }
    CHECK(cudaEventRecord(ev_ready, 0));
    pthread_mutex_lock(&job.mu);
    job.layer = l;
    job.done = false;
    pthread_cond_broadcast(&job.cv);
    while (!job.done)
        pthread_cond_wait(&job.cv, &job.mu);
    pthread_mutex_unlock(&job.mu);
    CHECK(cudaStreamWaitEvent(0, ev_written, 0));
}

// Maybe rewrite some earlier layer's output (before layer `now` runs).
static void maybe_rewrite(int now)
{
    if (now == 0 || rnd(3)) return;
    rewrite(now - 1 - (int)rnd((unsigned)(now < 3 ? now : 3)));
}

static bool run(void)
{
    for (int l = 0; l < LAYERS; l++) {
        maybe_rewrite(l);
        aoshim_try_layer_begin(l);
        maybe_rewrite(l); // inside the next layer
        CHECK(cudaMallocAsync((void **)&act[l], BYTES, 0));
        if (l == 0) {
            for (size_t i = 0; i < N; i++)
                host[i] = 1.0f;
            CHECK(cudaMemcpyAsync(act[0], host, BYTES, cudaMemcpyHostToDevice, 0));
            want[0] = 1.0f;
        } else {
            launch(act[l - 1], act[l], 0);
            want[l] = want[l - 1] + 1.0f;
        }
        aoshim_try_layer_end(l);
    }
    bool ok = true;
    for (int l = LAYERS - 1; l >= 0; l--) {
        aoshim_try_backward_begin(l);
        CHECK(cudaMemcpyAsync(host, act[l], BYTES, cudaMemcpyDeviceToHost, 0));
        CHECK(cudaStreamSynchronize(0));
        for (size_t i = 0; i < N; i++)
            if (host[i] != want[l]) {
                fprintf(stderr, PROG ": WRONG layer %d element %zu: %g, want %g\n", l, i,
                        (double)host[i], (double)want[l]);
                ok = false;
                break;
            }
        CHECK(cudaFreeAsync(act[l], 0));
        aoshim_try_backward_end(l);
    }
    aoshim_try_step_end();
    return ok;
}

int main(int argc, char **argv)
{
    unsigned long long seed = 1;
    int runs = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            two_threads = atoi(argv[i + 1]) == 2;
        else {
            fprintf(stderr, PROG ": unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    plus_one_register(20000); // a layer's compute: 20 us, shorter than its copy out
    CHECK(cudaMallocHost((void **)&host, BYTES));
    pthread_t t;
    if (two_threads) {
        CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&ev_ready, cudaEventDisableTiming));
        CHECK(cudaEventCreateWithFlags(&ev_written, cudaEventDisableTiming));
        pthread_create(&t, NULL, writer, NULL);
    }
    bool ok = true;
    for (int r = 0; r < runs; r++) {
        rng = seed * 1000003ull + (unsigned long long)r;
        ok &= run();
    }
    if (two_threads) {
        pthread_mutex_lock(&job.mu);
        job.layer = -2;
        pthread_cond_broadcast(&job.cv);
        pthread_mutex_unlock(&job.mu);
        pthread_join(t, NULL);
    }
    printf("late_write ok=%d runs=%d writes=%d\n", ok, runs, writes);
    return ok ? 0 : 1;
}
