/* cpu_attn.c — gated full-attention core (see cpu_attn.h). */
#include "cpu/cpu_attn.h"

#include <math.h>
#include <string.h>

#include "base/pool.h"
#include "cpu/cpu_gemv.h"

/* f16 → f32 for the cache reads of the core: normal numbers by moving the
 * bits (exact), the rest (zero, subnormal, inf, nan) by the general
 * conversion. The core reads every cached value once per query head, so
 * this is its hottest step after the products. */
static inline float kv_f32(cw_f16 h)
{
    const uint32_t e = h & 0x7c00u;
    if (e == 0 || e == 0x7c00u)
        return cw_f16_to_f32(h);
    const uint32_t bits = ((uint32_t)(h & 0x8000u) << 16) | (((uint32_t)(h & 0x7fffu) << 13) +
                                                             ((uint32_t)(127 - 15) << 23));
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

int64_t cw_attn_scratch_floats(const struct cw_attn_dims *d, int64_t n_ctx)
{
    // q and gate (H*hd each), k (Hkv*hd), scores (n_ctx), rope cache (n_rot)
    return 2 * (int64_t)d->n_head * d->head_dim + (int64_t)d->n_head_kv * d->head_dim + n_ctx +
           d->rope.n_rot;
}

int cw_attn_check(const struct cw_attn_dims *d, struct cw_err *err)
{
    if (d->n_head <= 0 || d->n_head_kv <= 0 || d->head_dim <= 0)
        return cw_errf(err, CW_ERR_INVALID, "attn: dims must be positive (H %d Hkv %d hd %d)",
                       d->n_head, d->n_head_kv, d->head_dim);
    if (d->n_head % d->n_head_kv)
        return cw_errf(err, CW_ERR_INVALID, "attn: H %d is not a multiple of Hkv %d", d->n_head,
                       d->n_head_kv);
    const int *s = d->rope.sections;
    if (d->rope.n_rot <= 0 || d->rope.n_rot % 2 || d->rope.n_rot > d->head_dim ||
        s[0] + s[1] + s[2] + s[3] <= 0)
        return cw_errf(err, CW_ERR_INVALID, "attn: bad rope (n_rot %d, head_dim %d)",
                       d->rope.n_rot, d->head_dim);
    return 0;
}

void cw_attn_head_norm(const struct cw_attn_dims *d, const float *w, float *x, int n_head)
{
    cw_rms_norm_rows(x, x, w, d->head_dim, n_head, d->eps);
}

void cw_attn_split_q(const struct cw_attn_dims *d, const float *q_norm, const float *P_row,
                     float *q, float *gate)
{
    const int hd = d->head_dim;
    for (int h = 0; h < d->n_head; h++) {
        // per head [q | gate]: HF's view(H, 2*hd).chunk(2)
        memcpy(q + (int64_t)h * hd, P_row + 2 * (int64_t)h * hd, (size_t)hd * sizeof *q);
        memcpy(gate + (int64_t)h * hd, P_row + 2 * (int64_t)h * hd + hd, (size_t)hd * sizeof *q);
    }
    cw_attn_head_norm(d, q_norm, q, d->n_head);
}

static int rope_at(const struct cw_attn_dims *d, float *x, int n_head, int64_t pos, float *cs)
{
    int32_t p4[4];
    cw_rope_text_pos(p4, pos);
    if (cw_rope_cache(cs, &d->rope, p4))
        return -1;
    cw_rope_apply(x, cs, d->rope.n_rot, d->head_dim, n_head);
    return 0;
}

int cw_attn_rope(const struct cw_attn_dims *d, float *x, int n_head, int64_t pos)
{
    float cs[512];
    if (d->rope.n_rot > (int)(sizeof cs / sizeof *cs))
        return -1;
    return rope_at(d, x, n_head, pos, cs);
}

void cw_attn_store_kv(const struct cw_attn_dims *d, struct cw_kv_cache *kv, int64_t pos,
                      const float *k, const float *v)
{
    const int64_t n = (int64_t)d->n_head_kv * d->head_dim;
    cw_f16 *kr = kv->k + pos * n, *vr = kv->v + pos * n;
    for (int64_t i = 0; i < n; i++) {
        kr[i] = cw_f32_to_f16(k[i]);
        vr[i] = cw_f32_to_f16(v[i]);
    }
}

void cw_attn_core_simd(const struct cw_attn_dims *d, const struct cw_kv_cache *kv, int64_t pos,
                       const float *q, float *o, float *scores, int simd)
{
    const int hd = d->head_dim, group = d->n_head / d->n_head_kv;
    const int64_t row = (int64_t)d->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#if defined(__x86_64__) || defined(__i386__)
    simd = simd && hd % 64 == 0 && cw_cpu_isa_best() >= CW_CPU_AVX2;
#else
    simd = 0;
#endif
    for (int h = 0; h < d->n_head; h++) {
        const int kvh = h / group; // blocked GQA (ggml broadcast i02 = i12 / r2)
        const float *qh = q + (int64_t)h * hd;
        float *oh = o + (int64_t)h * hd;
        const cw_f16 *kh = kv->k + (int64_t)kvh * hd, *vh = kv->v + (int64_t)kvh * hd;
        int64_t p0 = 0;
#if defined(__x86_64__) || defined(__i386__)
        if (simd)
            p0 = cw_attn_scores_avx2(qh, kh, row, hd, pos + 1, scale, scores);
#endif
        for (int64_t p = p0; p <= pos; p++) {
            const cw_f16 *kr = kh + p * row;
            float s = 0.0f;
            for (int i = 0; i < hd; i++)
                s += qh[i] * kv_f32(kr[i]);
            scores[p] = s * scale;
        }
        float max = -INFINITY;
        for (int64_t p = 0; p <= pos; p++)
            max = scores[p] > max ? scores[p] : max;
        double sum = 0.0;
        for (int64_t p = 0; p <= pos; p++) {
            scores[p] = expf(scores[p] - max);
            sum += (double)scores[p];
        }
#if defined(__x86_64__) || defined(__i386__)
        if (simd)
            cw_attn_values_avx2(scores, vh, row, hd, pos + 1, oh);
#endif
        if (!simd) {
            for (int i = 0; i < hd; i++)
                oh[i] = 0.0f;
            for (int64_t p = 0; p <= pos; p++) {
                const cw_f16 *vr = vh + p * row;
                const float pw = scores[p];
                for (int i = 0; i < hd; i++)
                    oh[i] += pw * kv_f32(vr[i]);
            }
        }
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < hd; i++)
            oh[i] *= inv;
    }
}

