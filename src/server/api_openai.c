/* api_openai.c — the OpenAI dialect: /v1/chat/completions, /v1/completions,
 * /v1/responses, /v1/models, and OpenAI's error body.
 *
 * Owns translating requests into a job (conversation JSON for the chat
 * template, sampling, limits, tools) and the model's events back: chat
 * completion objects and chunks (reasoning_content, tool_calls with
 * argument deltas, logprobs, the usage chunk, [DONE]), text completions,
 * and the Responses API's items and event sequence (reasoning items,
 * message items, function_call items). Fields that would change the output
 * but are not implemented are refused by name. */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

json_t *openai_error(const struct srv_err *e)
{
    const char *type = e->status == 401   ? "authentication_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status >= 500 ? "server_error"
                                          : "invalid_request_error";
    const char *code = NULL;
    if (!strncmp(e->msg, "context overflow", 16))
        code = "context_length_exceeded";
    else if (!strcmp(e->param, "model"))
        code = "model_not_found";
    else if (e->status == 401)
        code = "invalid_api_key";
    return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", e->msg, "type", type,
                     "param", e->param[0] ? e->param : NULL, "code", code);
}

json_t *openai_models(struct cw_server *s)
{
    const struct cwen_info *in = cwen_get_info(srv_engine(s));
    return json_pack("{s:s, s:[{s:s, s:s, s:i, s:s, s:s, s:I}]}", "object", "list", "data", "id",
                     in->model_name, "object", "model", "created", 0, "owned_by", "cwen", "root",
                     in->file_name, "context_length", (json_int_t)in->n_ctx);
}

static json_t *usage_json(const struct cwen_usage *u)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", (json_int_t)u->n_prompt,
                     "completion_tokens", (json_int_t)u->n_completion, "total_tokens",
                     (json_int_t)(u->n_prompt + u->n_completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->n_cached, "completion_tokens_details",
                     "reasoning_tokens", (json_int_t)u->n_reasoning);
}

static const char *finish(const struct cwen_usage *u)
{
    return u->finish == CWEN_FINISH_CANCELLED ? "stop" : cwen_finish_name(u->finish);
}

/* Shared request fields: n, logit_bias, max tokens, logprobs. */
static int common(struct srv_job *j, json_t *r, const char *const *max_keys, struct srv_err *e)
{
    int64_t n = 1;
    if (rq_int(r, "n", 1, 1 << 20, &n, e))
        return -1;
    if (n != 1)
        return srv_errf(e, 400, "n", "'n' must be 1: this server returns one choice per request");
    for (; *max_keys; max_keys++)
        if (rq_int(r, *max_keys, 1, 1 << 30, &j->gp.max_tokens, e))
            return -1;
    if (rq_bool(r, "stream", &j->stream, e) || rq_sampling(j, r, "stop", e))
        return -1;
    return rq_logit_bias(j, r, e);
}

static bool include_usage(json_t *r)
{
    json_t *so = json_object_get(r, "stream_options");
    return json_is_true(json_object_get(so, "include_usage"));
}

/* enable_thinking from chat_template_kwargs / reasoning_effort; default on. */
static int thinking(json_t *r, bool *on, struct srv_err *e)
{
    *on = true;
    json_t *kw = json_object_get(r, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return srv_errf(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (rq_bool(kw, "enable_thinking", on, e))
        return -1;
    const char *eff = NULL;
    if (rq_str(r, "reasoning_effort", &eff, e))
        return -1;
    if (eff) {
        if (!strcmp(eff, "none"))
            *on = false;
        else if (strcmp(eff, "minimal") && strcmp(eff, "low") && strcmp(eff, "medium") &&
                 strcmp(eff, "high"))
            return srv_errf(e, 400, "reasoning_effort",
                            "'reasoning_effort' must be none, minimal, low, medium or high");
    }
    return 0;
}

/* tool_choice: auto / none (tools left out) accepted; forcing a call needs
 * constrained decoding, which this server does not do yet. */
static int tool_choice(json_t *r, bool *drop_tools, struct srv_err *e)
{
    json_t *tc = json_object_get(r, "tool_choice");
    *drop_tools = false;
    if (!tc || json_is_null(tc))
        return 0;
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "auto"))
        return 0;
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "none")) {
        *drop_tools = true;
        return 0;
    }
    return srv_errf(e, 400, "tool_choice",
                    "'tool_choice' must be \"auto\" or \"none\": forcing a tool call is not supported");
}

/* ---- chat completions --------------------------------------------------- */

