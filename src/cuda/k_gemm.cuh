/* k_gemm.cuh — internal entry points of the prefill products (k_moe_gemm.cu)
 * that k_gemv.cu's launchers dispatch large batches to; kernels.h holds the
 * public contract. */
#ifndef CW_K_GEMM_CUH
#define CW_K_GEMM_CUH

#include "cuda/k_quant.cuh"
#include "cuda/kernels.h"

/* Routed experts grouped by expert on the device (f16 tensor cores): the
 * same contract as cw_k_moe_gate_up / cw_k_moe_down, for batches above the
 * GEMV regime. Expert ids outside [0, CW_K_MOE_GEMM_XMAX) count as invalid
 * (act 0, no contribution), as negative ids do in the GEMV regime. */
#define CW_K_MOE_GEMM_XMAX 1024

int cw_k_moe_gemm_gate_up(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                          const float *d_x, const int32_t *d_ids, int K, int64_t n_tok,
                          float *d_act, void *d_scratch, struct cw_err *err);
int cw_k_moe_gemm_down(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                       const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                       float *d_h, void *d_scratch, struct cw_err *err);
/* Bytes of scratch both need for n_tok tokens, experts of E -> F (gate/up)
 * and F -> E (down). */
size_t cw_k_moe_gemm_scratch(int64_t E, int64_t F, int K, int64_t n_tok);

#endif
