// SPDX-License-Identifier: MIT
// train_step: a transformer-shaped training step on the CUDA runtime API.
//
// The program aoshim is measured with. It allocates exactly what a pre-LN
// transformer block saves for backward (Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models", section 4.1: per layer
// s*b*h*(34 + 5*a*s/h) bytes in 16-bit), one allocation per saved tensor, plus
// the temporaries a real framework allocates and frees inside the layer; runs
// deterministic kernels on one compute stream; and prints a checksum of every
// gradient, so that a run under LD_PRELOAD=libaoshim.so can be compared bit
// for bit with a run without it.
//
// Exit status: 0 ok, 1 a CUDA call failed (status=error), 2 bad command line,
// 3 device memory ran out (status=oom). The last line of stdout is always one
// machine-readable "train_step status=..." line.
#include "kernels.h"

#include <aoshim.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <simgpu.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// --- configuration -----------------------------------------------------------
typedef struct cfg_s {
    int layers, hidden, heads, seq, batch, steps, microbatches, stages;
    bool one_f_one_b, skip, fused, nodata, use_async;
    // --pytorch: what a PyTorch step under bf16 autocast with AdamW adds to
    // the shape: fp32 master weights cast to 16 bits inside each block (the
    // casts are saved for backward, as autocast's are), gradients allocated
    // by the backward and freed before the next (zero_grad(set_to_none)),
    // Adam's two fp32 states, and the optimizer's multi-tensor transient (one
    // fp32 temporary per weight, all alive at once), which can hold the
    // step's peak. Each block's backward reads the previous block's output
    // (the residual stream) in every mode.
    bool pytorch;
    uint64_t seed;
    const char *capacity, *profile;
    bool *ckpt;  // per layer: recompute in backward instead of saving
    bool *nobwd; // per layer: no aoshim_backward_begin/end (an incomplete schedule)
    // --te-schedule K: TransformerEngine's default CPU-offload schedule through
    // aoshim's manual schedule (as aoshim.torch.get_cpu_offload_context runs
    // it): layers 0..K-1 offloaded, layer j reloaded when the backward of
    // j + layers-1-K begins. -1: aoshim's own schedule.
    int te;
    // --seq-from STEP:SEQ: the sequence length is SEQ from step STEP on
    // (counted from 1; 0: never), as a curriculum or a new data set changes it.
    int seq_step, seq_to;
} cfg_t;

static cfg_t cfg = {
    .layers = 8,
    .hidden = 512,
    .heads = 8,
    .seq = 256,
    .batch = 2,
    .steps = 2,
    .microbatches = 1,
    .stages = 2,
    .use_async = true,
    .seed = 1,
    .te = -1,
};

// Element-wise kernels are memory-bound; their cost is expressed in the same
// FLOP currency as the GEMMs so one cost model covers both: an H100 SXM does
// about 990 dense 16-bit TFLOP/s against 3.35 TB/s of HBM, ~300 FLOP per byte.
#define EW_FLOPS_PER_BYTE 300

// --- state -------------------------------------------------------------------
typedef struct buf_s {
    void *p;
    uint64_t n;
    bool temp; // allocated inside a layer and not saved for backward
} buf_t;

// What one layer saves for backward (Korthikanti et al. table: attention
// 11sbh + 5as^2b, MLP 19sbh, two LayerNorm inputs 4sbh). The LayerNorm-1 input
// of layer L is the output of layer L-1, so each layer owns its own output
// (2sbh) as the next layer's saved input; layer 0's input is the embedding.
#define SAVED(X)                                                                                   \
    X(LN1_OUT, ln1_out)                                                                            \
    X(LN1_STATS, ln1_stats)                                                                        \
    X(Q, q)                                                                                        \
    X(K, k)                                                                                        \
    X(V, v)                                                                                        \
    X(SOFTMAX, softmax_out)                                                                        \
    X(PROBS_MASK, attn_dropout_mask)                                                               \
    X(PROBS_DROP, attn_dropout_out)                                                                \
    X(LSE, softmax_lse)                                                                            \
    X(CTX, attn_ctx)                                                                               \
    X(ATTN_MASK, proj_dropout_mask)                                                                \
    X(RESID1, resid1)                                                                              \
    X(LN2_OUT, ln2_out)                                                                            \
    X(LN2_STATS, ln2_stats)                                                                        \
    X(FC1_OUT, fc1_out)                                                                            \
    X(GELU_OUT, gelu_out)                                                                          \
    X(MLP_MASK, mlp_dropout_mask)                                                                  \
    X(OUT, layer_out)

enum {
#define SV_ENUM_(id, name) SV_##id,
    SAVED(SV_ENUM_)
#undef SV_ENUM_
        SV_COUNT
};
static const char *const sv_name[SV_COUNT] = {
#define SV_NAME_(id, name) #name,
    SAVED(SV_NAME_)
#undef SV_NAME_
};

enum { W_LN1, W_QKV, W_O, W_LN2, W_FC1, W_FC2, W_COUNT };
static const char *const w_name[W_COUNT] = {"ln1_w", "w_qkv", "w_o", "ln2_w", "w_fc1", "w_fc2"};

typedef struct acts_s {
    buf_t b[SV_COUNT];
    buf_t cast[W_COUNT]; // --pytorch: 16-bit casts of the matrix weights, saved for backward
} acts_t;

static cudaStream_t stream;
static bool nodata;
static int cur_step;
static int cur_seq;            // the sequence length of this step (--seq, then --seq-from)
static acts_t *acts;           // [layer * microbatches + mb]
static buf_t *weights;         // [layer * W_COUNT + w]
static buf_t *grads;           // same shape as weights (--pytorch: allocated by the backward)
static buf_t *adam_m, *adam_v; // --pytorch: Adam's states, fp32, the weights' shape
static uint64_t *grad_bytes;   // [layer * W_COUNT + w]: a gradient's size
static buf_t *embed;           // [mb]: the input of layer 0
static buf_t *dloss;           // [mb]: gradient of the loss w.r.t. the last output
static buf_t *dnext;           // [mb]: gradient flowing from layer L+1 down to L
static buf_t *dskip;           // [mb]: gradient of the long skip connection
static buf_t d_input;          // gradient w.r.t. the input, summed over microbatches
static uint64_t *act_bytes;    // [layer]: saved bytes of (layer, mb 0) in step 0
static uint64_t static_bytes;
// Temporaries: allocated inside a layer (forward or backward) and not saved
// for backward; the most alive at once bounds what a layer needs beyond its
// saved activations.
static uint64_t temp_live, temp_peak;
static bool allocating_saved;
static uint64_t size_hash = 0x6a09e667f3bcc908ULL; // sizes and FLOPs, in order

static acts_t *A(int layer, int mb)
{
    return &acts[(size_t)layer * (size_t)cfg.microbatches + (size_t)mb];
}

// --- error exits -------------------------------------------------------------
static void die_cuda(const char *call, cudaError_t e)
{
    fflush(stdout);
    printf("train_step status=error call=%s error=%s\n", call, cudaGetErrorName(e));
    exit(1);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) die_cuda(#call, e_);                                                \
    } while (0)