struct chat_state {
    bool include_usage;
    bool want_logprobs;
    bool started;
    json_t *pending_lp; /* log-prob entries not yet attached to a chunk */
};

static void chat_state_free(void *p)
{
    struct chat_state *c = p;
    json_decref(c->pending_lp);
    free(c);
}

static json_t *lp_entry(json_t *t)
{
    json_t *top = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(t, "top"), i, v)
        json_array_append_new(top, json_pack("{s:O, s:O, s:O}", "token", json_object_get(v, "token"),
                                             "logprob", json_object_get(v, "logprob"), "bytes",
                                             json_object_get(v, "bytes")));
    return json_pack("{s:O, s:O, s:O, s:o}", "token", json_object_get(t, "token"), "logprob",
                     json_object_get(t, "logprob"), "bytes", json_object_get(t, "bytes"),
                     "top_logprobs", top);
}

static json_t *chunk(struct srv_job *j, json_t *delta, const char *fin)
{
    struct chat_state *c = j->api;
    json_t *lp = json_null();
    if (c->want_logprobs && json_array_size(c->pending_lp)) {
        lp = json_pack("{s:O}", "content", c->pending_lp);
        json_array_clear(c->pending_lp);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:o, s:s?}]}", "id", j->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)j->created, "model", j->model,
                     "system_fingerprint", "cwen", "choices", "index", 0, "delta", delta, "logprobs",
                     lp, "finish_reason", fin);
}

static void tool_call_id(struct srv_job *j, int idx, char *out, size_t cap)
{
    snprintf(out, cap, "call_%.16s_%d", j->id + strlen(j->id) - 16, idx);
}

static int chat_event(struct srv_job *j, const struct cwen_event *ev)
{
    struct chat_state *c = j->api;
    if (srv_accumulate(j, ev) < 0)
        return 1;
    if (!j->stream)
        return 0;
    if (!c->started) {
        c->started = true;
        srv_sse_json(j, NULL, chunk(j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
    }
    char id[64];
    switch (ev->type) {
    case CWEN_EV_TOKEN:
        json_array_append_new(c->pending_lp, lp_entry(json_array_get(j->logprobs,
                                                                     json_array_size(j->logprobs) - 1)));
        return 0;
    case CWEN_EV_TEXT:
        srv_sse_json(j, NULL, chunk(j, json_pack("{s:s%}", "content", ev->text, ev->len), NULL));
        return 0;
    case CWEN_EV_REASONING:
        srv_sse_json(j, NULL,
                     chunk(j, json_pack("{s:s%}", "reasoning_content", ev->text, ev->len), NULL));
        return 0;
    case CWEN_EV_TOOL_BEGIN:
        tool_call_id(j, ev->tool_index, id, sizeof id);
        srv_sse_json(j, NULL,
                     chunk(j,
                           json_pack("{s:[{s:i, s:s, s:s, s:{s:s%, s:s}}]}", "tool_calls", "index",
                                     ev->tool_index, "id", id, "type", "function", "function",
                                     "name", ev->text, ev->len, "arguments", ""),
                           NULL));
        return 0;
    case CWEN_EV_TOOL_ARGS:
        srv_sse_json(j, NULL,
                     chunk(j,
                           json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", ev->tool_index,
                                     "function", "arguments", ev->text, ev->len),
                           NULL));
        return 0;
    case CWEN_EV_TOOL_END:
        return 0;
    }
    return 0;
}

static json_t *tool_calls_json(struct srv_job *j)
{
    json_t *out = json_array();
    size_t i;
    json_t *v;
    char id[64];
    json_array_foreach(j->tool_calls, i, v) {
        tool_call_id(j, (int)i, id, sizeof id);
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:O, s:O}}", "id", id, "type",
                                             "function", "function", "name",
                                             json_object_get(v, "name"), "arguments",
                                             json_object_get(v, "arguments")));
    }
    return out;
}

