/* sampler.c — the sampling chain (see sampler.h). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cw_sampling cw_sampling_default(void)
{
    return (struct cw_sampling){
        .temperature = 1.0f,
        .top_p = 1.0f,
        .repetition_penalty = 1.0f,
        .penalty_last_n = 64,
    };
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t next_u64(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

int cw_sampler_init(struct cw_sampler *s, const struct cw_sampling *p, int32_t n_vocab,
                    struct cw_err *err)
{
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0)
        return cw_errf(err, CW_ERR_INVALID, "sampler: vocabulary size %d", n_vocab);
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return cw_errf(err, CW_ERR_INVALID, "sampler: temperature must be >= 0, got %g", p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return cw_errf(err, CW_ERR_INVALID, "sampler: top_p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return cw_errf(err, CW_ERR_INVALID, "sampler: min_p must be in [0, 1], got %g", p->min_p);
    if (p->top_k < 0)
        return cw_errf(err, CW_ERR_INVALID, "sampler: top_k must be >= 0, got %d", p->top_k);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return cw_errf(err, CW_ERR_INVALID, "sampler: repetition_penalty must be > 0, got %g",
                       p->repetition_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return cw_errf(err, CW_ERR_INVALID, "sampler: presence/frequency penalties must be finite");
    if (p->penalty_last_n < -1)
        return cw_errf(err, CW_ERR_INVALID, "sampler: penalty_last_n must be >= -1");
    for (int32_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].token < 0 || p->bias[i].token >= n_vocab)
            return cw_errf(err, CW_ERR_INVALID, "sampler: logit_bias token %d outside the vocabulary (0..%d)",
                           p->bias[i].token, n_vocab - 1);
        if (isnan(p->bias[i].bias) || p->bias[i].bias == INFINITY)
            return cw_errf(err, CW_ERR_INVALID, "sampler: logit_bias for token %d is not a number or -inf",
                           p->bias[i].token);
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cap_hist = p->penalty_last_n < 0 ? 1 << 20 : (p->penalty_last_n ? p->penalty_last_n : 1);
    s->work = malloc(sizeof(float) * (size_t)n_vocab);
    s->idx = malloc(sizeof(int32_t) * (size_t)n_vocab);
    s->history = malloc(sizeof(int32_t) * (size_t)s->cap_hist);
    s->counts = calloc((size_t)n_vocab, sizeof(uint16_t));
    s->seen = calloc((size_t)n_vocab, 1);
    if (!s->work || !s->idx || !s->history || !s->counts || !s->seen) {
        cw_sampler_free(s);
        return cw_errf(err, CW_ERR_NOMEM, "sampler: out of memory for %d tokens", n_vocab);
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    return 0;
}

void cw_sampler_free(struct cw_sampler *s)
{
    free(s->work);
    free(s->idx);
    free(s->history);
    free(s->counts);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

void cw_sampler_accept(struct cw_sampler *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab || s->p.penalty_last_n == 0)
        return;
    if (s->n_hist == s->cap_hist) { /* window full: the oldest leaves */
        int32_t old = s->history[s->head_hist];
        s->counts[old]--;
        s->history[s->head_hist] = token;
        s->head_hist = (s->head_hist + 1) % s->cap_hist;
    } else {
        s->history[(s->head_hist + s->n_hist) % s->cap_hist] = token;
        s->n_hist++;
    }
    if (s->counts[token] < UINT16_MAX)
        s->counts[token]++;
}

