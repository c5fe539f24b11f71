/* engine.c — implements cwen.h: one model, one sequence, one request at a time.
 *
 * Owns opening a GGUF into a ready engine (hparams, bound weights, the CPU
 * forward with its thread pool, the tokenizer, the recognised chat template,
 * the model's names) and the generation loop: prefill the prompt, then
 * sample → detokenize (UTF-8 whole, invalid bytes as U+FFFD) → the text
 * pipeline of outstream.h (stop strings, reasoning / answer / tool calls)
 * → events to the caller, which may cancel after any of them. Usage and
 * timings are counted here. There is no prefix cache yet: every request
 * starts from an empty sequence (n_cached = 0). The batching scheduler will
 * replace the single sequence; cwen.h stays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "base/pool.h"
#include "cwen.h"
#include "gguf/gguf.h"
#include "engine/outstream.h"
#include "model/chat_template.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#include "model/tokenizer.h"

#define PREFILL_CHUNK 512

struct cwen {
    struct cw_gguf g;
    struct cw_qwen35_weights w;
    struct cw_pool pool;
    bool has_pool;
    struct cw_backend *be;
    struct cw_bseq *seq;
    struct cw_tokenizer tok;
    struct cw_chat_template tmpl;
    bool has_tmpl;
    char tmpl_err[600];
    struct cwen_info info;
    char *model_name, *file_name, *file_stem;
    float *logits;     /* [n_vocab] */
    struct cwen_logprob *top; /* [CWEN_MAX_TOP_LOGPROBS] */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static char *xstrndup(const char *s, size_t n)
{
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = 0;
    }
    return r;
}