static void chat_done(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err)
{
    struct chat_state *c = j->api;
    if (j->stream) {
        if (!c->started)
            srv_sse_json(j, NULL, chunk(j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
        srv_sse_json(j, NULL, chunk(j, json_object(), finish(u)));
        if (c->include_usage)
            srv_sse_json(j, NULL,
                         json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", j->id, "object",
                                   "chat.completion.chunk", "created", (json_int_t)j->created,
                                   "model", j->model, "system_fingerprint", "cwen", "choices",
                                   "usage", usage_json(u)));
        srv_sse_raw(j, "data: [DONE]\n\n");
        return;
    }
    json_t *msg = json_pack("{s:s, s:s?}", "role", "assistant", "content",
                            j->n_content || !json_array_size(j->tool_calls) ? (j->content ? j->content : "") : NULL);
    if (j->n_reasoning)
        json_object_set_new(msg, "reasoning_content", json_string(j->reasoning));
    if (json_array_size(j->tool_calls))
        json_object_set_new(msg, "tool_calls", tool_calls_json(j));
    json_t *lp = json_null();
    if (c->want_logprobs) {
        json_t *arr = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(j->logprobs, i, v)
            json_array_append_new(arr, lp_entry(v));
        lp = json_pack("{s:o}", "content", arr);
    }
    j->reply = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:o, s:s}], s:o}", "id", j->id,
                         "object", "chat.completion", "created", (json_int_t)j->created, "model",
                         j->model, "system_fingerprint", "cwen", "choices", "index", 0, "message",
                         msg, "logprobs", lp, "finish_reason", finish(u), "usage", usage_json(u));
}

/* Checks the messages enough to refuse what the engine cannot read (images,
 * audio); the conversation parser checks the shape. */
static int check_messages(json_t *msgs, const char *key, struct srv_err *e)
{
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return srv_errf(e, 400, key, "'%s' must be a non-empty array", key);
    size_t i, k;
    json_t *m, *p;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return srv_errf(e, 400, key, "%s[%zu] must be an object with a string 'role'", key, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user") &&
            strcmp(role, "assistant") && strcmp(role, "tool"))
            return srv_errf(e, 400, key, "%s[%zu]: unknown role '%s'", key, i, role);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c))
            return srv_errf(e, 400, key, "%s[%zu].content must be a string or an array", key, i);
        json_array_foreach(c, k, p) {
            const char *t = json_string_value(json_object_get(p, "type"));
            if (!t || strcmp(t, "text") || !json_is_string(json_object_get(p, "text")))
                return srv_errf(e, 400, key,
                                "%s[%zu].content[%zu]: only text parts are supported (got %s)", key,
                                i, k, t ? t : "no type");
        }
    }
    return 0;
}

/* developer → system (Qwen's template knows the latter only). */
static json_t *copy_messages(json_t *msgs)
{
    json_t *out = json_deep_copy(msgs);
    size_t i;
    json_t *m;
    json_array_foreach(out, i, m)
        if (!strcmp(json_string_value(json_object_get(m, "role")), "developer"))
            json_object_set_new(m, "role", json_string("system"));
    return out;
}