int32_t cw_argmax(const float *logits, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Bias, then penalties on the tokens in the window: the repetition and
 * presence terms once per distinct token, frequency once per occurrence. */
static void adjust(struct cw_sampler *s, const float *logits)
{
    float *w = s->work;
    memcpy(w, logits, sizeof(float) * (size_t)s->n_vocab);
    for (int32_t i = 0; i < s->p.n_bias; i++)
        w[s->p.bias[i].token] += s->p.bias[i].bias;
    const struct cw_sampling *p = &s->p;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    for (int32_t h = 0; h < s->n_hist; h++) {
        int32_t t = s->history[(s->head_hist + h) % s->cap_hist];
        if (s->seen[t])
            continue;
        s->seen[t] = 1;
        float v = w[t];
        v = v > 0 ? v / p->repetition_penalty : v * p->repetition_penalty;
        w[t] = v - p->presence_penalty - (float)s->counts[t] * p->frequency_penalty;
    }
    for (int32_t h = 0; h < s->n_hist; h++)
        s->seen[s->history[(s->head_hist + h) % s->cap_hist]] = 0;
}

static int cmp_desc(const void *a, const void *b, void *ctx)
{
    const float *w = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (w[x] != w[y])
        return w[x] < w[y] ? 1 : -1;
    return x < y ? -1 : x > y; /* ties: lower id first, for determinism */
}

/* Heap whose root is the worst candidate kept (latest in cmp_desc order). */
static void sift_down(int32_t *h, int32_t m, int32_t pos, const float *w)
{
    for (;;) {
        int32_t l = 2 * pos + 1, r = l + 1, worst = pos;
        if (l < m && cmp_desc(&h[l], &h[worst], (void *)w) > 0)
            worst = l;
        if (r < m && cmp_desc(&h[r], &h[worst], (void *)w) > 0)
            worst = r;
        if (worst == pos)
            return;
        int32_t tmp = h[worst];
        h[worst] = h[pos];
        h[pos] = tmp;
        pos = worst;
    }
}

/* Moves the k best candidates to the front of idx[0..n), sorted: O(n log k). */
static void select_top_k(int32_t *idx, int32_t n, int32_t k, const float *w)
{
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        sift_down(idx, k, i, w);
    for (int32_t i = k; i < n; i++) {
        if (cmp_desc(&idx[i], &idx[0], (void *)w) < 0) { /* better than the worst kept */
            int32_t tmp = idx[0];
            idx[0] = idx[i];
            idx[i] = tmp;
            sift_down(idx, k, 0, w);
        }
    }
    qsort_r(idx, (size_t)k, sizeof(int32_t), cmp_desc, (void *)w);
}

int32_t cw_sampler_sample(struct cw_sampler *s, const float *logits)
{
    adjust(s, logits);
    const float *w = s->work;
    if (s->p.temperature == 0.0f)
        return cw_argmax(w, s->n_vocab);

    /* candidates: finite logits; sorted only where a filter needs order */
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (w[i] > -INFINITY)
            s->idx[n++] = i;
    if (n == 0)
        return cw_argmax(logits, s->n_vocab); /* everything banned: fall back */
    if (s->p.top_k > 0 && s->p.top_k < n) {
        select_top_k(s->idx, n, s->p.top_k, w);
        n = s->p.top_k;
    } else if (s->p.top_p < 1.0f) {
        qsort_r(s->idx, (size_t)n, sizeof(int32_t), cmp_desc, s->work);
    }
    double max = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (w[s->idx[i]] > max)
            max = w[s->idx[i]];

    /* top-p (candidates are sorted here) and min-p, on the untempered
     * distribution */
    if (s->p.top_p < 1.0f) {
        double z = 0, cum = 0;
        for (int32_t i = 0; i < n; i++)
            z += exp((double)w[s->idx[i]] - max);
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)w[s->idx[i]] - max) / z;
            if (cum >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        double floor_logit = max + log((double)s->p.min_p);
        int32_t keep = 0;
        for (int32_t i = 0; i < n; i++)
            if ((double)w[s->idx[i]] >= floor_logit)
                s->idx[keep++] = s->idx[i];
        n = keep;
    }

    /* temperature, then a draw */
    double t = s->p.temperature, zt = 0;
    for (int32_t i = 0; i < n; i++)
        zt += exp(((double)w[s->idx[i]] - max) / t);
    double r = next_unit(s->rng) * zt, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp(((double)w[s->idx[i]] - max) / t);
        if (r < acc)
            return s->idx[i];
    }
    return s->idx[n - 1];
}