void cw_attn_core(const struct cw_attn_dims *d, const struct cw_kv_cache *kv, int64_t pos,
                  const float *q, float *o, float *scores)
{
    cw_attn_core_simd(d, kv, pos, q, o, scores, 1);
}

void cw_attn_gate(float *o, const float *gate, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] *= cw_sigmoid(gate[i]);
}

/* Step 2 for the tokens ith, ith+nth, …: each thread has its own scratch
 * (q, gate, scores, rope cache), so a token's arithmetic is the same
 * whichever thread runs it. */
struct attn_job {
    const struct cw_attn_dims *d;
    const struct cw_attn_weights *w;
    const struct cw_kv_cache *kv;
    int64_t pos0, n_tok, per_thread;
    const float *P;
    float *out, *scratch;
};

static void attn_queries(void *p, int ith, int nth)
{
    const struct attn_job *j = p;
    const struct cw_attn_dims *d = j->d;
    const int64_t qn = (int64_t)d->n_head * d->head_dim, kn = (int64_t)d->n_head_kv * d->head_dim;
    float *q = j->scratch + ith * j->per_thread, *gate = q + qn, *scores = gate + qn + kn;
    float *cs = scores + j->kv->n_ctx;
    for (int64_t t = ith; t < j->n_tok; t += nth) {
        cw_attn_split_q(d, j->w->q_norm, j->P + t * 2 * qn, q, gate);
        rope_at(d, q, d->n_head, j->pos0 + t, cs);
        cw_attn_core(d, j->kv, j->pos0 + t, q, j->out + t * qn, scores);
        cw_attn_gate(j->out + t * qn, gate, qn);
    }
}

int cw_attn_forward_pool(struct cw_pool *pool, const struct cw_attn_dims *d,
                         const struct cw_attn_weights *w, struct cw_kv_cache *kv, int64_t pos0,
                         int64_t n_tok, const float *P, const float *k, const float *v,
                         float *out, float *scratch, struct cw_err *err)
{
    if (cw_attn_check(d, err))
        return -1;
    if (pos0 < 0 || n_tok < 0 || pos0 + n_tok > kv->n_ctx)
        return cw_errf(err, CW_ERR_INVALID, "attn: positions %lld..%lld outside the cache (%lld rows)",
                       (long long)pos0, (long long)(pos0 + n_tok - 1), (long long)kv->n_ctx);
    const int H = d->n_head, Hkv = d->n_head_kv;
    const int64_t qn = (int64_t)H * d->head_dim, kn = (int64_t)Hkv * d->head_dim;
    float *kt = scratch + 2 * qn, *cs = kt + kn + kv->n_ctx;
    // 1. all tokens' K and V into the cache; the causal bound in step 2 keeps
    //    row t from seeing rows written for later tokens of this call.
    for (int64_t t = 0; t < n_tok; t++) {
        memcpy(kt, k + t * kn, (size_t)kn * sizeof *kt);
        cw_attn_head_norm(d, w->k_norm, kt, Hkv);
        rope_at(d, kt, Hkv, pos0 + t, cs);
        cw_attn_store_kv(d, kv, pos0 + t, kt, v + t * kn);
    }
    // 2. each query row over rows 0..its position, the rows spread over the threads
    struct attn_job j = {d, w, kv, pos0, n_tok, cw_attn_scratch_floats(d, kv->n_ctx), P, out,
                         scratch};
    if (!pool || n_tok == 1 || cw_pool_size(pool) == 1)
        attn_queries(&j, 0, 1);
    else
        cw_pool_run(pool, attn_queries, &j);
    return 0;
}

int cw_attn_forward(const struct cw_attn_dims *d, const struct cw_attn_weights *w,
                    struct cw_kv_cache *kv, int64_t pos0, int64_t n_tok, const float *P,
                    const float *k, const float *v, float *out, float *scratch,
                    struct cw_err *err)
{
    return cw_attn_forward_pool(NULL, d, w, kv, pos0, n_tok, P, k, v, out, scratch, err);
}
