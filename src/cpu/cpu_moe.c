/* cpu_moe.c — MoE routing and combination (see cpu_moe.h). */
#include "cpu/cpu_moe.h"

#include <math.h>

#include "cpu/cpu_ops.h"

// a ranks before b: larger probability, then lower id; NaN after everything
static int ranks_before(const float *p, int32_t a, int32_t b)
{
    if (isnan(p[b]))
        return !isnan(p[a]) || a < b;
    if (isnan(p[a]))
        return 0;
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

int cw_moe_route(int n_expert, int n_used, const float *logits, float *probs, int32_t *sel,
                 float *weight, struct cw_err *err)
{
    if (n_expert <= 0 || n_used <= 0 || n_used > n_expert)
        return cw_errf(err, CW_ERR_INVALID, "moe: bad routing %d of %d experts", n_used,
                       n_expert);
    cw_softmax(probs, logits, n_expert);
    // selection by repeated scans: k is small (8) and the order is total
    for (int s = 0; s < n_used; s++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (int r = 0; r < s && !taken; r++)
                taken = sel[r] == e;
            if (!taken && (best < 0 || ranks_before(probs, e, best)))
                best = e;
        }
        sel[s] = best;
    }
    float sum = 0.0f;
    for (int s = 0; s < n_used; s++) {
        weight[s] = probs[sel[s]];
        sum += weight[s];
    }
    if (sum < CW_MOE_WEIGHT_SUM_MIN)
        sum = CW_MOE_WEIGHT_SUM_MIN;
    for (int s = 0; s < n_used; s++)
        weight[s] /= sum;
    return 0;
}

void cw_moe_combine(int64_t n_embd, int n_used, const float *weight, const float *expert_out,
                    const float *shared_out, float shared_logit, float *y)
{
    for (int64_t i = 0; i < n_embd; i++)
        y[i] = weight[0] * expert_out[i];
    for (int s = 1; s < n_used; s++) {
        const float *e = expert_out + (int64_t)s * n_embd;
        for (int64_t i = 0; i < n_embd; i++)
            y[i] += weight[s] * e[i];
    }
    if (shared_out) {
        const float g = cw_sigmoid(shared_logit);
        for (int64_t i = 0; i < n_embd; i++)
            y[i] += shared_out[i] * g;
    }
}
