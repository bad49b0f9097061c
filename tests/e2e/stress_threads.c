// SPDX-License-Identifier: MIT
// Threads against the engine. The main thread trains: layers allocate and
// fill buffers, aoshim offloads them and brings them back for backward,
// which checks every byte. Meanwhile:
//  - two threads allocate, fill, check and free their own buffers outside
//    any layer (pass-through) on their own streams, as fast as they can;
//  - one thread reads layer 0's buffer of the current step from its own
//    stream (outside the schedule: each read may be a late reload, waited
//    for on its stream), and checks the bytes.
// Prints "stress ok=<0|1> steps=<n> late=<n>". Run under LD_PRELOAD with
// AOSHIM_OFFLOAD_LAYERS=4 and the simulator (races are counted there).
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aoshim.h"
#include "simgpu.h"

#define LAYERS 6
#define STEPS 6
#define N (256u * 1024u) // floats per buffer: 1 MiB
#define PROG "stress_threads"
#include "plus_one.h"

static atomic_bool done;
static atomic_int failures;
// Layer 0's buffer this step (NULL outside forward..backward), handed between
// threads under a mutex. The GPU work is ordered by events, which the
// simulator's race checker sees (a mutex orders only the host threads).
static float *layer0;
static cudaEvent_t filled, read_done; // main: after the fill; reader: after its read
static pthread_mutex_t layer0_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int reads; // the reader's reads of layer 0 so far

static void launch(const float *in, float *out, cudaStream_t s)
{
    unsigned n = N;
    void *args[] = {&in, &out, &n};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
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

static void fill(float *dev, float base, cudaStream_t s)
{
    static _Thread_local float host[N];
    for (unsigned i = 0; i < N; i++) host[i] = base + (float)(i % 101);
    CHECK(cudaMemcpyAsync(dev, host, N * sizeof(float), cudaMemcpyHostToDevice, s));
}

// Pass-through traffic on its own stream.
static void *churn(void *arg)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; !atomic_load(&done); i++) {
        float *a, *b;
        CHECK(cudaMallocAsync((void **)&a, N * sizeof(float), s));
        CHECK(cudaMallocAsync((void **)&b, N * sizeof(float), s));
        fill(a, (float)(i % 7) + (float)(intptr_t)arg, s);
        launch(a, b, s);
        if (!expect(b, (float)(i % 7) + (float)(intptr_t)arg + 1.0f, s)) atomic_fetch_add(&failures, 1);
        CHECK(cudaFreeAsync(a, s));
        CHECK(cudaFreeAsync(b, s));
    }
    CHECK(cudaStreamSynchronize(s));
    return NULL;
}

// Reads layer 0's buffer from another stream while it may be away.
static void *reader(void *arg)
{
    (void)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *out;
    CHECK(cudaMalloc((void **)&out, N * sizeof(float)));
    while (!atomic_load(&done)) {
        pthread_mutex_lock(&layer0_mu); // the main thread frees it only under this lock
        float *in = layer0;
        if (in) {
            CHECK(cudaStreamWaitEvent(s, filled, 0));
            launch(in, out, s);
            CHECK(cudaEventRecord(read_done, s));
            CHECK(cudaStreamSynchronize(s));
            atomic_fetch_add(&reads, 1);
        }
        pthread_mutex_unlock(&layer0_mu);
        if (in && !expect(out, 1000.0f + 1.0f, s)) atomic_fetch_add(&failures, 1);
    }
    CHECK(cudaFree(out));
    return NULL;
}

int main(void)
{
    plus_one_register(20000);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming));
    aoshim_try_set_stream(s);
    pthread_t t[3];
    pthread_create(&t[0], NULL, churn, (void *)(intptr_t)10);
    pthread_create(&t[1], NULL, churn, (void *)(intptr_t)20);
    pthread_create(&t[2], NULL, reader, NULL);
    int ok = 1, steps = 0;
    for (int step = 0; step < STEPS; step++, steps++) {
        float *buf[LAYERS];
        for (int l = 0; l < LAYERS; l++) {
            aoshim_try_layer_begin(l);
            CHECK(cudaMallocAsync((void **)&buf[l], N * sizeof(float), s));
            fill(buf[l], l == 0 ? 1000.0f : (float)(100 * l + step), s);
            aoshim_try_layer_end(l);
            if (l == 0) {
                pthread_mutex_lock(&layer0_mu);
                CHECK(cudaEventRecord(filled, s));
                layer0 = buf[0];
                pthread_mutex_unlock(&layer0_mu);
            }
        }
        CHECK(cudaStreamSynchronize(s));
        if (step == 0) {
            // One read at least starts after the forward, layer 0 past its
            // release point: a late reload every run, not only when the
            // threads' timing gives one (the fault matrix compares the
            // warnings of each run with a clean run's). Bounded: 10 s.
            int r0 = atomic_load(&reads);
            for (int i = 0; i < 100000 && atomic_load(&reads) < r0 + 2; i++)
                nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        }
        for (int l = LAYERS - 1; l >= 0; l--) {
            aoshim_try_backward_begin(l);
            float base = l == 0 ? 1000.0f : (float)(100 * l + step);
            if (!expect(buf[l], base, s)) ok = 0;
            if (l == 0) {
                pthread_mutex_lock(&layer0_mu);
                layer0 = NULL;
                CHECK(cudaStreamWaitEvent(s, read_done, 0)); // the reader's last read
                CHECK(cudaFreeAsync(buf[l], s));
                pthread_mutex_unlock(&layer0_mu);
            } else {
                CHECK(cudaFreeAsync(buf[l], s));
            }
            aoshim_try_backward_end(l);
        }
        aoshim_try_step_end();
    }
    atomic_store(&done, true);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    CHECK(cudaDeviceSynchronize());
    aoshim_stats_t st = {.size = sizeof st};
    aoshim_try_get_stats(&st);
    printf("stress ok=%d steps=%d late=%llu failures=%d offloaded=%llu\n",
           ok && !atomic_load(&failures), steps, (unsigned long long)st.late_reloads,
           atomic_load(&failures), (unsigned long long)st.offloaded_bytes);
    return 0;
}