int openai_chat(struct srv_job *j, struct srv_err *e)
{
    static const char *const refused[] = {"audio", "prediction", "web_search_options",
                                          "functions", "function_call", NULL};
    static const char *const max_keys[] = {"max_tokens", "max_completion_tokens", NULL};
    json_t *r = j->req;
    struct chat_state *c = calloc(1, sizeof *c);
    j->api = c;
    j->api_free = chat_state_free;
    c->pending_lp = json_array();
    srv_make_id(j->srv, j->id, sizeof j->id, "chatcmpl-");
    j->on_event = chat_event;
    j->on_done = chat_done;
    bool think, drop_tools, parallel = true;
    int64_t top = 0;
    if (rq_model(j, r, false, e) || rq_refuse(r, refused, e) || common(j, r, max_keys, e) ||
        thinking(r, &think, e) || tool_choice(r, &drop_tools, e) ||
        rq_bool(r, "logprobs", &c->want_logprobs, e) ||
        rq_int(r, "top_logprobs", 0, CWEN_MAX_TOP_LOGPROBS, &top, e) ||
        rq_bool(r, "parallel_tool_calls", &parallel, e))
        return -1;
    json_t *rf = json_object_get(r, "response_format");
    if (rf && !json_is_null(rf) &&
        strcmp(json_string_value(json_object_get(rf, "type")) ? json_string_value(json_object_get(rf, "type")) : "", "text"))
        return srv_errf(e, 400, "response_format",
                        "'response_format' other than {\"type\": \"text\"} is not supported yet");
    json_t *mods = json_object_get(r, "modalities");
    if (mods && !json_is_null(mods) &&
        (json_array_size(mods) != 1 || strcmp(json_string_value(json_array_get(mods, 0)) ? json_string_value(json_array_get(mods, 0)) : "", "text")))
        return srv_errf(e, 400, "modalities", "only the text modality is supported");
    c->include_usage = include_usage(r);
    if (c->want_logprobs)
        j->gp.n_top_logprobs = (int)top;
    j->gp.one_tool_call = !parallel;
    json_t *msgs = json_object_get(r, "messages");
    if (check_messages(msgs, "messages", e))
        return -1;
    json_t *tools = json_object_get(r, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return srv_errf(e, 400, "tools", "'tools' must be an array");
    json_t *conv = json_pack("{s:o, s:b, s:b}", "messages", copy_messages(msgs),
                             "add_generation_prompt", 1, "enable_thinking", think);
    if (json_array_size(tools) && !drop_tools) {
        json_object_set(conv, "tools", tools);
        j->tools_json = json_dumps(tools, JSON_COMPACT);
        j->gp.tools_json = j->tools_json;
    }
    if (rq_chat_prompt(j, conv, e))
        return -1;
    return rq_fits(j, e);
}

/* ---- text completions ----------------------------------------------------- */

struct cmpl_state {
    bool include_usage;
    bool want_logprobs;
    size_t text_off; /* bytes of text before the next token's */
    size_t lp_sent;  /* log-prob entries already streamed */
};

static json_t *cmpl_logprobs(struct srv_job *j, json_t *entries, size_t *text_off)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, k;
    json_t *v, *t;
    json_array_foreach(entries, i, v) {
        json_array_append(tokens, json_object_get(v, "token"));
        json_array_append(lps, json_object_get(v, "logprob"));
        json_t *m = json_object();
        json_array_foreach(json_object_get(v, "top"), k, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")),
                            json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)*text_off));
        *text_off += json_array_size(json_object_get(v, "bytes"));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *cmpl_obj(struct srv_job *j, const char *text, size_t len, json_t *lp, const char *fin)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:s%, s:i, s:o, s:s?}]}", "id", j->id, "object",
                     "text_completion", "created", (json_int_t)j->created, "model", j->model,
                     "choices", "text", text, len, "index", 0, "logprobs", lp ? lp : json_null(),
                     "finish_reason", fin);
}

static int cmpl_event(struct srv_job *j, const struct cwen_event *ev)
{
    struct cmpl_state *c = j->api;
    if (srv_accumulate(j, ev) < 0)
        return 1;
    if (!j->stream || ev->type != CWEN_EV_TEXT)
        return 0;
    json_t *lp = NULL;
    if (c->want_logprobs) {
        /* the tokens since the last text event */
        json_t *all = j->logprobs, *tail = json_array();
        for (size_t i = c->lp_sent; i < json_array_size(all); i++)
            json_array_append(tail, json_array_get(all, i));
        c->lp_sent = json_array_size(all);
        lp = cmpl_logprobs(j, tail, &c->text_off);
        json_decref(tail);
    }
    srv_sse_json(j, NULL, cmpl_obj(j, ev->text, ev->len, lp, NULL));
    return 0;
}

static void cmpl_done(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err)
{
    struct cmpl_state *c = j->api;
    if (j->stream) {
        json_t *lp = NULL; /* tokens whose text never came out (held, or empty) */
        if (c->want_logprobs && c->lp_sent < json_array_size(j->logprobs)) {
            json_t *tail = json_array();
            for (size_t i = c->lp_sent; i < json_array_size(j->logprobs); i++)
                json_array_append(tail, json_array_get(j->logprobs, i));
            lp = cmpl_logprobs(j, tail, &c->text_off);
            json_decref(tail);
        }
        srv_sse_json(j, NULL, cmpl_obj(j, "", 0, lp, finish(u)));
        if (c->include_usage)
            srv_sse_json(j, NULL,
                         json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                                   "text_completion", "created", (json_int_t)j->created, "model",
                                   j->model, "choices", "usage", usage_json(u)));
        srv_sse_raw(j, "data: [DONE]\n\n");
        return;
    }
    size_t off = 0;
    json_t *lp = c->want_logprobs ? cmpl_logprobs(j, j->logprobs, &off) : NULL;
    json_t *o = cmpl_obj(j, j->content ? j->content : "", j->n_content, lp, finish(u));
    json_object_set_new(o, "usage", usage_json(u));
    j->reply = o;
}

