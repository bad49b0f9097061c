// SPDX-License-Identifier: MIT
// Host implementations and registration of the training step's kernels.
#include "kernels.h"

#include <simgpu.h>
#include <stdlib.h>
#include <string.h>

// --- parameter layout --------------------------------------------------------
// Every kernel takes, in order: its output pointers, its input pointers, one
// uint64 byte count per output, one per input, a uint64 salt and a uint64
// FLOP count. The byte counts are what the access declarations point at, so
// the simulator checks exactly the ranges the body touches.
static int p_out(int i)
{
    return i;
}
static int p_in(int nout, int i)
{
    return nout + i;
}
static int p_out_n(int nout, int nin, int i)
{
    return nout + nin + i;
}
static int p_in_n(int nout, int nin, int i)
{
    return 2 * nout + nin + i;
}
static int p_salt(int nout, int nin)
{
    return 2 * (nout + nin);
}
static int p_flops(int nout, int nin)
{
    return 2 * (nout + nin) + 1;
}

// --- the body ----------------------------------------------------------------
// Sizes need not be multiples of 8 (a mask of s*b*h bytes, say): the last word
// of a buffer is read and written partially so nothing past the end is touched
// (the simulator would call that an out-of-range access, and a real GPU would
// corrupt a neighbour).
static uint64_t ld_word(const unsigned char *p, uint64_t bytes, uint64_t i)
{
    uint64_t w = 0;
    uint64_t off = i * 8;
    memcpy(&w, p + off, bytes - off < 8 ? bytes - off : 8);
    return w;
}

static void st_word(unsigned char *p, uint64_t bytes, uint64_t i, uint64_t w)
{
    uint64_t off = i * 8;
    memcpy(p + off, &w, bytes - off < 8 ? bytes - off : 8);
}

// out_o[j] (=|+=) F_o(inputs)[j], where F_o starts from a hash of (salt, o, j)
// and folds every word of every input into slot (i mod n_o) with
// acc = mix64(acc ^ x). mix64 is a bijection, so for a fixed history a changed
// input word always changes its slot, and later folds into that slot (also
// bijections of acc) keep it changed.
static void mix_body(void **args, int nout, int nin, unsigned accmask)
{
    uint64_t salt = *(uint64_t *)args[p_salt(nout, nin)];
    for (int o = 0; o < nout; o++) {
        unsigned char *out = *(unsigned char **)args[p_out(o)];
        uint64_t ob = *(uint64_t *)args[p_out_n(nout, nin, o)];
        uint64_t nw = (ob + 7) / 8;
        if (nw == 0) continue;
        uint64_t *acc = malloc(nw * sizeof *acc);
        if (!acc) abort(); // a test double: no way to report this as a CUDA error
        uint64_t base = ts_mix64(salt ^ ((uint64_t)(o + 1) << 56));
        for (uint64_t j = 0; j < nw; j++)
            acc[j] = ts_mix64(base + j);
        for (int x = 0; x < nin; x++) {
            const unsigned char *in = *(unsigned char **)args[p_in(nout, x)];
            uint64_t ib = *(uint64_t *)args[p_in_n(nout, nin, x)];
            uint64_t niw = (ib + 7) / 8;
            if (niw == 0) continue;
            uint64_t n = niw > nw ? niw : nw;
            uint64_t j = 0, k = 0;
            for (uint64_t i = 0; i < n; i++) {
                acc[j] = ts_mix64(acc[j] ^ ld_word(in, ib, k));
                if (++j == nw) j = 0;
                if (++k == niw) k = 0;
            }
        }
        if (accmask & (1u << o)) {
            for (uint64_t j = 0; j < nw; j++)
                st_word(out, ob, j, ld_word(out, ob, j) + acc[j]);
        } else {
            for (uint64_t j = 0; j < nw; j++)
                st_word(out, ob, j, acc[j]);
        }
        free(acc);
    }
}

#define TS_FN_(name, no, ni, acc)                                                                  \
    static void kfn_##name(void **args, const sim_launch_t *launch)                                \
    {                                                                                              \
        (void)launch;                                                                              \
        mix_body(args, no, ni, acc);                                                               \
    }
TS_KERNELS(TS_FN_)
#undef TS_FN_

