/* cpu_moe.h — the mixture-of-experts routing and combination on the CPU
 * (qwen36-model.md §3.4).
 *
 * Owns: the router (softmax over all experts, top-k, renormalisation), the
 * shared expert's sigmoid gate and the fixed-order sum of the expert outputs.
 * The router logits, every expert FFN (SwiGLU of projections) and the shared
 * expert are computed by the caller with the matrix-product helpers. */
#ifndef CW_CPU_MOE_H
#define CW_CPU_MOE_H

#include <stdint.h>

#include "base/err.h"

/* The llama.cpp clamp on the selected-probability sum (smallest normal f16). */
#define CW_MOE_WEIGHT_SUM_MIN 6.103515625e-5f

/* One token's routing:
 *   probs [n_expert] OUT  softmax of logits over all experts
 *   sel [n_used] OUT      expert ids by descending probability; equal
 *                         probabilities go to the lower id first (llama.cpp's
 *                         std::sort leaves ties unordered)
 *   weight [n_used] OUT   probs[sel] / max(Σ probs[sel], CW_MOE_WEIGHT_SUM_MIN)
 * Returns -1 with err set unless 0 < n_used <= n_expert. NaN logits sort last. */
int cw_moe_route(int n_expert, int n_used, const float *logits, float *probs, int32_t *sel,
                 float *weight, struct cw_err *err);

/* y [n_embd] OUT = Σ_s weight[s]·expert_out[s] summed in slot order s = 0, 1, ..
 * (each product rounded to f32, then added), plus σ(shared_logit)·shared_out
 * when shared_out is non-NULL. expert_out is [n_used][n_embd]. This is
 * llama.cpp's order of operations, and a fixed one, so the result does not
 * depend on how experts were scheduled. */
void cw_moe_combine(int64_t n_embd, int n_used, const float *weight, const float *expert_out,
                    const float *shared_out, float shared_logit, float *y);

#endif