int cwen_open(cwen **out, const struct cwen_opts *opts, struct cw_err *err)
{
    *out = NULL;
    cwen *e = calloc(1, sizeof *e);
    if (!e)
        return cw_errf(err, CW_ERR_NOMEM, "engine: out of memory");
    struct cw_qwen35_hparams hp;
    if (cw_gguf_open(&e->g, opts->path, err) < 0)
        goto fail_nog;
    if (cw_qwen35_hparams_load(&e->g, &hp, err) < 0 || cw_qwen35_bind(&e->w, &e->g, &hp, err) < 0)
        goto fail;
    int nt = opts->n_threads;
    if (nt <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nt = n > 0 ? (int)n : 1;
    }
    if (cw_pool_init(&e->pool, nt, err) < 0)
        goto fail;
    e->has_pool = true;
    int64_t n_ctx = opts->n_ctx;
    if (n_ctx <= 0)
        n_ctx = hp.n_ctx_train < 8192 ? hp.n_ctx_train : 8192;
    if (n_ctx > (int64_t)hp.n_ctx_train) {
        cw_errf(err, CW_ERR_INVALID, "engine: --ctx %lld exceeds the model's %u positions",
                (long long)n_ctx, hp.n_ctx_train);
        goto fail;
    }
    const struct cw_backend_opts bo = {.n_ctx_max = n_ctx, .pool = &e->pool, .device = 0};
    if (cw_backend_open(&e->be, opts->backend, &e->w, &bo, err) < 0 ||
        e->be->ops->seq_new(e->be, &e->seq, err) < 0)
        goto fail;
    if (cw_tokenizer_load(&e->tok, &e->g, err) < 0)
        goto fail;

    struct cw_gguf_str src;
    struct cw_err terr = {0};
    if (cw_gguf_get_str(&e->g, "tokenizer.chat_template", &src, &terr) == 0) {
        char *z = xstrndup(src.ptr, src.len);
        if (!z) {
            cw_errf(err, CW_ERR_NOMEM, "engine: out of memory");
            goto fail;
        }
        e->has_tmpl = cw_chat_template_init(&e->tmpl, z, &terr) == 0;
        free(z);
    }
    if (!e->has_tmpl)
        snprintf(e->tmpl_err, sizeof e->tmpl_err, "%s", terr.msg[0] ? terr.msg : "no chat template");

    /* names: the checkpoint's when the shape is known, else the file's */
    const char *base = strrchr(opts->path, '/');
    base = base ? base + 1 : opts->path;
    e->file_name = strdup(base);
    size_t bl = strlen(base);
    e->file_stem = bl > 5 && !strcmp(base + bl - 5, ".gguf") ? xstrndup(base, bl - 5) : strdup(base);
    char *gname = NULL;
    if (cw_gguf_get_str(&e->g, "general.name", &src, &terr) == 0)
        gname = xstrndup(src.ptr, src.len);
    const char *id = cw_qwen35_identify(&hp, gname);
    free(gname);
    e->model_name = strdup(id ? id : e->file_name);
    e->logits = malloc(sizeof(float) * hp.n_vocab);
    e->top = malloc(sizeof(struct cwen_logprob) * CWEN_MAX_TOP_LOGPROBS);
    if (!e->file_name || !e->file_stem || !e->model_name || !e->logits || !e->top) {
        cw_errf(err, CW_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    e->info = (struct cwen_info){.model_name = e->model_name, .file_name = e->file_name,
                                 .arch = cw_qwen35_arch_name(hp.arch), .n_ctx = n_ctx,
                                 .n_vocab = (int32_t)hp.n_vocab, .n_threads = nt,
                                 .backend = e->be->ops->name};
    *out = e;
    return 0;
fail:
    cw_err_prefix(err, "%s", opts->path);
    cwen_close(e);
    return -1;
fail_nog:
    free(e);
    return -1;
}

void cwen_close(cwen *e)
{
    if (!e)
        return;
    if (e->seq)
        e->be->ops->seq_free(e->be, e->seq);
    cw_backend_close(e->be);
    if (e->has_pool)
        cw_pool_free(&e->pool);
    cw_tokenizer_free(&e->tok);
    cw_qwen35_weights_free(&e->w);
    cw_gguf_close(&e->g);
    free(e->model_name);
    free(e->file_name);
    free(e->file_stem);
    free(e->logits);
    free(e->top);
    free(e);
}

const struct cwen_info *cwen_get_info(const cwen *e) { return &e->info; }

bool cwen_model_name_ok(const cwen *e, const char *name)
{
    return !name || !*name || !strcmp(name, e->model_name) || !strcmp(name, e->file_name) ||
           !strcmp(name, e->file_stem);
}

int cwen_tokenize(const cwen *e, const char *text, size_t len, bool parse_special, int32_t **ids,
                  size_t *n, struct cw_err *err)
{
    struct cw_tokens t = {0};
    *ids = NULL;
    *n = 0;
    if (cw_tokenize(&e->tok, text, len, parse_special, &t, err) < 0) {
        cw_tokens_free(&t);
        return -1;
    }
    *ids = malloc(sizeof(int32_t) * (t.n ? t.n : 1));
    if (!*ids) {
        cw_tokens_free(&t);
        return cw_errf(err, CW_ERR_NOMEM, "tokenize: out of memory");
    }
    memcpy(*ids, t.ids, sizeof(int32_t) * t.n);
    *n = t.n;
    cw_tokens_free(&t);
    return 0;
}

const char *cwen_token_piece(const cwen *e, int32_t id, size_t *len)
{
    return cw_token_piece(&e->tok, id, true, len);
}

int cwen_render_chat(const cwen *e, const char *conv_json, size_t len, char **prompt,
                     struct cw_err *err)
{
    *prompt = NULL;
    if (!e->has_tmpl)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "chat: %s", e->tmpl_err);
    struct cw_chat_conv_owned c;
    if (cw_chat_conv_from_json(&c, conv_json, len, err) < 0)
        return -1;
    size_t n;
    int rc = cw_chat_render(&e->tmpl, &c.conv, prompt, &n, err);
    cw_chat_conv_free(&c);
    return rc;
}

const char *cwen_finish_name(enum cwen_finish f)
{
    switch (f) {
    case CWEN_FINISH_STOP: return "stop";
    case CWEN_FINISH_LENGTH: return "length";
    case CWEN_FINISH_TOOL_CALLS: return "tool_calls";
    case CWEN_FINISH_CANCELLED: return "cancelled";
    }
    return "stop";
}

/* Log-probabilities of the raw model distribution: the chosen token's and
 * the n_top best (ties: lower id first). */
static float logprobs(cwen *e, int32_t tok, int n_top, int *n_out)
{
    const float *l = e->logits;
    int32_t V = e->info.n_vocab;
    float mx = l[0];
    for (int32_t i = 1; i < V; i++)
        mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < V; i++)
        sum += exp((double)l[i] - mx);
    float lse = mx + (float)log(sum);
    int k = 0;
    for (int32_t i = 0; i < V && n_top > 0; i++) {
        if (k == n_top && l[i] <= l[e->top[k - 1].id])
            continue;
        int j = k < n_top ? k++ : k - 1;
        while (j > 0 && l[e->top[j - 1].id] < l[i]) {
            e->top[j] = e->top[j - 1];
            j--;
        }
        e->top[j] = (struct cwen_logprob){i, 0};
    }
    for (int i = 0; i < k; i++)
        e->top[i].logprob = l[e->top[i].id] - lse;
    *n_out = k;
    return l[tok] - lse;
}

