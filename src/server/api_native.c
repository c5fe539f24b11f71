/* api_native.c — cwen's own routes: POST /cwen/v1/generate and GET /health.
 *
 * /cwen/v1/generate takes token ids or text (tokenized with special tokens
 * parsed) and returns the generated token ids and text, the prompt's
 * tokenization, usage, the finish reason and, on request, per-token
 * log-probabilities with the top alternatives; no chat template, no output
 * parsing. It streams one SSE record per token when asked. Errors use the
 * OpenAI error shape. */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

json_t *native_health(struct cw_server *s)
{
    const struct cwen_info *in = cwen_get_info(srv_engine(s));
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:i}", "status", "ready", "model", in->model_name,
                     "file", in->file_name, "arch", in->arch, "n_ctx", (json_int_t)in->n_ctx,
                     "n_threads", in->n_threads);
}

struct native_state {
    bool want_logprobs;
    json_t *tokens;
};

static void native_free(void *p)
{
    struct native_state *n = p;
    json_decref(n->tokens);
    free(n);
}

static int native_event(struct srv_job *j, const struct cwen_event *ev)
{
    struct native_state *n = j->api;
    if (srv_accumulate(j, ev) < 0)
        return 1;
    if (ev->type == CWEN_EV_TOKEN)
        json_array_append_new(n->tokens, json_integer(ev->token));
    if (!j->stream)
        return 0;
    if (ev->type == CWEN_EV_TOKEN) {
        json_t *o = json_pack("{s:I}", "token", (json_int_t)ev->token);
        if (n->want_logprobs)
            json_object_set(o, "logprob",
                            json_array_get(j->logprobs, json_array_size(j->logprobs) - 1));
        srv_sse_json(j, NULL, o);
    } else if (ev->type == CWEN_EV_TEXT) {
        srv_sse_json(j, NULL, json_pack("{s:s%}", "text", ev->text, ev->len));
    }
    return 0;
}

static void native_done(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err)
{
    struct native_state *n = j->api;
    json_t *prompt = json_array();
    for (size_t i = 0; i < j->gp.n_prompt; i++)
        json_array_append_new(prompt, json_integer(j->gp.prompt[i]));
    json_t *o = json_pack("{s:s, s:O, s:s, s:o, s:s, s:s?, s:{s:I, s:I, s:I}}", "model", j->model,
                          "tokens", n->tokens, "text", j->content ? j->content : "",
                          "prompt_tokens", prompt, "finish_reason", cwen_finish_name(u->finish),
                          "stop_string", u->stop_string, "usage", "prompt_tokens",
                          (json_int_t)u->n_prompt, "cached_tokens", (json_int_t)u->n_cached,
                          "completion_tokens", (json_int_t)u->n_completion);
    if (n->want_logprobs)
        json_object_set(o, "logprobs", j->logprobs ? j->logprobs : json_array());
    if (j->stream) {
        json_object_set_new(o, "done", json_true());
        srv_sse_json(j, NULL, o);
    } else {
        j->reply = o;
    }
}

int native_generate(struct srv_job *j, struct srv_err *e)
{
    json_t *r = j->req;
    struct native_state *n = calloc(1, sizeof *n);
    n->tokens = json_array();
    j->api = n;
    j->api_free = native_free;
    srv_make_id(j->srv, j->id, sizeof j->id, "gen-");
    j->on_event = native_event;
    j->on_done = native_done;
    j->gp.max_tokens = 16;
    int64_t top = -1;
    bool lp = false;
    if (rq_model(j, r, false, e) || rq_int(r, "max_tokens", 1, 1 << 30, &j->gp.max_tokens, e) ||
        rq_bool(r, "stream", &j->stream, e) || rq_sampling(j, r, "stop", e) ||
        rq_logit_bias(j, r, e) || rq_bool(r, "logprobs", &lp, e) ||
        rq_int(r, "top_logprobs", 0, CWEN_MAX_TOP_LOGPROBS, &top, e))
        return -1;
    n->want_logprobs = lp || top >= 0;
    j->gp.n_top_logprobs = top > 0 ? (int)top : 0; /* token events carry the ids */
    j->gp.mode = CWEN_OUT_TEXT;
    json_t *toks = json_object_get(r, "tokens");
    const char *text = NULL;
    if (rq_str(r, "text", &text, e))
        return -1;
    if (!!text == !!(toks && !json_is_null(toks)))
        return srv_errf(e, 400, "tokens", "give exactly one of 'tokens' (ids) and 'text'");
    if (text)
        return rq_prompt(j, text, e) || rq_fits(j, e) ? -1 : 0;
    if (!json_is_array(toks))
        return srv_errf(e, 400, "tokens", "'tokens' must be an array of token ids");
    size_t i, nt = json_array_size(toks);
    json_t *v;
    int32_t nv = cwen_get_info(srv_engine(j->srv))->n_vocab;
    j->prompt = malloc((nt ? nt : 1) * sizeof(int32_t));
    json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv)
            return srv_errf(e, 400, "tokens", "tokens[%zu] is not a token id below %d", i, nv);
        j->prompt[i] = (int32_t)json_integer_value(v);
    }
    j->gp.prompt = j->prompt;
    j->gp.n_prompt = nt;
    return rq_fits(j, e);
}
