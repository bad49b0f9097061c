// SPDX-License-Identifier: MIT
// A library that reaches the driver the way a library with a static CUDA
// runtime does (cuBLAS, cuDNN, NCCL): it links no CUDA library, opens
// libcuda.so.1 itself and finds its entry points with dlsym and
// cuGetProcAddress. aoshim must still see its launches.
#include <cuda.h>
#include <dlfcn.h>

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *driver(void)
{
    static void *h;
    if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return h;
}

// via_gpa: look cuLaunchKernel up through cuGetProcAddress_v2 (itself found
// with dlsym); else with dlsym directly.
__attribute__((visibility("default"))) int static_rt_launch(int via_gpa, CUfunction f,
                                                            void **args, CUstream s)
{
    void *h = driver();
    if (!h) return -1;
    launch_fn launch = NULL;
    if (via_gpa) {
        gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
        CUdriverProcAddressQueryResult q;
        if (!gpa || gpa("cuLaunchKernel", (void **)&launch, 12000, 0, &q) != CUDA_SUCCESS) return -2;
    } else {
        launch = (launch_fn)dlsym(h, "cuLaunchKernel");
    }
    if (!launch) return -3;
    return (int)launch(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}
