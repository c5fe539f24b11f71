/* test_engine.c — cwen.h on a generated tiny model: names and info, input
 * validation, greedy and seeded reproducibility, text events equal to the
 * tokens' pieces, log-probabilities (normalised, sorted, greedy = the top
 * one), reasoning-token counting, cancellation from the callback, usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cwen.h"
#include "test.h"

struct run {
    int32_t tokens[64];
    int n_tokens;
    char text[4096];
    size_t n_text;
    int n_reasoning_ev;
    int cancel_at;      /* cancel on this TOKEN event (1-based), 0 never */
    bool lp_ok;         /* every TOKEN's log-probs passed the checks */
    bool greedy;
};

static int on_ev(void *ctx, const struct cwen_event *ev)
{
    struct run *r = ctx;
    if (ev->type == CWEN_EV_TOKEN) {
        if (r->n_tokens < 64)
            r->tokens[r->n_tokens] = ev->token;
        r->n_tokens++;
        double mass = 0;
        for (int i = 0; i < ev->n_top; i++) {
            mass += exp(ev->top[i].logprob);
            if (i && ev->top[i].logprob > ev->top[i - 1].logprob)
                r->lp_ok = false;
        }
        if (mass > 1.0001 || ev->logprob > 0 || (ev->n_top && ev->logprob > ev->top[0].logprob))
            r->lp_ok = false;
        if (r->greedy && ev->n_top && ev->top[0].id != ev->token)
            r->lp_ok = false;
        return r->cancel_at && r->n_tokens >= r->cancel_at;
    }
    if (ev->type == CWEN_EV_REASONING)
        r->n_reasoning_ev++;
    if ((ev->type == CWEN_EV_TEXT || ev->type == CWEN_EV_REASONING) && r->n_text + ev->len < sizeof r->text) {
        memcpy(r->text + r->n_text, ev->text, ev->len);
        r->n_text += ev->len;
    }
    return 0;
}

static int gen(cwen *e, struct cwen_gen_params *p, struct run *r, struct cwen_usage *u,
               struct cw_err *err)
{
    r->lp_ok = true;
    return cwen_generate(e, p, on_ev, r, u, err);
}

