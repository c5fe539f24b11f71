/* cpu_backend.c — the CPU forward pass behind the backend contract
 * (backend.h): a thin adapter over cpu_forward.h. */
#include <stdlib.h>

#include "backend.h"
#include "cpu/cpu_forward.h"

struct cpu_backend {
    struct cw_backend base; /* first: the contract's view */
    struct cw_cpu_model m;
};

struct cw_bseq {
    struct cw_cpu_seq s;
    float *logits;        /* rows for an argmax asked without logits */
    int64_t logits_rows;  /* grown to the most rows asked, so decode never allocates */
};

static struct cpu_backend *cpu_of(struct cw_backend *b)
{
    return (struct cpu_backend *)b;
}

static void cpu_close(struct cw_backend *b)
{
    free(b);
}

static int cpu_seq_new(struct cw_backend *b, struct cw_bseq **out, struct cw_err *err)
{
    struct cw_bseq *s = calloc(1, sizeof *s);
    if (!s)
        return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for a sequence");
    if (cw_cpu_seq_init(&s->s, &cpu_of(b)->m, err)) {
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

static void cpu_seq_free(struct cw_backend *b, struct cw_bseq *s)
{
    (void)b;
    if (!s)
        return;
    cw_cpu_seq_free(&s->s);
    free(s->logits);
    free(s);
}

static void cpu_seq_reset(struct cw_backend *b, struct cw_bseq *s)
{
    cw_cpu_seq_reset(&s->s, &cpu_of(b)->m);
}

static int64_t cpu_seq_pos(struct cw_backend *b, const struct cw_bseq *s)
{
    (void)b;
    return s->s.n_past;
}

/* index of the largest logit; the lowest index wins a tie (as the sampler's) */
static int32_t argmax_row(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* the argmax rows the caller asked for, from the logits just written */
static void fill_argmax(const struct cw_backend *b, const struct cw_fwd_out *o, int64_t n)
{
    const int32_t V = (int32_t)b->w->hp.n_vocab;
    int64_t rows = o->all_logits ? n : 1;
    for (int64_t r = 0; r < rows; r++)
        o->argmax[r] = argmax_row(o->logits + r * V, V);
}

/* The CPU computes logits on the host anyway; argmax without logits puts
 * them in the sequence's own buffer. */
static int with_logits(struct cw_backend *b, struct cw_bseq *s, const struct cw_fwd_out *o,
                       int64_t n, struct cw_fwd_out *tmp, struct cw_err *err)
{
    *tmp = *o;
    if (o->logits || !o->argmax)
        return 0;
    const int64_t rows = o->all_logits ? n : 1;
    if (rows > s->logits_rows) {
        float *p = realloc(s->logits, (size_t)rows * b->w->hp.n_vocab * sizeof(float));
        if (!p)
            return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for logits");
        s->logits = p;
        s->logits_rows = rows;
    }
    tmp->logits = s->logits;
    return 0;
}

/* Both passes: the main model (hidden_prev NULL) or the MTP block. */
static int run_pass(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens,
                    const float *hidden_prev, int64_t n, const struct cw_fwd_out *out,
                    struct cw_err *err)
{
    struct cw_fwd_out o;
    if (with_logits(b, s, out, n, &o, err))
        return -1;
    struct cw_cpu_model *m = &cpu_of(b)->m;
    int rc = hidden_prev ? cw_cpu_forward_mtp(m, &s->s, tokens, hidden_prev, n, o.logits,
                                              o.all_logits, o.hidden, err)
                         : cw_cpu_forward(m, &s->s, tokens, n, o.logits, o.all_logits, o.hidden,
                                          err);
    if (!rc && o.argmax && o.logits)
        fill_argmax(b, &o, n);
    return rc;
}

static int cpu_forward(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens, int64_t n,
                       const struct cw_fwd_out *out, struct cw_err *err)
{
    return run_pass(b, s, tokens, NULL, n, out, err);
}

static int cpu_forward_mtp(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens,
                           const float *hidden_prev, int64_t n, const struct cw_fwd_out *out,
                           struct cw_err *err)
{
    if (!hidden_prev)
        return cw_errf(err, CW_ERR_INVALID, "cpu: mtp: no hidden states given");
    return run_pass(b, s, tokens, hidden_prev, n, out, err);
}

static const struct cw_backend_ops cpu_ops = {
    .name = "cpu",
    .close = cpu_close,
    .seq_new = cpu_seq_new,
    .seq_free = cpu_seq_free,
    .seq_reset = cpu_seq_reset,
    .seq_pos = cpu_seq_pos,
    .forward = cpu_forward,
    .forward_mtp = cpu_forward_mtp,
};

int cw_backend_open_cpu(struct cw_backend **out, const struct cw_qwen35_weights *w,
                        const struct cw_backend_opts *o, struct cw_err *err)
{
    struct cpu_backend *b = calloc(1, sizeof *b);
    if (!b)
        return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory");
    if (cw_cpu_model_init(&b->m, w, o->pool, o->n_ctx_max, err)) {
        free(b);
        return -1;
    }
    b->base.ops = &cpu_ops;
    b->base.w = w;
    b->base.n_ctx_max = b->m.n_ctx_max;
    *out = &b->base;
    return 0;
}
