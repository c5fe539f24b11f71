/* sampler.h — choosing the next token from a row of logits.
 *
 * Owns the sampling chain every front end uses (CLI and server): logit bias,
 * repetition / presence / frequency penalties over the recent tokens, then
 * greedy at temperature 0, else top-k → top-p → min-p (on the untempered
 * distribution, as llama.cpp's default chain does) → temperature → a draw
 * from a seeded generator, so that the same seed gives the same output.
 * Parameters are validated once (cw_sampler_init); sampling never allocates
 * after init. */
#ifndef CW_SAMPLER_H
#define CW_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct cw_logit_bias {
    int32_t token;
    float bias; /* added to the logit; -INFINITY bans the token */
};

struct cw_sampling {
    float temperature;        /* 0: greedy */
    int32_t top_k;            /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; > 1 discourages repeats */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    int32_t penalty_last_n;   /* tokens looked back for penalties; -1: all */
    uint64_t seed;
    const struct cw_logit_bias *bias; /* borrowed for the sampler's lifetime */
    int32_t n_bias;
};

/* Defaults: temperature 1, top_p 1, everything else off, seed 0. */
struct cw_sampling cw_sampling_default(void);

struct cw_sampler {
    struct cw_sampling p;
    int32_t n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    float *work;       /* n_vocab logits after bias/penalties */
    int32_t *idx;      /* candidate ids */
    int32_t *history;  /* ring of recent tokens for penalties */
    int32_t n_hist, cap_hist, head_hist;
    uint16_t *counts;  /* occurrences within the window, per token */
    uint8_t *seen;     /* scratch marks, all zero between calls */
};

/* Checks p (ranges, bias ids < n_vocab) and allocates the work buffers. */
int cw_sampler_init(struct cw_sampler *s, const struct cw_sampling *p, int32_t n_vocab,
                    struct cw_err *err);
void cw_sampler_free(struct cw_sampler *s);

/* Records a token as generated (or as prompt context, for penalties). */
void cw_sampler_accept(struct cw_sampler *s, int32_t token);

/* Picks the next token from logits[n_vocab] (not modified). */
int32_t cw_sampler_sample(struct cw_sampler *s, const float *logits);

/* Index of the largest logit; the lowest index wins a tie. */
int32_t cw_argmax(const float *logits, int32_t n);

#endif