// Every live device allocation, so that an out-of-memory exit can give all of
// it back (the simulator then reports current bytes 0 and a test can see the
// workload leaked nothing even on its failure path). Its bytes are the
// program's own count of what it holds: alloc_peak is the most at once (the
// step's, set back at each step's start, and the run's). The device's count
// (peak_device_bytes) is more: a stream-ordered pool keeps what is freed
// until a synchronisation, so its reserve at the peak holds freed
// temporaries too. Arithmetic over allocations (k layers of T bytes) is
// checked against this one.
typedef struct live_s {
    void *p;
    uint64_t n;
} live_t;
static live_t *live;
static size_t nlive, caplive;
static uint64_t live_bytes, alloc_peak, run_alloc_peak;

static void live_add(void *p, uint64_t n)
{
    if (nlive == caplive) {
        caplive = caplive ? caplive * 2 : 256;
        live = realloc(live, caplive * sizeof *live);
        if (!live) abort();
    }
    live[nlive++] = (live_t){p, n};
    if ((live_bytes += n) > alloc_peak) alloc_peak = live_bytes;
}

static void live_del(void *p)
{
    for (size_t i = nlive; i-- > 0;) {
        if (live[i].p == p) {
            live_bytes -= live[i].n;
            live[i] = live[--nlive];
            return;
        }
    }
    fprintf(stderr, "train_step: internal error: freeing unknown pointer %p\n", p);
    abort();
}

static uint64_t stat_peak(sim_stats_t *st)
{
    memset(st, 0, sizeof *st);
    if (simrtGetStats(st) != 0) return 0;
    return st->peak_device_bytes;
}

static void oom_exit(const char *name, int layer, int mb, uint64_t bytes)
{
    // Free what can be freed: drain the stream first so no queued kernel
    // still uses a buffer we give back.
    (void)cudaStreamSynchronize(stream);
    for (size_t i = 0; i < nlive; i++) {
        if (cfg.use_async)
            (void)cudaFreeAsync(live[i].p, stream);
        else
            (void)cudaFree(live[i].p);
    }
    nlive = 0;
    live_bytes = 0;
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError(); // the failed allocation's error is not sticky
    sim_stats_t st;
    uint64_t peak = stat_peak(&st);
    char where[64];
    if (layer < 0)
        snprintf(where, sizeof where, "static");
    else
        snprintf(where, sizeof where, "layer%d.mb%d", layer, mb);
    fflush(stdout);
    printf("train_step status=oom failed=%s@%s step=%d bytes=%" PRIu64 " peak_device_bytes=%" PRIu64
           " capacity_bytes=%" PRIu64 " races=%" PRIu64 "\n",
           name, where, cur_step, bytes, peak, st.capacity_bytes, st.races);
    exit(3);
}

// --- device memory ---------------------------------------------------------------
// layer < 0: a static allocation (weights, gradients, inputs).
static void dalloc(buf_t *b, uint64_t n, const char *name, int layer, int mb)
{
    void *p = NULL;
    cudaError_t e = cfg.use_async ? cudaMallocAsync(&p, n, stream) : cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) oom_exit(name, layer, mb, n);
    if (e != cudaSuccess) die_cuda(cfg.use_async ? "cudaMallocAsync" : "cudaMalloc", e);
    live_add(p, n);
    b->p = p;
    b->n = n;
    size_hash = ts_mix64(size_hash ^ n);
    if (layer < 0) static_bytes += n;
    b->temp = layer >= 0 && !allocating_saved;
    if (b->temp && (temp_live += n) > temp_peak) temp_peak = temp_live;
}

static void dfree(buf_t *b)
{
    if (!b->p) return;
    live_del(b->p);
    if (b->temp) temp_live -= b->n;
    if (cfg.use_async)
        CK(cudaFreeAsync(b->p, stream));
    else
        CK(cudaFree(b->p));
    b->p = NULL;
    b->n = 0;
}

// --- kernels -------------------------------------------------------------------
static uint64_t str_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

// A site is (what, layer, microbatch, step): the same kernel gives different
// values at different sites, as dropout's random masks and distinct weights
// do. Never an address or a time: results must not depend on the allocator
// or on the order in which microbatches run.
static uint64_t site_salt(const char *what, int layer, int mb, int step)
{
    return ts_mix64(str_hash(what) ^ ts_mix64(((uint64_t)(layer + 1) << 40) ^
                                              ((uint64_t)(mb + 1) << 20) ^ (uint64_t)step));
}

static void launch(ts_kernel_e k, const char *what, int layer, int mb, uint64_t flops,
                   buf_t *const *outs, buf_t *const *ins)
{
    void *op[TS_MAX_OUT], *ip[TS_MAX_IN];
    uint64_t on[TS_MAX_OUT], in[TS_MAX_IN];
    uint64_t bytes = 0;
    int no = ts_kernel_nout(k), ni = ts_kernel_nin(k);
    for (int i = 0; i < no; i++) {
        op[i] = outs[i]->p;
        on[i] = outs[i]->n;
        bytes += on[i];
    }
    for (int i = 0; i < ni; i++) {
        ip[i] = ins[i]->p;
        in[i] = ins[i]->n;
        bytes += in[i];
    }
    if (flops == 0) flops = bytes * EW_FLOPS_PER_BYTE;
    size_hash = ts_mix64(size_hash ^ ((uint64_t)k << 56) ^ flops);
    cudaError_t e =
        ts_launch(k, stream, op, on, ip, in, site_salt(what, layer, mb, cur_step), flops);
    if (e != cudaSuccess) {
        char call[96];
        snprintf(call, sizeof call, "cudaLaunchKernel(%s)", ts_kernel_name(k));
        die_cuda(call, e);
    }
}

#define OUTS(...) ((buf_t *const[]){__VA_ARGS__})
#define INS(...)  ((buf_t *const[]){__VA_ARGS__})

// --- the control API ---------------------------------------------------------------
// Without the shim every call answers AOSHIM_ENOTLOADED; with it, anything
// else but success is worth a line (a schedule the shim rejects), but never a
// reason to stop: the run must stay comparable with the shim's absence.
static void ao(int rc, const char *call, int arg)
{
    static int warned;
    if (rc == AOSHIM_OK || rc == AOSHIM_ENOTLOADED) return;
    if (warned++ < 10) fprintf(stderr, "train_step: warning: %s(%d) returned %d\n", call, arg, rc);
}

