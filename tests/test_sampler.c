/* test_sampler.c — the sampling chain: greedy, filters, penalties, seeds,
 * and draws that follow the distribution they claim. */
#include <math.h>
#include <string.h>

#include "engine/sampler.h"
#include "test.h"

#define V 50

static void fill(float *l, uint64_t seed)
{
    for (int i = 0; i < V; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((seed >> 40) % 1000) / 100.0f - 5.0f;
    }
}

static int32_t one(const struct cw_sampling *p, const float *l)
{
    struct cw_sampler s;
    struct cw_err err = {0};
    if (cw_sampler_init(&s, p, V, &err))
        return -1;
    int32_t t = cw_sampler_sample(&s, l);
    cw_sampler_free(&s);
    return t;
}

int main(void)
{
    float l[V];
    fill(l, 1);
    int32_t best = cw_argmax(l, V);
    struct cw_err err = {0};

    /* greedy and the filters that reduce to it */
    struct cw_sampling p = cw_sampling_default();
    p.temperature = 0;
    ok(one(&p, l) == best, "temperature 0 is argmax");
    p = cw_sampling_default();
    p.top_k = 1;
    ok(one(&p, l) == best, "top_k 1 is argmax");
    p = cw_sampling_default();
    p.top_p = 1e-6f;
    ok(one(&p, l) == best, "tiny top_p is argmax");
    p = cw_sampling_default();
    p.min_p = 1.0f;
    ok(one(&p, l) == best, "min_p 1 is argmax");

    /* same seed, same sequence; another seed, another sequence */
    p = cw_sampling_default();
    p.seed = 42;
    struct cw_sampler a, b, c;
    cw_sampler_init(&a, &p, V, &err);
    cw_sampler_init(&b, &p, V, &err);
    p.seed = 43;
    cw_sampler_init(&c, &p, V, &err);
    int same = 1, differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = cw_sampler_sample(&a, l), y = cw_sampler_sample(&b, l), z = cw_sampler_sample(&c, l);
        same &= x == y;
        differ |= x != z;
    }
    ok(same, "same seed reproduces");
    ok(differ, "another seed differs");
    cw_sampler_free(&a);
    cw_sampler_free(&b);
    cw_sampler_free(&c);

    /* draws follow softmax(l / T) restricted to the top-k: chi-square-like check */
    p = cw_sampling_default();
    p.temperature = 0.7f;
    p.top_k = 5;
    p.seed = 7;
    cw_sampler_init(&a, &p, V, &err);
    int counts[V] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++)
        counts[cw_sampler_sample(&a, l)]++;
    cw_sampler_free(&a);
    int order[V];
    for (int i = 0; i < V; i++)
        order[i] = i;
    for (int i = 0; i < V; i++) /* selection sort by logit, descending */
        for (int j = i + 1; j < V; j++)
            if (l[order[j]] > l[order[i]] || (l[order[j]] == l[order[i]] && order[j] < order[i])) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += exp(l[order[i]] / 0.7);
    double worst = 0;
    int outside = 0;
    for (int i = 0; i < V; i++) {
        int rank = 0;
        while (order[rank] != i)
            rank++;
        if (rank >= 5) {
            outside += counts[i];
            continue;
        }
        double pr = exp(l[i] / 0.7) / z, sd = sqrt(N * pr * (1 - pr));
        double dev = fabs(counts[i] - N * pr) / sd;
        if (dev > worst)
            worst = dev;
    }
    ok(outside == 0, "nothing drawn outside the top-k (%d)", outside);
    ok(worst < 5.0, "draw frequencies within 5 sigma of softmax (worst %.2f)", worst);

    /* penalties push a repeated token down; presence applies once, frequency per count */
    float flat[V];
    for (int i = 0; i < V; i++)
        flat[i] = 0.0f;
    flat[3] = 2.0f;
    flat[4] = 1.9f;
    p = cw_sampling_default();
    p.temperature = 0;
    p.repetition_penalty = 1.1f;
    cw_sampler_init(&a, &p, V, &err);
    ok(cw_sampler_sample(&a, flat) == 3, "no history: best token");
    cw_sampler_accept(&a, 3);
    ok(cw_sampler_sample(&a, flat) == 4, "repetition penalty moves off token 3");
    cw_sampler_free(&a);
    p = cw_sampling_default();
    p.temperature = 0;
    p.frequency_penalty = 0.06f;
    cw_sampler_init(&a, &p, V, &err);
    cw_sampler_accept(&a, 3);
    ok(cw_sampler_sample(&a, flat) == 3, "one occurrence × 0.06 keeps token 3 ahead");
    cw_sampler_accept(&a, 3);
    ok(cw_sampler_sample(&a, flat) == 4, "two occurrences × 0.06 drop it behind");
    cw_sampler_free(&a);
    p = cw_sampling_default();
    p.temperature = 0;
    p.penalty_last_n = 2;
    p.presence_penalty = 0.5f;
    cw_sampler_init(&a, &p, V, &err);
    cw_sampler_accept(&a, 3);
    cw_sampler_accept(&a, 10);
    cw_sampler_accept(&a, 11);
    ok(cw_sampler_sample(&a, flat) == 3, "a token that left the window is not penalised");
    cw_sampler_free(&a);

    /* logit bias, including a ban */
    struct cw_logit_bias bias[2] = {{3, -INFINITY}, {7, 5.0f}};
    p = cw_sampling_default();
    p.temperature = 0;
    p.bias = bias;
    p.n_bias = 2;
    ok(one(&p, flat) == 7, "bias lifts token 7 above the banned token 3");
    p.temperature = 1.0f;
    p.n_bias = 1;
    cw_sampler_init(&a, &p, V, &err);
    int banned = 0;
    for (int i = 0; i < 2000; i++)
        banned += cw_sampler_sample(&a, flat) == 3;
    cw_sampler_free(&a);
    ok(banned == 0, "a banned token is never drawn");

    /* bad parameters are refused with a message */
    struct {
        struct cw_sampling p;
        const char *what;
    } bad[] = {
        {{.temperature = -1, .top_p = 1, .repetition_penalty = 1}, "temperature"},
        {{.temperature = 1, .top_p = 0, .repetition_penalty = 1}, "top_p"},
        {{.temperature = 1, .top_p = 1.5f, .repetition_penalty = 1}, "top_p"},
        {{.temperature = 1, .top_p = 1, .min_p = -0.1f, .repetition_penalty = 1}, "min_p"},
        {{.temperature = 1, .top_p = 1, .top_k = -2, .repetition_penalty = 1}, "top_k"},
        {{.temperature = 1, .top_p = 1, .repetition_penalty = 0}, "repetition_penalty"},
        {{.temperature = NAN, .top_p = 1, .repetition_penalty = 1}, "temperature"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cw_sampler_init(&a, &bad[i].p, V, &err);
        ok(rc == -1 && strstr(err.msg, bad[i].what), "bad %s refused: %s", bad[i].what, err.msg);
    }
    struct cw_logit_bias oob = {V, 1.0f};
    p = cw_sampling_default();
    p.bias = &oob;
    p.n_bias = 1;
    ok(cw_sampler_init(&a, &p, V, &err) == -1 && strstr(err.msg, "logit_bias"), "bias id out of range: %s",
       err.msg);
    return done();
}
