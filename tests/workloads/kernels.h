// SPDX-License-Identifier: MIT
// The training step's kernels: host functions registered with the simulated
// runtime, each a deterministic mix of its inputs into its outputs.
//
// A kernel here does no real arithmetic. What matters to the tests is that
// every byte of every input reaches some output through a chain of bijections
// (so one wrong byte anywhere upstream changes the final checksum for sure, not
// with some probability), that results never depend on device addresses or on
// timing (so two allocators and two schedules give the same bits), and that
// accumulation into gradients is a wrapping 64-bit add (commutative and
// associative, so the order in which microbatches land does not matter).
#ifndef TRAIN_KERNELS_H
#define TRAIN_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

// X(name, outputs, inputs, accumulate-mask): bit i of the mask makes output i
// accumulate (out += f(inputs), declared read-write) instead of overwrite.
#define TS_KERNELS(X)                                                                              \
    X(init_fill, 1, 0, 0)                                                                          \
    X(layernorm_fwd, 2, 2, 0)                                                                      \
    X(qkv_gemm, 3, 2, 0)                                                                           \
    X(attn_scores, 1, 2, 0)                                                                        \
    X(softmax_fwd, 1, 1, 0)                                                                        \
    X(dropout_fwd, 2, 1, 0)                                                                        \
    X(attn_av, 1, 2, 0)                                                                            \
    X(flash_attn_fwd, 2, 3, 0)                                                                     \
    X(gemm, 1, 2, 0)                                                                               \
    X(dropout_residual_fwd, 2, 2, 0)                                                               \
    X(dropout_residual_skip_fwd, 2, 3, 0)                                                          \
    X(gelu_fwd, 1, 1, 0)                                                                           \
    X(loss_grad, 1, 1, 0)                                                                          \
    X(dropout_bwd, 1, 2, 0)                                                                        \
    X(dropout_bwd_skip, 1, 3, 0)                                                                   \
    X(skip_grad, 1, 1, 0)                                                                          \
    X(gemm_dgrad, 1, 2, 0)                                                                         \
    X(gemm_wgrad, 1, 2, 1)                                                                         \
    X(gelu_bwd, 1, 2, 0)                                                                           \
    X(layernorm_bwd, 2, 5, 2)                                                                      \
    X(layernorm_bwd_acc, 2, 5, 3)                                                                  \
    X(attn_av_bwd, 2, 3, 0)                                                                        \
    X(softmax_bwd, 1, 2, 0)                                                                        \
    X(attn_scores_bwd, 2, 3, 0)                                                                    \
    X(flash_attn_bwd, 3, 6, 0)                                                                     \
    X(qkv_dgrad, 1, 4, 0)                                                                          \
    X(qkv_wgrad, 1, 4, 1)                                                                          \
    X(sgd_update, 1, 1, 1)                                                                         \
    X(weight_cast, 1, 1, 0)                                                                        \
    X(adam_moments, 2, 1, 3)                                                                       \
    X(adam_denom, 1, 1, 0)                                                                         \
    X(adam_update, 1, 2, 1)

typedef enum ts_kernel_e {
#define TS_ENUM_(name, no, ni, acc) TSK_##name,
    TS_KERNELS(TS_ENUM_)
#undef TS_ENUM_
        TSK_COUNT
} ts_kernel_e;

#define TS_MAX_OUT 3
#define TS_MAX_IN  6

// Registers every kernel with the simulated runtime; 0 or the failing status.
int ts_kernels_register(void);
const char *ts_kernel_name(ts_kernel_e k);
int ts_kernel_nout(ts_kernel_e k);
int ts_kernel_nin(ts_kernel_e k);

// Launches kernel k on stream: outs/ins are device pointers with their sizes
// in bytes; salt makes the same kernel give different values at different
// sites (layer, microbatch, step); flops feeds the simulator's cost model.
cudaError_t ts_launch(ts_kernel_e k, cudaStream_t stream, void *const *outs,
                      const uint64_t *out_bytes, void *const *ins, const uint64_t *in_bytes,
                      uint64_t salt, uint64_t flops);

// The bijective 64-bit finaliser the kernels and the checksum share.
static inline uint64_t ts_mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

#endif // TRAIN_KERNELS_H
