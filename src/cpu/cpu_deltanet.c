/* cpu_deltanet.c — the Gated DeltaNet layer core (see cpu_deltanet.h). */
#include "cpu/cpu_deltanet.h"

#include <math.h>
#include <string.h>

#include "base/pool.h"
#include "cpu/cpu_gemv.h"
#include "cpu/cpu_ops.h"

int64_t cw_deltanet_channels(const struct cw_deltanet_dims *d)
{
    return 2 * (int64_t)d->n_k_head * d->d_k + (int64_t)d->n_v_head * d->d_v;
}

int64_t cw_deltanet_conv_state_floats(const struct cw_deltanet_dims *d)
{
    return cw_deltanet_channels(d) * (d->d_conv - 1);
}

int64_t cw_deltanet_delta_state_floats(const struct cw_deltanet_dims *d)
{
    return (int64_t)d->n_v_head * d->d_v * d->d_k;
}

int64_t cw_deltanet_scratch_floats(const struct cw_deltanet_dims *d)
{
    // one token: conv output u (C), beta and g (Hv each)
    return cw_deltanet_channels(d) + 2 * (int64_t)d->n_v_head;
}

int cw_deltanet_check(const struct cw_deltanet_dims *d, struct cw_err *err)
{
    if (d->n_k_head <= 0 || d->n_v_head <= 0 || d->d_k <= 0 || d->d_v <= 0 || d->d_conv <= 0)
        return cw_errf(err, CW_ERR_INVALID, "deltanet: dims must be positive (Hk %d Hv %d dk %d dv %d conv %d)",
                       d->n_k_head, d->n_v_head, d->d_k, d->d_v, d->d_conv);
    if (d->n_v_head % d->n_k_head)
        return cw_errf(err, CW_ERR_INVALID, "deltanet: Hv %d is not a multiple of Hk %d",
                       d->n_v_head, d->n_k_head);
    return 0;
}

void cw_deltanet_gates(const struct cw_deltanet_dims *d, const struct cw_deltanet_weights *w,
                       int64_t n_tok, const float *beta_logit, const float *alpha, float *beta,
                       float *g)
{
    const int hv = d->n_v_head;
    for (int64_t t = 0; t < n_tok; t++) {
        for (int h = 0; h < hv; h++) {
            beta[t * hv + h] = cw_sigmoid(beta_logit[t * hv + h]);
            g[t * hv + h] = cw_softplus(alpha[t * hv + h] + w->dt_bias[h]) * w->ssm_a[h];
        }
    }
}

void cw_deltanet_conv(const struct cw_deltanet_dims *d, const float *conv_w, float *conv_state,
                      int64_t n_tok, const float *m, float *u)
{
    const int64_t C = cw_deltanet_channels(d);
    const int nk = d->d_conv, ns = d->d_conv - 1;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *mt = m + t * C;
        float *ut = u + t * C;
        for (int64_t c = 0; c < C; c++) {
            float *s = conv_state + c * ns;
            const float *wc = conv_w + c * nk;
            // window = [s_0 .. s_{ns-1}, m_t]; tap nk-1 is the current token.
            // f32 sum in tap order, as ggml's ssm_conv.
            float acc = 0.0f;
            for (int k = 0; k < ns; k++)
                acc += s[k] * wc[k];
            acc += mt[c] * wc[ns];
            ut[c] = cw_silu(acc);
            if (ns > 0) {
                memmove(s, s + 1, (size_t)(ns - 1) * sizeof *s);
                s[ns - 1] = mt[c];
            }
        }
    }
}

void cw_deltanet_l2norm_qk(const struct cw_deltanet_dims *d, int64_t n_tok, float *u)
{
    const int64_t C = cw_deltanet_channels(d);
    const int n_heads = 2 * d->n_k_head; // q heads then k heads, contiguous
    for (int64_t t = 0; t < n_tok; t++)
        for (int h = 0; h < n_heads; h++) {
            float *x = u + t * C + (int64_t)h * d->d_k;
            cw_l2_norm(x, x, d->d_k, d->eps);
        }
}

/* Whether the AVX2 form of the delta rule serves these dims. */
static int head_simd(const struct cw_deltanet_dims *d)
{
#if defined(__x86_64__) || defined(__i386__)
    return d->d_k % 8 == 0 && d->d_v % 8 == 0 && cw_cpu_isa_best() >= CW_CPU_AVX2;
#else
    (void)d;
    return 0;
#endif
}

/* The delta rule for v-head h of one token (ut: its q̂ | k̂ | v row), into
 * oh; simd: the AVX2 form (head_simd said it serves), the same bits. */
static void recur_head(const struct cw_deltanet_dims *d, float *delta_state, const float *ut,
                       float g, float b, int h, float *oh, int simd)
{
    const int hk = d->n_k_head, dk = d->d_k, dv = d->d_v;
    const int64_t k_off = (int64_t)hk * dk, v_off = 2 * (int64_t)hk * dk;
    const float scale = 1.0f / sqrtf((float)dk);
    const int kh = h % hk; // tiled v -> k mapping (GGUF order)
    const float *q = ut + (int64_t)kh * dk;
    const float *k = ut + k_off + (int64_t)kh * dk;
    const float *v = ut + v_off + (int64_t)h * dv;
    const float decay = expf(g);
    float *S = delta_state + (int64_t)h * dv * dk;
#if defined(__x86_64__) || defined(__i386__)
    if (simd) {
        cw_deltanet_head_avx2(S, q, k, v, decay, b, scale, dk, dv, oh);
        return;
    }
#else
    (void)simd;
#endif
    // Column j of S is row j of the stored block (key index contiguous),
    // so every step is a contiguous pass over one row.
    for (int j = 0; j < dv; j++) {
        float *Sj = S + (int64_t)j * dk;
        float r = 0.0f;
        for (int i = 0; i < dk; i++) {
            Sj[i] *= decay;
            r += Sj[i] * k[i];
        }
        const float delta = (v[j] - r) * b;
        float acc = 0.0f;
        for (int i = 0; i < dk; i++) {
            Sj[i] += k[i] * delta;
            acc += Sj[i] * q[i];
        }
        oh[j] = acc * scale;
    }
}