int openai_completions(struct srv_job *j, struct srv_err *e)
{
    static const char *const refused[] = {"suffix", NULL};
    static const char *const max_keys[] = {"max_tokens", NULL};
    json_t *r = j->req;
    struct cmpl_state *c = calloc(1, sizeof *c);
    j->api = c;
    j->api_free = free;
    srv_make_id(j->srv, j->id, sizeof j->id, "cmpl-");
    j->on_event = cmpl_event;
    j->on_done = cmpl_done;
    j->gp.max_tokens = 16; /* OpenAI's default for completions */
    int64_t lp = -1, best_of = 1;
    bool echo = false;
    if (rq_model(j, r, false, e) || rq_refuse(r, refused, e) || common(j, r, max_keys, e) ||
        rq_int(r, "logprobs", 0, CWEN_MAX_TOP_LOGPROBS, &lp, e) ||
        rq_int(r, "best_of", 1, 1 << 20, &best_of, e) || rq_bool(r, "echo", &echo, e))
        return -1;
    if (best_of != 1)
        return srv_errf(e, 400, "best_of", "'best_of' must be 1");
    if (echo)
        return srv_errf(e, 400, "echo", "'echo' is not supported");
    c->include_usage = include_usage(r);
    c->want_logprobs = lp >= 0;
    j->gp.n_top_logprobs = (int)lp;
    j->gp.mode = CWEN_OUT_TEXT;
    json_t *p = json_object_get(r, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        if (rq_prompt(j, json_string_value(p), e))
            return -1;
    } else if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p), i;
        json_t *v;
        int32_t nv = cwen_get_info(srv_engine(j->srv))->n_vocab;
        j->prompt = malloc(n * sizeof(int32_t));
        json_array_foreach(p, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv)
                return srv_errf(e, 400, "prompt", "prompt[%zu] is not a token id", i);
            j->prompt[i] = (int32_t)json_integer_value(v);
        }
        j->gp.prompt = j->prompt;
        j->gp.n_prompt = n;
    } else {
        return srv_errf(e, 400, "prompt",
                        "'prompt' must be a string, one string in an array, or an array of token "
                        "ids (one prompt per request)");
    }
    return rq_fits(j, e);
}

/* ---- responses ----------------------------------------------------------- */

struct resp_state {
    int seq;           /* sequence_number of the next event */
    int n_out;         /* output items opened */
    int open;          /* the open item: 0 none, 1 reasoning, 2 message, 3 function call */
    int open_index;    /* its output_index */
    char item_id[48];
    size_t text_start; /* where the open item's text began in the accumulated text */
    json_t *output;    /* finished items */
};

static void resp_state_free(void *p)
{
    struct resp_state *r = p;
    json_decref(r->output);
    free(r);
}

static json_t *resp_obj(struct srv_job *j, const char *status, json_t *output,
                        const struct cwen_usage *u)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:s?}", "id", j->id, "object",
                          "response", "created_at", (json_int_t)j->created, "status", status,
                          "model", j->model, "output", output ? output : json_array(),
                          "parallel_tool_calls", json_boolean(!j->gp.one_tool_call), "tool_choice",
                          "auto");
    json_t *tools = json_object_get(j->req, "tools");
    json_object_set_new(o, "tools", json_is_array(tools) ? json_deep_copy(tools) : json_array());
    if (u) {
        json_object_set_new(
            o, "usage",
            json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)u->n_prompt,
                      "input_tokens_details", "cached_tokens", (json_int_t)u->n_cached,
                      "output_tokens", (json_int_t)u->n_completion, "output_tokens_details",
                      "reasoning_tokens", (json_int_t)u->n_reasoning, "total_tokens",
                      (json_int_t)(u->n_prompt + u->n_completion)));
        if (u->finish == CWEN_FINISH_LENGTH)
            json_object_set_new(o, "incomplete_details",
                                json_pack("{s:s}", "reason", "max_output_tokens"));
    }
    return o;
}

static void resp_emit(struct srv_job *j, const char *type, json_t *ev)
{
    struct resp_state *r = j->api;
    json_object_set_new(ev, "type", json_string(type));
    json_object_set_new(ev, "sequence_number", json_integer(r->seq++));
    srv_sse_json(j, type, ev);
}

static json_t *reasoning_item(const char *id, const char *text, size_t n)
{
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:s%}]}", "type", "reasoning", "id", id, "summary",
                     "content", "type", "reasoning_text", "text", text, n);
}

static json_t *message_item(const char *id, const char *status, const char *text, size_t n,
                            bool with_part)
{
    json_t *content = json_array();
    if (with_part)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text",
                                                 "text", text, n, "annotations"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "status", status,
                     "role", "assistant", "content", content);
}

