// SPDX-License-Identifier: MIT
// How a training process ends, under aoshim (test_life.c runs it):
//
//   life inflight          exit(0) mid-forward, offload copies in flight
//   life sigexit           the same, through a signal handler that calls exit(5)
//   life forever           train until killed (SIGTERM, default action)
//   life forever handler   the same, with a SIGTERM handler that calls exit(7);
//                          SIGTERM is taken between CUDA calls only, mid-forward,
//                          as an interpreter delivers it (Python runs its
//                          handlers between bytecodes, never inside a call)
//   life fork              fork() 200 times while another thread keeps taking
//                          aoshim's lock; each child uses aoshim's API, must
//                          find it passing through, and exits (exit(), so its
//                          destructors run)
//
// Prints "life pid=<pid>" first, "life ready" once a whole step has run, and
// a result line per mode. Kernels: plus_one over 1 MiB buffers, 6 layers.
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aoshim.h"

#define PROG "life"
#include "plus_one.h"

#define LAYERS 6
#define N      (256u * 1024u) // floats per buffer: 1 MiB

static cudaStream_t s;
static float *buf[LAYERS];
static sigset_t term;

static void launch(const float *in, float *out)
{
    unsigned n = N;
    void *args[] = {&in, &out, &n};
    const dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)plus_one, one, one, args, 0, s));
}

// Forward of layers first..last: each allocates its buffer inside its scope
// and computes it from the layer before.
static void forward(int first, int last, float *input)
{
    for (int l = first; l <= last; l++) {
        aoshim_try_layer_begin(l);
        CHECK(cudaMallocAsync((void **)&buf[l], N * sizeof(float), s));
        launch(l ? buf[l - 1] : input, buf[l]);
        aoshim_try_layer_end(l);
    }
}

static void backward(void)
{
    for (int l = LAYERS - 1; l >= 0; l--) {
        aoshim_try_backward_begin(l);
        launch(buf[l], buf[l]); // reads what forward saved (in place)
        CHECK(cudaFreeAsync(buf[l], s));
        aoshim_try_backward_end(l);
    }
    aoshim_try_step_end();
}

static void on_signal(int sig)
{
    // Not async-signal-safe, and what programs do anyway: the case under test.
    exit(sig == SIGUSR1 ? 5 : 7);
}

static void setup(float **input)
{
    plus_one_register(20000);
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    aoshim_try_set_stream(s);
    CHECK(cudaMalloc((void **)input, N * sizeof(float)));
    CHECK(cudaMemsetAsync(*input, 0, N * sizeof(float), s));
    // One whole step: aoshim knows the layer count from then on, and offloads
    // at each layer's release point.
    forward(0, LAYERS - 1, *input);
    backward();
    CHECK(cudaStreamSynchronize(s));
    printf("life ready\n");
    fflush(stdout);
}

// --- fork while another thread holds aoshim's lock ------------------------------------
static atomic_bool stop;

static void *boundaries(void *arg)
{
    (void)arg;
    // Control calls take aoshim's lock: a layer_begin/layer_end pair over and
    // over keeps it held a good share of the time.
    while (!atomic_load(&stop)) {
        aoshim_try_layer_begin(0);
        aoshim_try_layer_end(0);
        aoshim_try_step_end();
    }
    return NULL;
}

static int fork_mode(void)
{
    pthread_t t;
    pthread_create(&t, NULL, boundaries, NULL);
    int children = 200, hung = 0, disabled = 0, refused = 0;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            // The child passes everything through: the control API says
            // aoshim is off, and no report of its parent's is written.
            int a = aoshim_try_layer_begin(1), b = aoshim_try_layer_end(1);
            int r = aoshim_report_now ? aoshim_report_now() : AOSHIM_ESTATE;
            exit((a == AOSHIM_EDISABLED && b == AOSHIM_EDISABLED ? 0 : 1) |
                 (r == AOSHIM_ESTATE ? 0 : 2));
        }
        // A child that deadlocked on a lock copied in its held state never
        // exits: waited for 5 s at most, then killed and counted.
        int st = 0, waited = 0;
        pid_t w;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0 && waited < 5000) {
            nanosleep(&(struct timespec){0, 1000000}, NULL);
            waited++;
        }
        if (w == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            hung++;
            continue;
        }
        if (WIFEXITED(st) && !(WEXITSTATUS(st) & 1)) disabled++;
        if (WIFEXITED(st) && !(WEXITSTATUS(st) & 2)) refused++;
    }
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    printf("life fork children=%d hung=%d passed_through=%d no_report=%d\n", children, hung,
           disabled, refused);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    bool handler = argc > 2 && strcmp(argv[2], "handler") == 0;
    printf("life pid=%d\n", (int)getpid());
    fflush(stdout);
    bool forever = strcmp(mode, "forever") == 0;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (forever && handler) { // before "ready": the test signals as soon as it reads it
        signal(SIGTERM, on_signal);
        pthread_sigmask(SIG_BLOCK, &term, NULL);
    }
    float *input;
    setup(&input);
    if (strcmp(mode, "fork") == 0) return fork_mode();
    if (strcmp(mode, "inflight") == 0 || strcmp(mode, "sigexit") == 0) {
        signal(SIGUSR1, on_signal);
        // Forward up to layer 4: layers 0..3 have passed their release
        // points, their copies out are queued, nothing waits for them.
        forward(0, 4, input);
        printf("life exiting\n");
        fflush(stdout);
        if (strcmp(mode, "sigexit") == 0) raise(SIGUSR1);
        exit(0);
    }
    if (forever) {
        for (;;) {
            forward(0, 3, input);
            if (handler) { // a pending SIGTERM is taken here, copies in flight
                pthread_sigmask(SIG_UNBLOCK, &term, NULL);
                pthread_sigmask(SIG_BLOCK, &term, NULL);
            }
            forward(4, LAYERS - 1, input);
            backward();
        }
    }
    fprintf(stderr, "usage: life inflight|sigexit|forever [handler]|fork\n");
    return 2;
}