/* Runs n tokens; leaves the last row's logits in e->logits, or, when
 * greedy is set, only its argmax in *greedy (on a GPU the logits then stay
 * on the device: one id comes back instead of n_vocab floats). */
static int forward(cwen *e, const int32_t *toks, size_t n, int32_t *greedy, struct cw_err *err)
{
    for (size_t i = 0; i < n; i += PREFILL_CHUNK) {
        size_t c = n - i < PREFILL_CHUNK ? n - i : PREFILL_CHUNK;
        const struct cw_fwd_out o = {.logits = greedy ? NULL : e->logits, .argmax = greedy};
        if (e->be->ops->forward(e->be, e->seq, toks + i, (int64_t)c, &o, err) < 0)
            return -1;
    }
    return 0;
}

int cwen_generate(cwen *e, const struct cwen_gen_params *p, cwen_event_fn fn, void *ctx,
                  struct cwen_usage *u, struct cw_err *err)
{
    memset(u, 0, sizeof *u);
    u->n_prompt = (int64_t)p->n_prompt;
    if (!p->n_prompt)
        return cw_errf(err, CW_ERR_INVALID, "the prompt is empty");
    if (p->max_tokens < 1)
        return cw_errf(err, CW_ERR_INVALID, "max_tokens must be at least 1");
    if ((int64_t)p->n_prompt + p->max_tokens > e->info.n_ctx)
        return cw_errf(err, CW_ERR_INVALID,
                       "this model's context is %lld tokens; the prompt has %zu and %lld more "
                       "were asked for",
                       (long long)e->info.n_ctx, p->n_prompt, (long long)p->max_tokens);
    if (p->n_top_logprobs > CWEN_MAX_TOP_LOGPROBS)
        return cw_errf(err, CW_ERR_INVALID, "at most %d top log-probs", CWEN_MAX_TOP_LOGPROBS);
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->info.n_vocab)
            return cw_errf(err, CW_ERR_INVALID, "token %d at %zu is not in the vocabulary",
                           p->prompt[i], i);
    for (size_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i][0])
            return cw_errf(err, CW_ERR_INVALID, "a stop string is empty");

    struct cw_sampler smp;
    if (cw_sampler_init(&smp, &p->sampling, e->info.n_vocab, err) < 0)
        return -1;
    struct cw_outstream g;
    int rc = -1;
    if (cw_outstream_init(&g, p, fn, ctx, err) < 0) {
        cw_sampler_free(&smp);
        return -1;
    }
    for (size_t i = 0; i < p->n_prompt; i++)
        cw_sampler_accept(&smp, p->prompt[i]);

    /* reasoning tokens: those sampled before the raw text closes </think> */
    bool reasoning = p->mode == CWEN_OUT_CHAT && p->in_reasoning;
    char tail[16] = {0};
    size_t n_tail = 0;

    /* Plain greedy needs only the argmax: the sampler would pick the same
     * token (its greedy rule is the backend's: the lowest index of the max). */
    const struct cw_sampling *sp = &p->sampling;
    const bool plain_greedy = sp->temperature == 0 && sp->repetition_penalty == 1 &&
                              sp->presence_penalty == 0 && sp->frequency_penalty == 0 &&
                              sp->n_bias == 0 && p->n_top_logprobs < 0;
    int32_t next = -1;
    int32_t *greedy = plain_greedy ? &next : NULL;

    double t0 = now_ms(), t1 = t0;
    e->be->ops->seq_reset(e->be, e->seq);
    if (forward(e, p->prompt, p->n_prompt, greedy, err) < 0)
        goto done;
    struct cw_detok dt = {.special = false};
    char piece[512], clean[3 * sizeof piece];
    u->finish = CWEN_FINISH_LENGTH;
    for (int64_t n_gen = 0; n_gen < p->max_tokens; n_gen++) {
        int32_t tok = plain_greedy ? next : cw_sampler_sample(&smp, e->logits);
        if (n_gen == 0)
            t1 = now_ms();
        if (cw_token_is_eog(&e->tok, tok)) {
            u->finish = CWEN_FINISH_STOP;
            break;
        }
        cw_sampler_accept(&smp, tok);
        u->n_completion++;
        if (reasoning)
            u->n_reasoning++;
        if (p->n_top_logprobs >= 0) {
            struct cwen_event ev = {.type = CWEN_EV_TOKEN, .token = tok};
            ev.logprob = logprobs(e, tok, p->n_top_logprobs, &ev.n_top);
            ev.top = e->top;
            if (fn(ctx, &ev))
                g.cancelled = true;
        }
        if (g.cancelled)
            break;
        int n = cw_detok_push(&dt, &e->tok, tok, piece, sizeof piece);
        if (n < 0) {
            cw_errf(err, CW_ERR_INVALID, "generate: token %d has no text", tok);
            goto done;
        }
        if (reasoning && n > 0) {
            /* keep the last bytes to find "</think>" across tokens */
            for (int i = 0; i < n; i++) {
                if (n_tail == sizeof tail - 1) {
                    memmove(tail, tail + 1, --n_tail);
                }
                tail[n_tail++] = piece[i];
                tail[n_tail] = 0;
            }
            if (strstr(tail, "</think>"))
                reasoning = false;
        }
        n = (int)cwen_utf8_lossy(piece, (size_t)n, clean);
        int r = cw_outstream_push(&g, clean, (size_t)n, err);
        if (r < 0)
            goto done;
        if (r) {
            u->finish = CWEN_FINISH_STOP; /* a stop string, the tool-call limit, or cancelled */
            u->stop_string = g.stop_string;
            break;
        }
        if (n_gen + 1 < p->max_tokens && forward(e, &tok, 1, greedy, err) < 0)
            goto done;
    }
    /* flush: held UTF-8 bytes, held stop-string prefixes, the parser */
    int n = cw_detok_flush(&dt, piece, sizeof piece);
    n = n > 0 ? (int)cwen_utf8_lossy(piece, (size_t)n, clean) : 0;
    if (n > 0 && cw_outstream_push(&g, clean, (size_t)n, err) < 0)
        goto done;
    if (cw_outstream_finish(&g, err) < 0)
        goto done;
    if (g.cancelled)
        u->finish = CWEN_FINISH_CANCELLED;
    else if (g.n_tools && u->finish == CWEN_FINISH_STOP)
        u->finish = CWEN_FINISH_TOOL_CALLS;
    u->n_tool_calls = g.n_tools;
    u->t_prompt_ms = t1 - t0;
    u->t_decode_ms = now_ms() - t1;
    cw_err_clear(err);
    rc = 0;
done:
    cw_outstream_free(&g);
    cw_sampler_free(&smp);
    return rc;
}