static json_t *call_item(struct srv_job *j, const char *id, int idx, const char *status)
{
    json_t *c = json_array_get(j->tool_calls, (size_t)idx);
    char cid[64];
    tool_call_id(j, idx, cid, sizeof cid);
    return json_pack("{s:s, s:s, s:s, s:O, s:O, s:s}", "type", "function_call", "id", id, "call_id",
                     cid, "name", json_object_get(c, "name"), "arguments",
                     json_object_get(c, "arguments"), "status", status);
}

/* Closes the open output item (its done events, in stream mode) and keeps it. */
static void resp_close(struct srv_job *j, int tool_idx)
{
    struct resp_state *r = j->api;
    json_t *item = NULL;
    if (r->open == 1) {
        const char *t = j->reasoning ? j->reasoning + r->text_start : "";
        size_t n = j->n_reasoning - r->text_start;
        if (j->stream)
            resp_emit(j, "response.reasoning_text.done",
                      json_pack("{s:s, s:i, s:i, s:s%}", "item_id", r->item_id, "output_index",
                                r->open_index, "content_index", 0, "text", t, n));
        item = reasoning_item(r->item_id, t, n);
    } else if (r->open == 2) {
        const char *t = j->content ? j->content + r->text_start : "";
        size_t n = j->n_content - r->text_start;
        if (j->stream) {
            resp_emit(j, "response.output_text.done",
                      json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", r->item_id,
                                "output_index", r->open_index, "content_index", 0, "text", t, n,
                                "logprobs"));
            resp_emit(j, "response.content_part.done",
                      json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", r->item_id,
                                "output_index", r->open_index, "content_index", 0, "part", "type",
                                "output_text", "text", t, n, "annotations"));
        }
        item = message_item(r->item_id, "completed", t, n, true);
    } else if (r->open == 3) {
        item = call_item(j, r->item_id, tool_idx, "completed");
        if (j->stream)
            resp_emit(j, "response.function_call_arguments.done",
                      json_pack("{s:s, s:i, s:O}", "item_id", r->item_id, "output_index",
                                r->open_index, "arguments", json_object_get(item, "arguments")));
    }
    if (item) {
        if (j->stream)
            resp_emit(j, "response.output_item.done",
                      json_pack("{s:i, s:O}", "output_index", r->open_index, "item", item));
        json_array_append_new(r->output, item);
    }
    r->open = 0;
}

/* Opens an item of kind k (1 reasoning, 2 message, 3 function call). */
static void resp_open(struct srv_job *j, int k, int tool_idx)
{
    struct resp_state *r = j->api;
    r->open = k;
    r->open_index = r->n_out++;
    srv_make_id(j->srv, r->item_id, sizeof r->item_id, k == 1 ? "rs_" : k == 2 ? "msg_" : "fc_");
    r->text_start = k == 1 ? j->n_reasoning : j->n_content;
    if (!j->stream)
        return;
    json_t *item = k == 1   ? reasoning_item(r->item_id, "", 0)
                   : k == 2 ? message_item(r->item_id, "in_progress", "", 0, false)
                            : call_item(j, r->item_id, tool_idx, "in_progress");
    if (k == 1)
        json_object_set_new(item, "content", json_array());
    resp_emit(j, "response.output_item.added",
              json_pack("{s:i, s:o}", "output_index", r->open_index, "item", item));
    if (k == 2)
        resp_emit(j, "response.content_part.added",
                  json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", r->item_id,
                            "output_index", r->open_index, "content_index", 0, "part", "type",
                            "output_text", "text", "", "annotations"));
}

static int resp_event(struct srv_job *j, const struct cwen_event *ev)
{
    struct resp_state *r = j->api;
    if (r->seq == 0 && j->stream) {
        resp_emit(j, "response.created", json_pack("{s:o}", "response", resp_obj(j, "in_progress", NULL, NULL)));
        resp_emit(j, "response.in_progress", json_pack("{s:o}", "response", resp_obj(j, "in_progress", NULL, NULL)));
    }
    int want = ev->type == CWEN_EV_REASONING ? 1 : ev->type == CWEN_EV_TEXT ? 2 : 0;
    if (want && r->open != want) {
        resp_close(j, 0);
        resp_open(j, want, 0);
    }
    if (ev->type == CWEN_EV_TOOL_BEGIN)
        resp_close(j, 0);
    if (srv_accumulate(j, ev) < 0)
        return 1;
    if (ev->type == CWEN_EV_TOOL_BEGIN)
        resp_open(j, 3, ev->tool_index);
    if (ev->type == CWEN_EV_TOOL_END) {
        resp_close(j, ev->tool_index);
        return 0;
    }
    if (!j->stream)
        return 0;
    if (ev->type == CWEN_EV_REASONING)
        resp_emit(j, "response.reasoning_text.delta",
                  json_pack("{s:s, s:i, s:i, s:s%}", "item_id", r->item_id, "output_index",
                            r->open_index, "content_index", 0, "delta", ev->text, ev->len));
    else if (ev->type == CWEN_EV_TEXT)
        resp_emit(j, "response.output_text.delta",
                  json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", r->item_id, "output_index",
                            r->open_index, "content_index", 0, "delta", ev->text, ev->len,
                            "logprobs"));
    else if (ev->type == CWEN_EV_TOOL_ARGS)
        resp_emit(j, "response.function_call_arguments.delta",
                  json_pack("{s:s, s:i, s:s%}", "item_id", r->item_id, "output_index",
                            r->open_index, "delta", ev->text, ev->len));
    return 0;
}