// --- the table -------------------------------------------------------------------
typedef struct ts_kinfo_s {
    const char *name;
    sim_kernel_fn fn;
    int nout, nin;
    unsigned accmask;
} ts_kinfo_t;

static const ts_kinfo_t kinfo[TSK_COUNT] = {
#define TS_INFO_(name, no, ni, acc) {#name, kfn_##name, no, ni, acc},
    TS_KERNELS(TS_INFO_)
#undef TS_INFO_
};

// The host-side "stub" addresses cudaLaunchKernel is called with. One byte
// each in one array: distinct by construction (distinct functions with equal
// bodies could be folded into one address by the compiler's identical-code
// folding, and two kernels would then share a registration).
static const char kernel_symbol[TSK_COUNT];

// Launch cost of an element-wise kernel is modelled in the same FLOP currency
// as a GEMM; see train_step.c. Every kernel also pays a fixed launch-to-finish
// latency, as small kernels do on a real GPU.
#define TS_KERNEL_NS_FIXED 3000

const char *ts_kernel_name(ts_kernel_e k)
{
    return kinfo[k].name;
}
int ts_kernel_nout(ts_kernel_e k)
{
    return kinfo[k].nout;
}
int ts_kernel_nin(ts_kernel_e k)
{
    return kinfo[k].nin;
}

int ts_kernels_register(void)
{
    for (int k = 0; k < TSK_COUNT; k++) {
        const ts_kinfo_t *ki = &kinfo[k];
        sim_kernel_desc_t d;
        memset(&d, 0, sizeof d);
        d.name = ki->name;
        d.fn = ki->fn;
        d.nparams = 2 * (ki->nout + ki->nin) + 2;
        for (int p = 0; p < d.nparams; p++)
            d.param_size[p] = 8; // pointers and uint64 counts alike
        for (int o = 0; o < ki->nout; o++) {
            sim_access_t *a = &d.access[d.naccess++];
            a->param = p_out(o);
            a->mode = (ki->accmask & (1u << o)) ? SIM_RW : SIM_W;
            a->count_param = p_out_n(ki->nout, ki->nin, o);
            a->scale = 1;
        }
        for (int i = 0; i < ki->nin; i++) {
            sim_access_t *a = &d.access[d.naccess++];
            a->param = p_in(ki->nout, i);
            a->mode = SIM_R;
            a->count_param = p_in_n(ki->nout, ki->nin, i);
            a->scale = 1;
        }
        d.ns_fixed = TS_KERNEL_NS_FIXED;
        d.flops_param = p_flops(ki->nout, ki->nin);
        d.flops_scale = 1.0;
        int rc = simrtRegisterKernel(&kernel_symbol[k], &d);
        if (rc != 0) return rc;
    }
    return 0;
}

cudaError_t ts_launch(ts_kernel_e k, cudaStream_t stream, void *const *outs,
                      const uint64_t *out_bytes, void *const *ins, const uint64_t *in_bytes,
                      uint64_t salt, uint64_t flops)
{
    const ts_kinfo_t *ki = &kinfo[k];
    void *ptrs[TS_MAX_OUT + TS_MAX_IN];
    uint64_t sizes[TS_MAX_OUT + TS_MAX_IN];
    void *args[2 * (TS_MAX_OUT + TS_MAX_IN) + 2];
    int n = 0;
    for (int o = 0; o < ki->nout; o++)
        ptrs[n++] = outs[o];
    for (int i = 0; i < ki->nin; i++)
        ptrs[n++] = ins[i];
    n = 0;
    for (int o = 0; o < ki->nout; o++)
        sizes[n++] = out_bytes[o];
    for (int i = 0; i < ki->nin; i++)
        sizes[n++] = in_bytes[i];
    int nb = ki->nout + ki->nin;
    for (int i = 0; i < nb; i++) {
        args[i] = &ptrs[i];
        args[nb + i] = &sizes[i];
    }
    args[2 * nb] = &salt;
    args[2 * nb + 1] = &flops;
    dim3 grid = {1, 1, 1}, block = {256, 1, 1};
    return cudaLaunchKernel(&kernel_symbol[k], grid, block, args, 0, stream);
}