int main(void)
{
    const char *bin = getenv("CWEN_BIN"), *tmp = getenv("CWEN_TMP");
    if (!bin || !tmp) {
        skip("CWEN_BIN / CWEN_TMP not set (run through ctest)");
        return done();
    }
    char path[1024], cmd[2400];
    snprintf(path, sizeof path, "%s/engine-tiny.gguf", tmp);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny-dense --no-mtp --threads 2 -o '%s' >/dev/null", bin, path);
    ok(system(cmd) == 0, "mkmodel");
    struct cw_err err = {0};
    cwen *e = NULL;
    struct cwen_opts bad = {.path = "/nonexistent.gguf"};
    ok(cwen_open(&e, &bad, &err) < 0 && e == NULL && strstr(err.msg, "nonexistent"), "missing file: %s", err.msg);
    struct cwen_opts eo = {.path = path, .n_threads = 2, .n_ctx = 96};
    ok(cwen_open(&e, &eo, &err) == 0, "open: %s", err.msg);
    if (!e)
        return done();
    const struct cwen_info *in = cwen_get_info(e);
    ok(in->n_ctx == 96 && !strcmp(in->arch, "qwen35") && !strcmp(in->model_name, "engine-tiny.gguf"),
       "info: %s %s ctx %lld", in->model_name, in->arch, (long long)in->n_ctx);

    int32_t *ids;
    size_t n;
    const char *chat = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n";
    ok(cwen_tokenize(e, chat, strlen(chat), true, &ids, &n, &err) == 0 && n > 5, "tokenize");
    char *prompt = NULL;
    const char *conv = "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"add_generation_prompt\":true}";
    ok(cwen_render_chat(e, conv, strlen(conv), &prompt, &err) == 0 && !strcmp(prompt, chat),
       "render: %s", prompt ? prompt : err.msg);
    free(prompt);

    struct cwen_gen_params p = {.prompt = ids, .n_prompt = n, .sampling = cw_sampling_default(),
                                .max_tokens = 8, .mode = CWEN_OUT_TEXT, .n_top_logprobs = 5};
    struct cwen_usage u;
    /* validation */
    p.max_tokens = 96;
    ok(gen(e, &p, &(struct run){0}, &u, &err) < 0 && err.code == CW_ERR_INVALID, "over the context: %s", err.msg);
    p.max_tokens = 8;
    p.n_prompt = 0;
    ok(gen(e, &p, &(struct run){0}, &u, &err) < 0, "empty prompt refused");
    p.n_prompt = n;
    int32_t badtok[2] = {1, 1 << 30};
    struct cwen_gen_params pb = p;
    pb.prompt = badtok, pb.n_prompt = 2;
    ok(gen(e, &pb, &(struct run){0}, &u, &err) < 0 && strstr(err.msg, "vocabulary"), "bad token id: %s", err.msg);
    pb = p;
    pb.n_top_logprobs = 21;
    ok(gen(e, &pb, &(struct run){0}, &u, &err) < 0, "too many top log-probs refused");

    /* greedy: reproducible, log-probs consistent, text = the tokens' pieces */
    p.sampling.temperature = 0;
    struct run a = {.greedy = true}, b = {.greedy = true};
    ok(gen(e, &p, &a, &u, &err) == 0, "greedy: %s", err.msg);
    ok(u.n_prompt == (int64_t)n && u.n_completion == a.n_tokens && u.n_completion >= 1 &&
           u.n_cached == 0 && u.t_prompt_ms > 0, "usage");
    ok(u.finish == (u.n_completion == 8 ? CWEN_FINISH_LENGTH : CWEN_FINISH_STOP), "finish %s", cwen_finish_name(u.finish));
    ok(a.lp_ok, "log-probs: <= 0, sorted, mass <= 1, greedy picks the top");
    gen(e, &p, &b, &u, &err);
    ok(a.n_tokens == b.n_tokens && !memcmp(a.tokens, b.tokens, sizeof(int32_t) * (size_t)a.n_tokens), "greedy reproduces");
    /* without log-probs greedy asks the backend for the argmax only: same tokens */
    struct cwen_gen_params pg = p;
    pg.n_top_logprobs = -1;
    struct run ga = {0};
    struct cwen_usage uc;
    ok(gen(e, &pg, &ga, &uc, &err) == 0 && uc.n_completion == u.n_completion &&
           ga.n_text == a.n_text && !memcmp(ga.text, a.text, a.n_text),
       "argmax-only greedy = sampler greedy (%lld tokens)", (long long)uc.n_completion);
    char pieces[4096], clean[3 * 4096];
    size_t np = 0;
    for (int i = 0; i < a.n_tokens; i++) {
        size_t l;
        const char *s = cwen_token_piece(e, a.tokens[i], &l);
        memcpy(pieces + np, s, l);
        np += l;
    }
    np = cwen_utf8_lossy(pieces, np, clean);
    ok(np == a.n_text && !memcmp(clean, a.text, np), "text events = the tokens' pieces");

    /* seeded sampling */
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 42;
    struct run s1 = {0}, s2 = {0}, s3 = {0};
    gen(e, &p, &s1, &u, &err);
    gen(e, &p, &s2, &u, &err);
    p.sampling.seed = 43;
    gen(e, &p, &s3, &u, &err);
    ok(s1.n_tokens == s2.n_tokens && !memcmp(s1.tokens, s2.tokens, sizeof(int32_t) * (size_t)s1.n_tokens),
       "same seed, same tokens");
    ok(s1.n_tokens != s3.n_tokens || memcmp(s1.tokens, s3.tokens, sizeof(int32_t) * (size_t)s1.n_tokens),
       "another seed, other tokens");

    /* chat mode, inside <think>: every token is reasoning until </think> */
    p.sampling.temperature = 0;
    p.mode = CWEN_OUT_CHAT;
    p.in_reasoning = true;
    struct run c = {0};
    gen(e, &p, &c, &u, &err);
    bool closed = strstr(c.text, "</think>") != NULL;
    ok(closed || u.n_reasoning == u.n_completion, "reasoning tokens %lld of %lld", (long long)u.n_reasoning,
       (long long)u.n_completion);

    /* cancel from the callback */
    p.mode = CWEN_OUT_TEXT;
    struct run k = {.cancel_at = 2};
    ok(gen(e, &p, &k, &u, &err) == 0 && (u.finish == CWEN_FINISH_CANCELLED || u.n_completion < 2),
       "cancel: finish %s after %lld", cwen_finish_name(u.finish), (long long)u.n_completion);
    ok(u.finish != CWEN_FINISH_CANCELLED || u.n_completion == 2, "cancelled right after the token that asked");

    free(ids);
    cwen_close(e);
    remove(path);
    return done();
}