static void resp_done(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err)
{
    struct resp_state *r = j->api;
    if (r->seq == 0 && j->stream) {
        resp_emit(j, "response.created", json_pack("{s:o}", "response", resp_obj(j, "in_progress", NULL, NULL)));
        resp_emit(j, "response.in_progress", json_pack("{s:o}", "response", resp_obj(j, "in_progress", NULL, NULL)));
    }
    resp_close(j, 0);
    const char *status = u->finish == CWEN_FINISH_LENGTH ? "incomplete" : "completed";
    json_t *o = resp_obj(j, status, json_incref(r->output), u);
    if (j->stream)
        resp_emit(j, u->finish == CWEN_FINISH_LENGTH ? "response.incomplete" : "response.completed",
                  json_pack("{s:o}", "response", o));
    else
        j->reply = o;
}

/* Responses input items → OpenAI chat messages. */
static int resp_messages(json_t *r, json_t *msgs, struct srv_err *e)
{
    const char *instr = NULL;
    if (rq_str(r, "instructions", &instr, e))
        return -1;
    if (instr)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", instr));
    json_t *in = json_object_get(r, "input");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in));
        return 0;
    }
    if (!json_is_array(in) || !json_array_size(in))
        return srv_errf(e, 400, "input", "'input' must be a string or a non-empty array of items");
    size_t i, k;
    json_t *it, *p;
    json_t *pending_reasoning = NULL;
    json_array_foreach(in, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!type && role)
            type = "message";
        if (!type)
            return srv_errf(e, 400, "input", "input[%zu] has no 'type'", i);
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        bool last_is_asst = last && !strcmp(json_string_value(json_object_get(last, "role")), "assistant");
        if (!strcmp(type, "message")) {
            if (!role)
                return srv_errf(e, 400, "input", "input[%zu] has no 'role'", i);
            if (!strcmp(role, "developer"))
                role = "system";
            json_t *c = json_object_get(it, "content"), *text;
            if (json_is_string(c)) {
                text = json_incref(c);
            } else if (json_is_array(c)) {
                char *acc = strdup("");
                json_array_foreach(c, k, p) {
                    const char *pt = json_string_value(json_object_get(p, "type"));
                    const char *tx = json_string_value(json_object_get(p, "text"));
                    if (!pt || (strcmp(pt, "input_text") && strcmp(pt, "output_text") &&
                                strcmp(pt, "text")) || !tx) {
                        free(acc);
                        return srv_errf(e, 400, "input",
                                        "input[%zu].content[%zu]: only text parts are supported", i, k);
                    }
                    char *n = malloc(strlen(acc) + strlen(tx) + 1);
                    strcpy(n, acc);
                    strcat(n, tx);
                    free(acc);
                    acc = n;
                }
                text = json_string(acc);
                free(acc);
            } else {
                return srv_errf(e, 400, "input", "input[%zu].content must be a string or an array", i);
            }
            json_t *m = json_pack("{s:s, s:o}", "role", role, "content", text);
            if (pending_reasoning && !strcmp(role, "assistant"))
                json_object_set(m, "reasoning_content", pending_reasoning);
            json_decref(pending_reasoning);
            pending_reasoning = NULL;
            json_array_append_new(msgs, m);
        } else if (!strcmp(type, "reasoning")) {
            json_t *c = json_array_get(json_object_get(it, "content"), 0);
            json_decref(pending_reasoning);
            pending_reasoning = json_incref(json_object_get(c, "text"));
        } else if (!strcmp(type, "function_call")) {
            const char *name = json_string_value(json_object_get(it, "name"));
            const char *args = json_string_value(json_object_get(it, "arguments"));
            if (!name || !args)
                return srv_errf(e, 400, "input", "input[%zu]: a function_call needs name and arguments", i);
            json_t *call = json_pack("{s:O?, s:s, s:{s:s, s:s}}", "id", json_object_get(it, "call_id"),
                                     "type", "function", "function", "name", name, "arguments", args);
            if (!last_is_asst) {
                last = json_pack("{s:s, s:s, s:[]}", "role", "assistant", "content", "", "tool_calls");
                if (pending_reasoning)
                    json_object_set(last, "reasoning_content", pending_reasoning);
                json_array_append_new(msgs, last);
            } else if (!json_object_get(last, "tool_calls")) {
                json_object_set_new(last, "tool_calls", json_array());
            }
            json_decref(pending_reasoning);
            pending_reasoning = NULL;
            json_array_append_new(json_object_get(last, "tool_calls"), call);
        } else if (!strcmp(type, "function_call_output")) {
            json_t *out = json_object_get(it, "output");
            if (!json_is_string(out))
                return srv_errf(e, 400, "input", "input[%zu]: function_call_output needs a string output", i);
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:O?}", "role", "tool", "content", out,
                                                  "tool_call_id", json_object_get(it, "call_id")));
        } else {
            return srv_errf(e, 400, "input", "input[%zu]: item type '%s' is not supported", i, type);
        }
    }
    json_decref(pending_reasoning);
    return 0;
}