// --- forward ---------------------------------------------------------------------
// recompute: the forward re-run inside backward for a checkpointed layer; it
// saves everything again (backward is about to read it) but not the output,
// which the next layer already consumed.
static void fwd_layer(int L, int mb, bool recompute)
{
    const uint64_t s = cur_seq, b = cfg.batch, h = cfg.hidden, a = cfg.heads;
    const uint64_t sbh = s * b * h, as2b = a * s * s * b;
    acts_t *x_acts = A(L, mb);
    buf_t *sv = x_acts->b;
    buf_t *w = &weights[(size_t)L * W_COUNT];
    buf_t *x = L == 0 ? &embed[mb] : &A(L - 1, mb)->b[SV_OUT];
    const bool keep = recompute || !cfg.ckpt[L];
    // Counted: what survives this forward until backward (for a checkpointed
    // layer only its output), as first allocated (step 0, microbatch 0).
    const bool count = !recompute && cur_step == 0 && mb == 0;
    buf_t out_tmp = {0}, tmp1 = {0};
    buf_t *out = recompute ? &out_tmp : &sv[SV_OUT];

#define SAVE(id, bytes)                                                                            \
    do {                                                                                           \
        allocating_saved = true;                                                                   \
        dalloc(&sv[SV_##id], (bytes), sv_name[SV_##id], L, mb);                                    \
        allocating_saved = false;                                                                  \
        if (count && (keep || SV_##id == SV_OUT)) act_bytes[L] += (bytes);                         \
    } while (0)

    // --pytorch: autocast's 16-bit copies of the matrix weights, made inside
    // the block and saved for its backward; the GEMMs read them.
    buf_t *wm[W_COUNT];
    for (int i = 0; i < W_COUNT; i++) {
        wm[i] = &w[i];
        if (!cfg.pytorch || i == W_LN1 || i == W_LN2) continue;
        buf_t *c = &x_acts->cast[i];
        allocating_saved = true;
        dalloc(c, w[i].n / 2, "weight_cast", L, mb);
        allocating_saved = false;
        if (count && keep) act_bytes[L] += w[i].n / 2;
        launch(TSK_weight_cast, w_name[i], L, mb, 0, OUTS(c), INS(&w[i]));
        wm[i] = c;
    }

    // Attention block.
    SAVE(LN1_OUT, 2 * sbh);
    SAVE(LN1_STATS, 8 * s * b); // fp32 mean and rstd per token
    launch(TSK_layernorm_fwd, "ln1", L, mb, 0, OUTS(&sv[SV_LN1_OUT], &sv[SV_LN1_STATS]),
           INS(x, &w[W_LN1]));
    SAVE(Q, 2 * sbh);
    SAVE(K, 2 * sbh);
    SAVE(V, 2 * sbh);
    launch(TSK_qkv_gemm, "qkv", L, mb, 6 * sbh * h, OUTS(&sv[SV_Q], &sv[SV_K], &sv[SV_V]),
           INS(&sv[SV_LN1_OUT], wm[W_QKV]));
    if (!cfg.fused) {
        dalloc(&tmp1, 2 * as2b, "attn_scores", L, mb);
        launch(TSK_attn_scores, "qk", L, mb, 2 * s * s * b * h, OUTS(&tmp1),
               INS(&sv[SV_Q], &sv[SV_K]));
        SAVE(SOFTMAX, 2 * as2b);
        launch(TSK_softmax_fwd, "softmax", L, mb, 0, OUTS(&sv[SV_SOFTMAX]), INS(&tmp1));
        dfree(&tmp1);
        SAVE(PROBS_MASK, as2b);
        SAVE(PROBS_DROP, 2 * as2b);
        launch(TSK_dropout_fwd, "attn_dropout", L, mb, 0,
               OUTS(&sv[SV_PROBS_MASK], &sv[SV_PROBS_DROP]), INS(&sv[SV_SOFTMAX]));
        SAVE(CTX, 2 * sbh);
        launch(TSK_attn_av, "av", L, mb, 2 * s * s * b * h, OUTS(&sv[SV_CTX]),
               INS(&sv[SV_PROBS_DROP], &sv[SV_V]));
    } else {
        // Flash attention keeps only the output and the log-sum-exp of each
        // softmax row (fp32, a*s*b values); the s^2 tensors never exist.
        SAVE(CTX, 2 * sbh);
        SAVE(LSE, 4 * a * s * b);
        launch(TSK_flash_attn_fwd, "flash", L, mb, 4 * s * s * b * h,
               OUTS(&sv[SV_CTX], &sv[SV_LSE]), INS(&sv[SV_Q], &sv[SV_K], &sv[SV_V]));
    }
    dalloc(&tmp1, 2 * sbh, "proj_out", L, mb);
    launch(TSK_gemm, "proj", L, mb, 2 * sbh * h, OUTS(&tmp1), INS(&sv[SV_CTX], wm[W_O]));
    SAVE(ATTN_MASK, sbh);
    SAVE(RESID1, 2 * sbh);
    launch(TSK_dropout_residual_fwd, "attn_resid", L, mb, 0,
           OUTS(&sv[SV_ATTN_MASK], &sv[SV_RESID1]), INS(&tmp1, x));
    dfree(&tmp1);

    // MLP block.
    SAVE(LN2_OUT, 2 * sbh);
    SAVE(LN2_STATS, 8 * s * b);
    launch(TSK_layernorm_fwd, "ln2", L, mb, 0, OUTS(&sv[SV_LN2_OUT], &sv[SV_LN2_STATS]),
           INS(&sv[SV_RESID1], &w[W_LN2]));
    SAVE(FC1_OUT, 8 * sbh);
    launch(TSK_gemm, "fc1", L, mb, 8 * sbh * h, OUTS(&sv[SV_FC1_OUT]),
           INS(&sv[SV_LN2_OUT], wm[W_FC1]));
    SAVE(GELU_OUT, 8 * sbh);
    launch(TSK_gelu_fwd, "gelu", L, mb, 0, OUTS(&sv[SV_GELU_OUT]), INS(&sv[SV_FC1_OUT]));
    dalloc(&tmp1, 2 * sbh, "fc2_out", L, mb);
    launch(TSK_gemm, "fc2", L, mb, 8 * sbh * h, OUTS(&tmp1), INS(&sv[SV_GELU_OUT], wm[W_FC2]));
    SAVE(MLP_MASK, sbh);
    if (recompute)
        dalloc(out, 2 * sbh, "layer_out_recompute", L, mb);
    else
        SAVE(OUT, 2 * sbh);
    if (cfg.skip && L == cfg.layers - 1) {
        // The long skip: layer 0's output is read again here, long after
        // layer 0 ended. A schedule that offloaded it must bring it back.
        launch(TSK_dropout_residual_skip_fwd, "mlp_resid", L, mb, 0, OUTS(&sv[SV_MLP_MASK], out),
               INS(&tmp1, &sv[SV_RESID1], &A(0, mb)->b[SV_OUT]));
    } else {
        launch(TSK_dropout_residual_fwd, "mlp_resid", L, mb, 0, OUTS(&sv[SV_MLP_MASK], out),
               INS(&tmp1, &sv[SV_RESID1]));
    }
    dfree(&tmp1);
#undef SAVE

    if (recompute) dfree(&out_tmp);
    if (!keep) {
        // Checkpointed: only the output (the next layer's input) survives.
        for (int i = 0; i < SV_COUNT; i++)
            if (i != SV_OUT) dfree(&sv[i]);
        for (int i = 0; i < W_COUNT; i++)
            dfree(&x_acts->cast[i]);
    }
}

static void forward_mb(int mb)
{
    ao(aoshim_try_set_microbatch(mb), "aoshim_set_microbatch", mb);
    for (int L = 0; L < cfg.layers; L++) {
        ao(aoshim_try_layer_begin(L), "aoshim_layer_begin", L);
        fwd_layer(L, mb, false);
        ao(aoshim_try_layer_end(L), "aoshim_layer_end", L);
        if (L < cfg.te) ao(aoshim_try_offload_layer(L), "aoshim_offload_layer", L);
    }
    // Loss head, outside any layer: the last output's only reader.
    buf_t *last = &A(cfg.layers - 1, mb)->b[SV_OUT];
    launch(TSK_loss_grad, "loss", -1, mb, 0, OUTS(&dloss[mb]), INS(last));
    dfree(last);
}

// --- backward ------------------------------------------------------------------
static void bwd_layer(int L, int mb)
{
    const uint64_t s = cur_seq, b = cfg.batch, h = cfg.hidden, a = cfg.heads;
    const uint64_t sbh = s * b * h, as2b = a * s * s * b;
    const int N = cfg.layers;
    buf_t *sv = A(L, mb)->b;
    buf_t *w = &weights[(size_t)L * W_COUNT];
    buf_t *g = &grads[(size_t)L * W_COUNT];
    buf_t t_fc2 = {0}, t_gelu = {0}, t_fc1 = {0}, t_ln2 = {0}, t_res = {0}, t_proj = {0};
    buf_t t_ctx = {0}, t_pd = {0}, t_sm = {0}, t_sc = {0}, dq = {0}, dk = {0}, dv = {0};
    buf_t t_ln1 = {0};

    if (!cfg.nobwd[L]) ao(aoshim_try_backward_begin(L), "aoshim_backward_begin", L);
    // --pytorch: the dgrad GEMMs read the saved casts; the gradients are
    // made by this backward (set_to_none left none), zeroed, then accumulated.
    buf_t *wm[W_COUNT];
    for (int i = 0; i < W_COUNT; i++) {
        wm[i] = A(L, mb)->cast[i].p ? &A(L, mb)->cast[i] : &w[i];
        if (cfg.pytorch && !g[i].p) {
            dalloc(&g[i], grad_bytes[(size_t)L * W_COUNT + i], "grad", -1, 0);
            static_bytes -= g[i].n; // not static: made and freed every step
            CK(cudaMemsetAsync(g[i].p, 0, g[i].n, stream));
        }
    }
    int te_reload = cfg.te >= 0 ? L - (N - 1 - cfg.te) : -1;
    if (te_reload >= 0 && te_reload < cfg.te)
        ao(aoshim_try_reload_layer(te_reload), "aoshim_reload_layer", te_reload);
    if (cfg.ckpt[L]) {
        // Activation checkpointing: the forward runs again, inside backward.
        ao(aoshim_try_layer_begin(L), "aoshim_layer_begin", L);
        fwd_layer(L, mb, true);
        ao(aoshim_try_layer_end(L), "aoshim_layer_end", L);
        for (int i = 0; i < W_COUNT; i++)
            if (A(L, mb)->cast[i].p) wm[i] = &A(L, mb)->cast[i];
    }
    buf_t *dY = L == N - 1 ? &dloss[mb] : &dnext[mb];
    const bool skip_src = cfg.skip && L == 0;
    if (cfg.skip && L == N - 1) {
        dalloc(&dskip[mb], 2 * sbh, "skip_grad", L, mb);
        launch(TSK_skip_grad, "skip_grad", L, mb, 0, OUTS(&dskip[mb]), INS(dY));
    }

    // MLP block.
    dalloc(&t_fc2, 2 * sbh, "d_fc2_out", L, mb);
    if (skip_src)
        launch(TSK_dropout_bwd_skip, "mlp_resid_bwd", L, mb, 0, OUTS(&t_fc2),
               INS(dY, &dskip[mb], &sv[SV_MLP_MASK]));
    else
        launch(TSK_dropout_bwd, "mlp_resid_bwd", L, mb, 0, OUTS(&t_fc2), INS(dY, &sv[SV_MLP_MASK]));
    dalloc(&t_gelu, 8 * sbh, "d_gelu_out", L, mb);
    launch(TSK_gemm_dgrad, "fc2_dgrad", L, mb, 8 * sbh * h, OUTS(&t_gelu), INS(&t_fc2, wm[W_FC2]));
    launch(TSK_gemm_wgrad, "fc2_wgrad", L, mb, 8 * sbh * h, OUTS(&g[W_FC2]),
           INS(&t_fc2, &sv[SV_GELU_OUT]));
    dfree(&t_fc2);
    dalloc(&t_fc1, 8 * sbh, "d_fc1_out", L, mb);
    launch(TSK_gelu_bwd, "gelu_bwd", L, mb, 0, OUTS(&t_fc1), INS(&t_gelu, &sv[SV_FC1_OUT]));
    dfree(&t_gelu);
    dalloc(&t_ln2, 2 * sbh, "d_ln2_out", L, mb);
    launch(TSK_gemm_dgrad, "fc1_dgrad", L, mb, 8 * sbh * h, OUTS(&t_ln2), INS(&t_fc1, wm[W_FC1]));
    launch(TSK_gemm_wgrad, "fc1_wgrad", L, mb, 8 * sbh * h, OUTS(&g[W_FC1]),
           INS(&t_fc1, &sv[SV_LN2_OUT]));
    dfree(&t_fc1);
    dalloc(&t_res, 2 * sbh, "d_resid1", L, mb);
    launch(TSK_layernorm_bwd, "ln2_bwd", L, mb, 0, OUTS(&t_res, &g[W_LN2]),
           INS(&t_ln2, &sv[SV_RESID1], &sv[SV_LN2_STATS], &w[W_LN2], dY));
    dfree(&t_ln2);
    if (L < N - 1) dfree(dY); // dnext[mb], made by backward of L+1
    if (skip_src) dfree(&dskip[mb]);

    // Attention block.
    dalloc(&t_proj, 2 * sbh, "d_proj_out", L, mb);
    launch(TSK_dropout_bwd, "attn_resid_bwd", L, mb, 0, OUTS(&t_proj),
           INS(&t_res, &sv[SV_ATTN_MASK]));
    dalloc(&t_ctx, 2 * sbh, "d_ctx", L, mb);
    launch(TSK_gemm_dgrad, "proj_dgrad", L, mb, 2 * sbh * h, OUTS(&t_ctx), INS(&t_proj, wm[W_O]));
    launch(TSK_gemm_wgrad, "proj_wgrad", L, mb, 2 * sbh * h, OUTS(&g[W_O]),
           INS(&t_proj, &sv[SV_CTX]));
    dfree(&t_proj);
    dalloc(&dq, 2 * sbh, "d_q", L, mb);
    dalloc(&dk, 2 * sbh, "d_k", L, mb);
    dalloc(&dv, 2 * sbh, "d_v", L, mb);
    if (!cfg.fused) {
        dalloc(&t_pd, 2 * as2b, "d_attn_dropout_out", L, mb);
        launch(TSK_attn_av_bwd, "av_bwd", L, mb, 4 * s * s * b * h, OUTS(&t_pd, &dv),
               INS(&t_ctx, &sv[SV_PROBS_DROP], &sv[SV_V]));
        dalloc(&t_sm, 2 * as2b, "d_softmax_out", L, mb);
        launch(TSK_dropout_bwd, "attn_dropout_bwd", L, mb, 0, OUTS(&t_sm),
               INS(&t_pd, &sv[SV_PROBS_MASK]));
        dfree(&t_pd);
        dalloc(&t_sc, 2 * as2b, "d_attn_scores", L, mb);
        launch(TSK_softmax_bwd, "softmax_bwd", L, mb, 0, OUTS(&t_sc), INS(&t_sm, &sv[SV_SOFTMAX]));
        dfree(&t_sm);
        launch(TSK_attn_scores_bwd, "qk_bwd", L, mb, 4 * s * s * b * h, OUTS(&dq, &dk),
               INS(&t_sc, &sv[SV_Q], &sv[SV_K]));
        dfree(&t_sc);
    } else {
        launch(TSK_flash_attn_bwd, "flash_bwd", L, mb, 8 * s * s * b * h, OUTS(&dq, &dk, &dv),
               INS(&t_ctx, &sv[SV_Q], &sv[SV_K], &sv[SV_V], &sv[SV_CTX], &sv[SV_LSE]));
    }
    dfree(&t_ctx);
    dalloc(&t_ln1, 2 * sbh, "d_ln1_out", L, mb);
    launch(TSK_qkv_dgrad, "qkv_dgrad", L, mb, 6 * sbh * h, OUTS(&t_ln1),
           INS(&dq, &dk, &dv, wm[W_QKV]));
    launch(TSK_qkv_wgrad, "qkv_wgrad", L, mb, 6 * sbh * h, OUTS(&g[W_QKV]),
           INS(&dq, &dk, &dv, &sv[SV_LN1_OUT]));
    dfree(&dq);
    dfree(&dk);
    dfree(&dv);
    buf_t *x = L == 0 ? &embed[mb] : &A(L - 1, mb)->b[SV_OUT];
    if (L == 0) {
        launch(TSK_layernorm_bwd_acc, "ln1_bwd", L, mb, 0, OUTS(&d_input, &g[W_LN1]),
               INS(&t_ln1, x, &sv[SV_LN1_STATS], &w[W_LN1], &t_res));
    } else {
        dalloc(&dnext[mb], 2 * sbh, "d_layer_in", L, mb);
        launch(TSK_layernorm_bwd, "ln1_bwd", L, mb, 0, OUTS(&dnext[mb], &g[W_LN1]),
               INS(&t_ln1, x, &sv[SV_LN1_STATS], &w[W_LN1], &t_res));
    }
    dfree(&t_ln1);
    dfree(&t_res);
    // This layer's saved tensors are done; so is the previous layer's output
    // (this layer's saved input), whose last reader was ln1_bwd above.
    for (int i = 0; i < SV_COUNT; i++)
        if (i != SV_OUT) dfree(&sv[i]);
    for (int i = 0; i < W_COUNT; i++)
        dfree(&A(L, mb)->cast[i]);
    if (L > 0) dfree(x);
    if (!cfg.nobwd[L]) ao(aoshim_try_backward_end(L), "aoshim_backward_end", L);
}

static void backward_mb(int mb)
{
    ao(aoshim_try_set_microbatch(mb), "aoshim_set_microbatch", mb);
    for (int L = cfg.layers - 1; L >= 0; L--)
        bwd_layer(L, mb);
}

// --- one step --------------------------------------------------------------------
// --pytorch: AdamW as PyTorch's multi-tensor (foreach) step runs it: the
// moments of every weight, then one fp32 temporary per weight, all alive at
// once, then the updates; the temporaries go, and the gradients after them
// (zero_grad(set_to_none=True) at the next step's start).
static void adam_step(void)
{
    const size_t nw = (size_t)cfg.layers * W_COUNT;
    buf_t *t = calloc(nw, sizeof *t);
    if (!t) abort();
    for (size_t i = 0; i < nw; i++)
        launch(TSK_adam_moments, "adam_moments", (int)(i / W_COUNT), -1, 0,
               OUTS(&adam_m[i], &adam_v[i]), INS(&grads[i]));
    for (size_t i = 0; i < nw; i++)
        dalloc(&t[i], weights[i].n, "adam_denom", -1, 0);
    for (size_t i = 0; i < nw; i++)
        launch(TSK_adam_denom, "adam_denom", (int)(i / W_COUNT), -1, 0, OUTS(&t[i]),
               INS(&adam_v[i]));
    for (size_t i = 0; i < nw; i++)
        launch(TSK_adam_update, w_name[i % W_COUNT], (int)(i / W_COUNT), -1, 0, OUTS(&weights[i]),
               INS(&adam_m[i], &t[i]));
    for (size_t i = 0; i < nw; i++) {
        static_bytes -= t[i].n; // a transient, not static
        dfree(&t[i]);
    }
    free(t);
}

static void run_step(void)
{
    for (int i = 0; i < cfg.layers * W_COUNT; i++) {
        if (cfg.pytorch)
            dfree(&grads[i]); // zero_grad(set_to_none=True): the backward makes them anew
        else
            CK(cudaMemsetAsync(grads[i].p, 0, grads[i].n, stream));
    }
    CK(cudaMemsetAsync(d_input.p, 0, d_input.n, stream));
    // Fresh data each step; --seed changes it, the weights stay put.
    for (int mb = 0; mb < cfg.microbatches; mb++)
        launch(TSK_init_fill, "input", (int)(cfg.seed & 0xfffff), mb, 0, OUTS(&embed[mb]), NULL);

    const int M = cfg.microbatches;
    if (!cfg.one_f_one_b) {
        // GPipe: every microbatch's forward, then every backward.
        for (int mb = 0; mb < M; mb++)
            forward_mb(mb);
        for (int mb = 0; mb < M; mb++)
            backward_mb(mb);
    } else {
        // 1F1B as the first stage of a --stages deep pipeline: warm up with
        // stages-1 forwards, then alternate one forward and one backward, then
        // drain. Gradient accumulation is a wrapping add, so the order in
        // which microbatches land does not change a bit of the result.
        int warm = cfg.stages - 1 < M ? cfg.stages - 1 : M;
        int nf = 0;
        for (int i = 0; i < warm; i++)
            forward_mb(nf++);
        for (int nb = 0; nb < M; nb++) {
            if (nf < M) forward_mb(nf++);
            backward_mb(nb);
        }
    }

    // Optimizer: every weight moves by a function of its gradient.
    if (cfg.pytorch)
        adam_step();
    else
        for (int L = 0; L < cfg.layers; L++)
            for (int i = 0; i < W_COUNT; i++)
                launch(TSK_sgd_update, w_name[i], L, -1, 0, OUTS(&weights[L * W_COUNT + i]),
                       INS(&grads[L * W_COUNT + i]));
    ao(aoshim_try_step_end(), "aoshim_step_end", cur_step);
}

// --- command line ------------------------------------------------------------------
static const char usage_line[] =
    "usage: train_step [--layers N] [--hidden H] [--heads A] [--seq S] [--batch B] [--steps K]\n"
    "                  [--microbatches M] [--schedule gpipe|1f1b] [--stages P]\n"
    "                  [--checkpoint LIST] [--no-backward-begin LIST] [--skip]\n"
    "                  [--fused|--no-fused] [--alloc async|malloc]\n"
    "                  [--seed N] [--nodata] [--capacity SIZE] [--profile h100|a100]\n"
    "                  [--te-schedule K] [--seq-from STEP:SEQ] [--pytorch] [--help]\n";

static void usage_help(void)
{
    fputs(usage_line, stdout);
    fputs("\n"
          "A transformer-shaped training step on the CUDA runtime API (simulated GPU).\n"
          "  --layers N          transformer layers (8)\n"
          "  --hidden H          hidden size (512); --heads A attention heads (8)\n"
          "  --seq S             sequence length (256); --batch B microbatch size (2)\n"
          "  --steps K           training steps, activations allocated afresh each (2)\n"
          "  --microbatches M    microbatches per step, gradients accumulate (1)\n"
          "  --schedule S        gpipe (all forwards, then all backwards) or 1f1b (gpipe)\n"
          "  --stages P          1f1b: run as the first stage of P, P-1 warm-up forwards (2)\n"
          "  --no-backward-begin LIST  layers whose backward is not announced to aoshim\n"
          "  --checkpoint LIST   layers recomputed in backward, e.g. 1,3 or 0-5\n"
          "  --skip              long skip connection: the last layer reads layer 0's output\n"
          "  --fused, --no-fused flash attention (no s^2 tensors) or not (default not)\n"
          "  --alloc A           async: cudaMallocAsync/cudaFreeAsync (default); malloc\n"
          "  --seed N            input data seed (1)\n"
          "  --nodata            SIM_NODATA=1: sizes and times only, checksum=nodata-<hash>\n"
          "  --capacity SIZE     SIM_CAPACITY, e.g. 512M, 80G\n"
          "  --profile P         SIM_PROFILE: h100 or a100\n"
          "  --te-schedule K     TransformerEngine's schedule through aoshim's manual one:\n"
          "                      layers 0..K-1 offloaded, layer j reloaded at the backward\n"
          "                      of j+N-1-K (K at most N-1)\n"
          "  --seq-from STEP:SEQ sequence length SEQ from step STEP on (steps count from 1;\n"
          "                      STEP in [2, --steps]): the inputs are allocated afresh\n"
          "  --pytorch           a PyTorch step under bf16 autocast with AdamW: fp32 weights\n"
          "                      cast to 16 bits inside each block (saved for backward),\n"
          "                      gradients made by the backward and freed each step, Adam's\n"
          "                      states, and the optimizer's multi-tensor fp32 transient\n"
          "Before the result, one line per step: train_step step=N seq=S\n"
          "peak_device_bytes=P step_ns=T alloc_peak_bytes=A wall_ns=W launches=L\n"
          "pool_slack_at_peak=U (P: the step's own peak on the device, setup excluded; T\n"
          "simulated, W the host's wall clock, both for the step to its last\n"
          "synchronisation; A: the most the program had allocated at once in it; L the\n"
          "step's kernel launches; U: the pool's reserved-but-unused bytes when P was\n"
          "reached, so P - U is what was allocated at the device's peak).\n"
          "Exit status: 0 ok, 1 CUDA error (status=error), 2 bad option, 3 out of device\n"
          "memory (status=oom). The last stdout line is the machine-readable result.\n",
          stdout);
}

static void bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("train_step: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fputs(usage_line, stderr);
    exit(2);
}

static int parse_int(const char *opt, const char *v, long lo, long hi)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        bad_usage("--%s '%s': expected an integer in [%ld, %ld]", opt, v, lo, hi);
    return (int)x;
}

// "1,3", "0-5", "2,4-6": a set of layers (for --checkpoint, --no-backward-begin).
static void parse_layers(const char *opt, const char *v, bool *set)
{
    const char *p = v;
    if (!*p) bad_usage("%s '': expected a list of layers such as 1,3 or 0-5", opt);
    while (*p) {
        char *end;
        long lo = strtol(p, &end, 10), hi;
        if (end == p) goto bad;
        hi = lo;
        if (*end == '-') {
            p = end + 1;
            hi = strtol(p, &end, 10);
            if (end == p) goto bad;
        }
        if (lo < 0 || hi < lo || hi >= cfg.layers) goto bad;
        for (long i = lo; i <= hi; i++)
            set[i] = true;
        if (*end == ',')
            p = end + 1;
        else if (*end)
            goto bad;
        else
            p = end;
    }
    return;
bad:
    bad_usage("%s '%s': expected layers in [0, %d] such as 1,3 or 0-5", opt, v, cfg.layers - 1);
}

static bool valid_size(const char *v)
{
    const char *p = v;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9')
        p++;
    if (!*p) return true;
    if (!strchr("KMGTkmgt", *p)) return false;
    p++;
    return !*p || !strcmp(p, "iB") || !strcmp(p, "B");
}

// "STEP:SEQ" (--seq-from), once --steps is known.
static void parse_seq_from(const char *v)
{
    char *end;
    errno = 0;
    long step = strtol(v, &end, 10), seq = 0;
    bool ok = !errno && end != v && *end == ':' && end[1] >= '0' && end[1] <= '9';
    if (ok) {
        const char *p = end + 1;
        seq = strtol(p, &end, 10);
        ok = !errno && !*end;
    }
    if (!ok || step < 2 || step > cfg.steps || seq < 1 || seq > 1 << 20)
        bad_usage("--seq-from '%s': expected STEP:SEQ with STEP in [2, %d] (--steps) and SEQ in "
                  "[1, %d]",
                  v, cfg.steps, 1 << 20);
    cfg.seq_step = (int)step;
    cfg.seq_to = (int)seq;
}

static void parse_args(int argc, char **argv)
{
    enum {
        O_LAYERS = 256,
        O_HIDDEN,
        O_HEADS,
        O_SEQ,
        O_BATCH,
        O_STEPS,
        O_MB,
        O_SCHED,
        O_STAGES,
        O_CKPT,
        O_NOBWD,
        O_SKIP,
        O_FUSED,
        O_NOFUSED,
        O_ALLOC,
        O_SEED,
        O_NODATA,
        O_CAP,
        O_PROFILE,
        O_TE,
        O_SEQFROM,
        O_PYTORCH,
    };
    static const struct option opts[] = {
        {"layers", required_argument, 0, O_LAYERS},
        {"hidden", required_argument, 0, O_HIDDEN},
        {"heads", required_argument, 0, O_HEADS},
        {"seq", required_argument, 0, O_SEQ},
        {"batch", required_argument, 0, O_BATCH},
        {"steps", required_argument, 0, O_STEPS},
        {"microbatches", required_argument, 0, O_MB},
        {"schedule", required_argument, 0, O_SCHED},
        {"stages", required_argument, 0, O_STAGES},
        {"checkpoint", required_argument, 0, O_CKPT},
        {"no-backward-begin", required_argument, 0, O_NOBWD},
        {"skip", no_argument, 0, O_SKIP},
        {"fused", no_argument, 0, O_FUSED},
        {"no-fused", no_argument, 0, O_NOFUSED},
        {"alloc", required_argument, 0, O_ALLOC},
        {"seed", required_argument, 0, O_SEED},
        {"nodata", no_argument, 0, O_NODATA},
        {"capacity", required_argument, 0, O_CAP},
        {"profile", required_argument, 0, O_PROFILE},
        {"te-schedule", required_argument, 0, O_TE},
        {"seq-from", required_argument, 0, O_SEQFROM},
        {"pytorch", no_argument, 0, O_PYTORCH},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *ckpt_list = NULL, *nobwd_list = NULL, *seq_from = NULL;
    int c;
    opterr = 0; // our own message, then the usage line
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_LAYERS:
            cfg.layers = parse_int("layers", optarg, 1, 4096);
            break;
        case O_HIDDEN:
            cfg.hidden = parse_int("hidden", optarg, 8, 1 << 20);
            break;
        case O_HEADS:
            cfg.heads = parse_int("heads", optarg, 1, 4096);
            break;
        case O_SEQ:
            cfg.seq = parse_int("seq", optarg, 1, 1 << 20);
            break;
        case O_BATCH:
            cfg.batch = parse_int("batch", optarg, 1, 1 << 16);
            break;
        case O_STEPS:
            cfg.steps = parse_int("steps", optarg, 1, 1 << 20);
            break;
        case O_MB:
            cfg.microbatches = parse_int("microbatches", optarg, 1, 4096);
            break;
        case O_STAGES:
            cfg.stages = parse_int("stages", optarg, 1, 4096);
            break;
        case O_SCHED:
            if (!strcmp(optarg, "gpipe"))
                cfg.one_f_one_b = false;
            else if (!strcmp(optarg, "1f1b"))
                cfg.one_f_one_b = true;
            else
                bad_usage("--schedule '%s': expected gpipe or 1f1b", optarg);
            break;
        case O_CKPT:
            ckpt_list = optarg;
            break;
        case O_NOBWD:
            nobwd_list = optarg;
            break;
        case O_SKIP:
            cfg.skip = true;
            break;
        case O_FUSED:
            cfg.fused = true;
            break;
        case O_NOFUSED:
            cfg.fused = false;
            break;
        case O_ALLOC:
            if (!strcmp(optarg, "async"))
                cfg.use_async = true;
            else if (!strcmp(optarg, "malloc"))
                cfg.use_async = false;
            else
                bad_usage("--alloc '%s': expected async or malloc", optarg);
            break;
        case O_SEED:
            cfg.seed = (uint64_t)parse_int("seed", optarg, 0, 0x7fffffff);
            break;
        case O_NODATA:
            cfg.nodata = true;
            break;
        case O_CAP:
            if (!valid_size(optarg))
                bad_usage("--capacity '%s': expected bytes with optional K/M/G/T suffix", optarg);
            cfg.capacity = optarg;
            break;
        case O_PROFILE:
            if (strcmp(optarg, "h100") && strcmp(optarg, "a100"))
                bad_usage("--profile '%s': expected h100 or a100", optarg);
            cfg.profile = optarg;
            break;
        case O_TE:
            cfg.te = parse_int("te-schedule", optarg, 0, 4096);
            break;
        case O_PYTORCH:
            cfg.pytorch = true;
            break;
        case O_SEQFROM:
            seq_from = optarg;
            break;
        case 'h':
            usage_help();
            exit(0);
        default:
            if (optopt >= O_LAYERS) bad_usage("option '%s' needs an argument", argv[optind - 1]);
            bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) bad_usage("unexpected argument '%s'", argv[optind]);
    if (cfg.hidden % cfg.heads)
        bad_usage("--hidden %d is not a multiple of --heads %d", cfg.hidden, cfg.heads);
    if (cfg.skip && cfg.layers < 2) bad_usage("--skip needs at least 2 layers");
    if (cfg.te > cfg.layers - 1)
        bad_usage("--te-schedule %d: at most --layers - 1 (%d)", cfg.te, cfg.layers - 1);
    if (seq_from) parse_seq_from(seq_from);
    cfg.ckpt = calloc((size_t)cfg.layers, sizeof *cfg.ckpt);
    cfg.nobwd = calloc((size_t)cfg.layers, sizeof *cfg.nobwd);
    if (!cfg.ckpt || !cfg.nobwd) abort();
    if (ckpt_list) parse_layers("--checkpoint", ckpt_list, cfg.ckpt);
    if (nobwd_list) parse_layers("--no-backward-begin", nobwd_list, cfg.nobwd);
}

// --- checksum ----------------------------------------------------------------------
static uint64_t fold_host(uint64_t h, const unsigned char *p, uint64_t n)
{
    h = ts_mix64(h ^ n);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = ts_mix64(h ^ w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = ts_mix64(h ^ w);
    }
    return h;
}

// Gradients of the last step, the input gradient and the updated weights,
// copied back through the compute stream in a fixed order.
static uint64_t device_checksum(void)
{
    uint64_t h = 0x243f6a8885a308d3ULL;
    size_t nb = (size_t)cfg.layers * W_COUNT;
    buf_t *all[2 * nb + 1];
    for (size_t i = 0; i < nb; i++) {
        all[i] = &grads[i];
        all[nb + i] = &weights[i];
    }
    all[2 * nb] = &d_input;
    for (size_t i = 0; i < 2 * nb + 1; i++) {
        unsigned char *host = malloc(all[i]->n ? all[i]->n : 1);
        if (!host) abort();
        CK(cudaMemcpyAsync(host, all[i]->p, all[i]->n, cudaMemcpyDeviceToHost, stream));
        CK(cudaStreamSynchronize(stream));
        h = fold_host(h, host, all[i]->n);
        free(host);
    }
    return h;
}

static double mib(uint64_t n)
{
    return (double)n / (1024.0 * 1024.0);
}

// The inputs and their gradients, sized by the step's sequence length: given
// back and allocated afresh when it changes (--seq-from), outside any layer.
// What the summary calls static stays the first step's.
static void alloc_inputs(void)
{
    const uint64_t sbh = (uint64_t)cur_seq * (uint64_t)cfg.batch * (uint64_t)cfg.hidden;
    const uint64_t keep = static_bytes;
    const bool again = d_input.p != NULL;
    for (int mb = 0; mb < cfg.microbatches; mb++) {
        dfree(&embed[mb]);
        dalloc(&embed[mb], 2 * sbh, "input", -1, mb);
        dfree(&dloss[mb]);
        dalloc(&dloss[mb], 2 * sbh, "loss_grad", -1, mb);
    }
    dfree(&d_input);
    dalloc(&d_input, 2 * sbh, "input_grad", -1, 0);
    if (again) static_bytes = keep;
}

// The host's own clock, for the step's wall time (benchmarks compare it
// across runs; the simulated step_ns is the same in every run).
static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// --- main ----------------------------------------------------------------------------
int main(int argc, char **argv)
{
    parse_args(argc, argv);
    // The simulator reads its configuration at initialisation: before the
    // first CUDA call.
    if (cfg.nodata) setenv("SIM_NODATA", "1", 1);
    if (cfg.capacity) setenv("SIM_CAPACITY", cfg.capacity, 1);
    if (cfg.profile) setenv("SIM_PROFILE", cfg.profile, 1);
    const char *nd = getenv("SIM_NODATA");
    // SIM_NODATA from the environment means no kernel ran and no byte was
    // copied either: a data checksum would hash uninitialised host memory.
    nodata = nd && *nd && strcmp(nd, "0") != 0;

    int rc = ts_kernels_register();
    if (rc != 0) die_cuda("simrtRegisterKernel", (cudaError_t)rc);
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ao(aoshim_try_set_stream(stream), "aoshim_set_stream", 0);
    if (cfg.te >= 0) ao(aoshim_try_set_schedule(AOSHIM_SCHEDULE_MANUAL), "aoshim_set_schedule", 1);

    const int N = cfg.layers, M = cfg.microbatches;
    const uint64_t s = cfg.seq, b = cfg.batch, h = cfg.hidden, a = cfg.heads;
    const uint64_t sbh = s * b * h;
    acts = calloc((size_t)N * (size_t)M, sizeof *acts);
    weights = calloc((size_t)N * W_COUNT, sizeof *weights);
    grads = calloc((size_t)N * W_COUNT, sizeof *grads);
    embed = calloc((size_t)M, sizeof *embed);
    dloss = calloc((size_t)M, sizeof *dloss);
    dnext = calloc((size_t)M, sizeof *dnext);
    dskip = calloc((size_t)M, sizeof *dskip);
    act_bytes = calloc((size_t)N, sizeof *act_bytes);
    grad_bytes = calloc((size_t)N * W_COUNT, sizeof *grad_bytes);
    adam_m = calloc((size_t)N * W_COUNT, sizeof *adam_m);
    adam_v = calloc((size_t)N * W_COUNT, sizeof *adam_v);
    if (!acts || !weights || !grads || !embed || !dloss || !dnext || !dskip || !act_bytes ||
        !grad_bytes || !adam_m || !adam_v)
        abort();

    // --pytorch: PyTorch's backend:cudaMallocAsync sets the default pool's
    // release threshold to the maximum as it starts, so the pool keeps what
    // the program frees across synchronisations.
    if (cfg.pytorch && cfg.use_async) {
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, 0);
        if (e == cudaSuccess)
            e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        if (e != cudaSuccess) die_cuda("cudaMemPoolSetAttribute", e);
    }

    // --- static memory: weights, gradients, inputs, loss gradients ---
    // 16-bit weights; --pytorch: fp32 master weights, fp32 gradients and
    // Adam's two fp32 states (the gradients are made by each backward).
    const uint64_t wbytes[W_COUNT] = {4 * h, 6 * h * h, 2 * h * h, 4 * h, 8 * h * h, 8 * h * h};
    const uint64_t wscale = cfg.pytorch ? 2 : 1;
    char name[48];
    for (int L = 0; L < N; L++) {
        for (int i = 0; i < W_COUNT; i++) {
            const size_t k = (size_t)L * W_COUNT + (size_t)i;
            snprintf(name, sizeof name, "%s.%d", w_name[i], L);
            dalloc(&weights[k], wscale * wbytes[i], name, -1, 0);
            launch(TSK_init_fill, w_name[i], L, -1, 0, OUTS(&weights[k]), NULL);
            grad_bytes[k] = wscale * wbytes[i];
            if (cfg.pytorch) {
                dalloc(&adam_m[k], wscale * wbytes[i], "adam_m", -1, 0);
                dalloc(&adam_v[k], wscale * wbytes[i], "adam_v", -1, 0);
                CK(cudaMemsetAsync(adam_m[k].p, 0, adam_m[k].n, stream));
                CK(cudaMemsetAsync(adam_v[k].p, 0, adam_v[k].n, stream));
                continue;
            }
            snprintf(name, sizeof name, "grad_%s.%d", w_name[i], L);
            dalloc(&grads[k], wbytes[i], name, -1, 0);
        }
    }
    cur_seq = cfg.seq;
    alloc_inputs();
    CK(cudaStreamSynchronize(stream));

    // --- steps ---
    // Each step's own peak: the simulator's peak is set back to what is
    // held at the step's start; the run's is the most of all of them.
    sim_stats_t st;
    uint64_t step_ns = 0, run_peak = stat_peak(&st);
    // The pool's slack (reserved, unused) when the run's peak was reached:
    // the simulator's peak_pool_unused_bytes of the phase that had it.
    uint64_t run_slack = st.peak_pool_unused_bytes;
    run_alloc_peak = alloc_peak;
    for (cur_step = 0; cur_step < cfg.steps; cur_step++) {
        if (cur_step + 1 == cfg.seq_step) {
            cur_seq = cfg.seq_to;
            alloc_inputs();
            CK(cudaStreamSynchronize(stream));
        }
        int e = simrtResetPeak();
        if (e != 0) die_cuda("simrtResetPeak", (cudaError_t)e);
        stat_peak(&st);
        alloc_peak = live_bytes;
        uint64_t t0 = st.elapsed_ns, launches0 = st.launches, w0 = wall_ns();
        run_step();
        CK(cudaStreamSynchronize(stream));
        uint64_t wall = wall_ns() - w0;
        uint64_t step_peak = stat_peak(&st);
        step_ns = st.elapsed_ns - t0;
        if (step_peak > run_peak) {
            run_peak = step_peak;
            run_slack = st.peak_pool_unused_bytes;
        }
        if (alloc_peak > run_alloc_peak) run_alloc_peak = alloc_peak;
        printf("train_step step=%d seq=%d peak_device_bytes=%" PRIu64 " step_ns=%" PRIu64
               " alloc_peak_bytes=%" PRIu64 " wall_ns=%" PRIu64 " launches=%" PRIu64
               " pool_slack_at_peak=%" PRIu64 "\n",
               cur_step + 1, cur_seq, step_peak, step_ns, alloc_peak, wall, st.launches - launches0,
               st.peak_pool_unused_bytes);
    }
    cur_step = cfg.steps - 1;

    char checksum[40];
    if (nodata)
        snprintf(checksum, sizeof checksum, "nodata-%016" PRIx64, size_hash);
    else
        snprintf(checksum, sizeof checksum, "%016" PRIx64, device_checksum());

    // --- teardown: give everything back, then read the simulator's figures ---
    for (size_t i = 0; i < (size_t)N * W_COUNT; i++) {
        dfree(&weights[i]);
        dfree(&grads[i]);
        dfree(&adam_m[i]);
        dfree(&adam_v[i]);
    }
    for (int mb = 0; mb < M; mb++) {
        dfree(&embed[mb]);
        dfree(&dloss[mb]);
    }
    dfree(&d_input);
    if (nlive != 0) {
        fprintf(stderr, "train_step: internal error: %zu allocations still live\n", nlive);
        abort();
    }
    CK(cudaStreamSynchronize(stream));
    uint64_t peak = stat_peak(&st), slack = st.peak_pool_unused_bytes;
    if (run_peak > peak) {
        peak = run_peak;
        slack = run_slack;
    }
    if (alloc_peak > run_alloc_peak) run_alloc_peak = alloc_peak;
    CK(cudaStreamDestroy(stream));

    uint64_t act = 0;
    for (int L = 0; L < N; L++)
        if (act_bytes[L] > act) act = act_bytes[L];
    const uint64_t formula = cfg.fused ? 34 * sbh : sbh * 34 + 5 * a * s * s * b;
    double dev = formula ? 100.0 * ((double)act - (double)formula) / (double)formula : 0.0;

    char seq_from[48] = "";
    if (cfg.seq_step)
        snprintf(seq_from, sizeof seq_from, " (%d from step %d)", cfg.seq_to, cfg.seq_step);
    printf("train_step: %d layers, hidden %d, %d heads, seq %d%s, batch %d, %d microbatch%s (%s), "
           "%d step%s, %s attention, alloc %s%s%s\n",
           N, cfg.hidden, cfg.heads, cfg.seq, seq_from, cfg.batch, M, M == 1 ? "" : "es",
           cfg.one_f_one_b ? "1f1b" : "gpipe", cfg.steps, cfg.steps == 1 ? "" : "s",
           cfg.fused ? "fused" : "unfused", cfg.use_async ? "async" : "malloc",
           nodata ? ", no data" : "", cfg.pytorch ? ", pytorch-like (autocast casts, AdamW)" : "");
    printf("train_step: saved activations per layer %.2f MiB, formula s*b*h*(34%s) %.2f MiB "
           "(%+.2f%%)\n",
           mib(act), cfg.fused ? "" : " + 5*a*s/h", mib(formula), dev);
    printf("train_step: static (weights, gradients, inputs, loss gradients) %.2f MiB; peak device "
           "%.2f MiB\n",
           mib(static_bytes), mib(peak));
    printf("train_step: last step %.3f ms simulated; %" PRIu64
           " launches in the run; races %" PRIu64 "\n",
           (double)step_ns / 1e6, st.launches, st.races);
    printf("train_step status=ok checksum=%s peak_device_bytes=%" PRIu64
           " alloc_peak_bytes=%" PRIu64 " activation_bytes_per_layer=%" PRIu64
           " formula_bytes_per_layer=%" PRIu64 " static_bytes=%" PRIu64 " temp_bytes_peak=%" PRIu64
           " step_ns=%" PRIu64 " races=%" PRIu64 " pool_slack_at_peak=%" PRIu64 "\n",
           checksum, peak, run_alloc_peak, act, formula, static_bytes, temp_peak, step_ns, st.races,
           slack);
    return 0;
}