void cw_deltanet_recur_simd(const struct cw_deltanet_dims *d, float *delta_state, int64_t n_tok,
                            const float *u, const float *g, const float *beta, float *o, int simd)
{
    const int64_t C = cw_deltanet_channels(d);
    const int hv = d->n_v_head, dv = d->d_v;
    simd = simd && head_simd(d);
    for (int64_t t = 0; t < n_tok; t++)
        for (int h = 0; h < hv; h++)
            recur_head(d, delta_state, u + t * C, g[t * hv + h], beta[t * hv + h], h,
                       o + t * (int64_t)hv * dv + (int64_t)h * dv, simd);
}

void cw_deltanet_recur(const struct cw_deltanet_dims *d, float *delta_state, int64_t n_tok,
                       const float *u, const float *g, const float *beta, float *o)
{
    cw_deltanet_recur_simd(d, delta_state, n_tok, u, g, beta, o, 1);
}

/* RMSNorm ⊙ silu(z) of one head's row (y may alias o). */
static void gated_norm_row(const struct cw_deltanet_dims *d, const float *norm, const float *orow,
                           const float *zrow, float *yrow)
{
    cw_rms_norm(yrow, orow, norm, d->d_v, d->eps);
    for (int i = 0; i < d->d_v; i++)
        yrow[i] *= cw_silu(zrow[i]);
}

void cw_deltanet_gated_norm(const struct cw_deltanet_dims *d, const float *norm, int64_t n_tok,
                            const float *o, const float *z, float *y)
{
    const int64_t n = (int64_t)n_tok * d->n_v_head;
    for (int64_t r = 0; r < n; r++)
        gated_norm_row(d, norm, o + r * d->d_v, z + r * d->d_v, y + r * d->d_v);
}

/* One token's heads, a share per thread of the pool: each v-head's delta
 * rule and gated norm touch only its own state and rows, so the split
 * changes no arithmetic. */
struct dn_heads_job {
    const struct cw_deltanet_dims *d;
    const struct cw_deltanet_weights *w;
    float *delta;
    const float *u, *g, *beta, *z;
    float *y;
    int simd;
};

static void dn_heads(void *p, int ith, int nth)
{
    const struct dn_heads_job *j = p;
    const int hv = j->d->n_v_head, dv = j->d->d_v;
    for (int h = hv * ith / nth; h < hv * (ith + 1) / nth; h++) {
        float *yh = j->y + (int64_t)h * dv;
        recur_head(j->d, j->delta, j->u, j->g[h], j->beta[h], h, yh, j->simd);
        gated_norm_row(j->d, j->w->norm, yh, j->z + (int64_t)h * dv, yh);
    }
}

int cw_deltanet_forward_pool(struct cw_pool *pool, const struct cw_deltanet_dims *d,
                             const struct cw_deltanet_weights *w, struct cw_deltanet_state *st,
                             int64_t n_tok, const float *m, const float *z,
                             const float *beta_logit, const float *alpha, float *y,
                             float *scratch, struct cw_err *err)
{
    if (cw_deltanet_check(d, err))
        return -1;
    if (n_tok < 0)
        return cw_errf(err, CW_ERR_INVALID, "deltanet: n_tok %lld < 0", (long long)n_tok);
    const int64_t C = cw_deltanet_channels(d);
    const int64_t hv = d->n_v_head, vd = hv * d->d_v;
    float *u = scratch, *beta = u + C, *g = beta + hv;
    const int threaded = pool && cw_pool_size(pool) > 1 && hv > 1, simd = head_simd(d);
    // Token by token: the only state that crosses tokens is st, so a prompt
    // and the same tokens one at a time run identical arithmetic.
    for (int64_t t = 0; t < n_tok; t++) {
        cw_deltanet_gates(d, w, 1, beta_logit + t * hv, alpha + t * hv, beta, g);
        cw_deltanet_conv(d, w->conv, st->conv, 1, m + t * C, u);
        cw_deltanet_l2norm_qk(d, 1, u);
        struct dn_heads_job j = {d, w, st->delta, u, g, beta, z + t * vd, y + t * vd, simd};
        if (threaded)
            cw_pool_run(pool, dn_heads, &j);
        else
            dn_heads(&j, 0, 1);
    }
    return 0;
}

int cw_deltanet_forward(const struct cw_deltanet_dims *d, const struct cw_deltanet_weights *w,
                        struct cw_deltanet_state *st, int64_t n_tok, const float *m,
                        const float *z, const float *beta_logit, const float *alpha, float *y,
                        float *scratch, struct cw_err *err)
{
    return cw_deltanet_forward_pool(NULL, d, w, st, n_tok, m, z, beta_logit, alpha, y, scratch,
                                    err);
}