int openai_responses(struct srv_job *j, struct srv_err *e)
{
    static const char *const refused[] = {"previous_response_id", "conversation", "background",
                                          "prompt", "include", NULL};
    static const char *const max_keys[] = {"max_output_tokens", NULL};
    json_t *r = j->req;
    struct resp_state *st = calloc(1, sizeof *st);
    st->output = json_array();
    j->api = st;
    j->api_free = resp_state_free;
    srv_make_id(j->srv, j->id, sizeof j->id, "resp_");
    j->on_event = resp_event;
    j->on_done = resp_done;
    bool think = true, parallel = true, drop_tools;
    if (rq_model(j, r, false, e) || rq_refuse(r, refused, e) || common(j, r, max_keys, e) ||
        rq_bool(r, "parallel_tool_calls", &parallel, e) || tool_choice(r, &drop_tools, e))
        return -1;
    json_t *rs = json_object_get(r, "reasoning");
    const char *eff = NULL;
    if (rs && !json_is_null(rs) && (!json_is_object(rs) || rq_str(rs, "effort", &eff, e)))
        return e->status ? -1 : srv_errf(e, 400, "reasoning", "'reasoning' must be an object");
    if (eff && !strcmp(eff, "none"))
        think = false;
    json_t *fmt = json_object_get(json_object_get(r, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (fmt && !json_is_null(fmt) && (!ft || strcmp(ft, "text")))
        return srv_errf(e, 400, "text.format", "'text.format' other than text is not supported yet");
    j->gp.one_tool_call = !parallel;
    json_t *msgs = json_array();
    json_t *conv = json_pack("{s:o, s:b, s:b}", "messages", msgs, "add_generation_prompt", 1,
                             "enable_thinking", think);
    if (resp_messages(r, msgs, e)) {
        json_decref(conv);
        return -1;
    }
    /* Responses tools are flat: {type, name, description, parameters} */
    json_t *tools = json_object_get(r, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        json_decref(conv);
        return srv_errf(e, 400, "tools", "'tools' must be an array");
    }
    if (json_array_size(tools) && !drop_tools) {
        json_t *ct = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function") || !json_is_string(json_object_get(t, "name"))) {
                json_decref(ct);
                json_decref(conv);
                return srv_errf(e, 400, "tools", "tools[%zu]: only function tools with a name are supported", i);
            }
            json_t *f = json_pack("{s:O}", "name", json_object_get(t, "name"));
            if (json_object_get(t, "description"))
                json_object_set(f, "description", json_object_get(t, "description"));
            if (json_object_get(t, "parameters"))
                json_object_set(f, "parameters", json_object_get(t, "parameters"));
            json_array_append_new(ct, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        json_object_set_new(conv, "tools", ct);
        j->tools_json = json_dumps(json_object_get(conv, "tools"), JSON_COMPACT);
        j->gp.tools_json = j->tools_json;
    }
    if (rq_chat_prompt(j, conv, e))
        return -1;
    return rq_fits(j, e);
}
