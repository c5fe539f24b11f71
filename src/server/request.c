/* request.c — typed reading of request JSON, shared by every dialect.
 *
 * Owns the field readers (a wrong type or range is a 400 naming the field),
 * the sampling fields every dialect spells alike, stop strings, the model
 * name rule, the refusal of known-but-unimplemented fields, and turning a
 * prompt (text, or an OpenAI-shaped conversation through the chat template)
 * into tokens that fit the context. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

#define MAX_STOP 16

int srv_errf(struct srv_err *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

int rq_num(json_t *o, const char *key, double lo, double hi, double *out, struct srv_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return srv_errf(e, 400, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return srv_errf(e, 400, key, "'%s' must be between %g and %g (got %g)", key, lo, hi, x);
    *out = x;
    return 0;
}

int rq_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, struct srv_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return srv_errf(e, 400, key, "'%s' must be an integer", key);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return srv_errf(e, 400, key, "'%s' must be between %lld and %lld (got %lld)", key,
                        (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return 0;
}

int rq_bool(json_t *o, const char *key, bool *out, struct srv_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return srv_errf(e, 400, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

int rq_str(json_t *o, const char *key, const char **out, struct srv_err *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return srv_errf(e, 400, key, "'%s' must be a string", key);
    *out = json_string_value(v);
    return 0;
}

int rq_sampling(struct srv_job *j, json_t *o, const char *key_stop, struct srv_err *e)
{
    struct cw_sampling *s = &j->gp.sampling;
    double t = s->temperature, tp = s->top_p, mp = s->min_p, pp = 0, fp = 0, rp = 1;
    int64_t tk = 0, seed = -1;
    if (rq_num(o, "temperature", 0, 100, &t, e) || rq_num(o, "top_p", 0, 1, &tp, e) ||
        rq_num(o, "min_p", 0, 1, &mp, e) || rq_num(o, "presence_penalty", -2, 2, &pp, e) ||
        rq_num(o, "frequency_penalty", -2, 2, &fp, e) ||
        rq_num(o, "repetition_penalty", 0.01, 10, &rp, e) ||
        rq_int(o, "top_k", 0, 1 << 30, &tk, e) || rq_int(o, "seed", INT64_MIN, INT64_MAX, &seed, e))
        return -1;
    if (tp <= 0)
        return srv_errf(e, 400, "top_p", "'top_p' must be above 0");
    s->temperature = (float)t, s->top_p = (float)tp, s->min_p = (float)mp;
    s->presence_penalty = (float)pp, s->frequency_penalty = (float)fp;
    s->repetition_penalty = (float)rp, s->top_k = (int32_t)tk;
    if (json_object_get(o, "seed") && !json_is_null(json_object_get(o, "seed"))) {
        s->seed = (uint64_t)seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s->seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
    s->penalty_last_n = 64;
    json_t *st = key_stop ? field(o, key_stop) : NULL;
    if (!st)
        return 0;
    json_t *arr = json_is_string(st) ? json_pack("[O]", st) : json_incref(st);
    if (!json_is_array(arr) || json_array_size(arr) > MAX_STOP) {
        json_decref(arr);
        return srv_errf(e, 400, key_stop, "'%s' must be a string or an array of at most %d strings",
                        key_stop, MAX_STOP);
    }
    j->stops = calloc(json_array_size(arr) + 1, sizeof(char *));
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (!json_is_string(v) || !json_string_length(v)) {
            json_decref(arr);
            return srv_errf(e, 400, key_stop, "'%s' entries must be non-empty strings", key_stop);
        }
        j->stops[j->gp.n_stop++] = strdup(json_string_value(v));
    }
    json_decref(arr);
    j->gp.stop = (const char *const *)j->stops;
    return 0;
}

int rq_logit_bias(struct srv_job *j, json_t *r, struct srv_err *e)
{
    json_t *lb = json_object_get(r, "logit_bias");
    if (!lb || json_is_null(lb))
        return 0;
    if (!json_is_object(lb))
        return srv_errf(e, 400, "logit_bias", "'logit_bias' must map token ids to numbers");
    j->bias = calloc(json_object_size(lb) + 1, sizeof *j->bias);
    const char *k;
    json_t *v;
    int32_t nv = cwen_get_info(srv_engine(j->srv))->n_vocab;
    json_object_foreach(lb, k, v) {
        char *end;
        long id = strtol(k, &end, 10);
        if (*end || end == k || id < 0 || id >= nv)
            return srv_errf(e, 400, "logit_bias", "logit_bias: '%s' is not a token id", k);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return srv_errf(e, 400, "logit_bias",
                            "logit_bias: the bias of %s must be a number in [-100, 100]", k);
        j->bias[j->gp.sampling.n_bias++] =
            (struct cw_logit_bias){(int32_t)id, (float)json_number_value(v)};
    }
    j->gp.sampling.bias = j->bias;
    return 0;
}

int rq_model(struct srv_job *j, json_t *o, bool required, struct srv_err *e)
{
    const cwen *en = srv_engine(j->srv);
    const struct cwen_info *in = cwen_get_info(en);
    json_t *v = json_object_get(o, "model");
    if (!v && required)
        return srv_errf(e, 400, "model", "'model' is required: use \"%s\"", in->model_name);
    const char *m = NULL;
    if (rq_str(o, "model", &m, e))
        return -1;
    if (!cwen_model_name_ok(en, m)) {
        /* the file's name is accepted too; named only where it differs */
        const bool also = strcmp(in->model_name, in->file_name) != 0;
        return srv_errf(e, 400, "model",
                        "model '%s' is not served here; this server serves \"%s\"%s%s%s; "
                        "an empty name means the served model",
                        m, in->model_name, also ? " (also \"" : "", also ? in->file_name : "",
                        also ? "\")" : "");
    }
    j->model = strdup(m && *m ? m : in->model_name);
    return 0;
}

int rq_refuse(json_t *o, const char *const *keys, struct srv_err *e)
{
    for (; *keys; keys++)
        if (field(o, *keys))
            return srv_errf(e, 400, *keys, "'%s' is not supported by this server", *keys);
    return 0;
}

int rq_prompt(struct srv_job *j, const char *text, struct srv_err *e)
{
    struct cw_err err = {0};
    size_t n = 0;
    if (cwen_tokenize(srv_engine(j->srv), text, strlen(text), true, &j->prompt, &n, &err) < 0)
        return srv_errf(e, 500, "", "%s", err.msg);
    j->gp.prompt = j->prompt;
    j->gp.n_prompt = n;
    return 0;
}

int rq_chat_prompt(struct srv_job *j, json_t *conv, struct srv_err *e)
{
    char *text = json_dumps(conv, JSON_COMPACT);
    json_decref(conv);
    if (!text)
        return srv_errf(e, 500, "", "out of memory");
    char *prompt = NULL;
    struct cw_err err = {0};
    int rc = cwen_render_chat(srv_engine(j->srv), text, strlen(text), &prompt, &err);
    free(text);
    if (rc < 0)
        return srv_errf(e, err.code == CW_ERR_UNSUPPORTED ? 500 : 400, "messages", "%s", err.msg);
    size_t n = strlen(prompt);
    /* thinking on leaves the prompt open inside <think> */
    j->gp.in_reasoning = n >= 8 && !strcmp(prompt + n - 8, "<think>\n");
    j->gp.mode = CWEN_OUT_CHAT;
    rc = rq_prompt(j, prompt, e);
    free(prompt);
    return rc;
}

int rq_fits(struct srv_job *j, struct srv_err *e)
{
    int64_t n_ctx = cwen_get_info(srv_engine(j->srv))->n_ctx;
    int64_t np = (int64_t)j->gp.n_prompt;
    if (np == 0)
        return srv_errf(e, 400, "", "the prompt is empty");
    if (j->gp.max_tokens <= 0)
        j->gp.max_tokens = n_ctx - np > 0 ? n_ctx - np : 1;
    if (np + j->gp.max_tokens > n_ctx)
        return srv_errf(e, 400, "max_tokens",
                        "context overflow: this model's context is %lld tokens, but %lld were "
                        "requested (%lld in the prompt, %lld for the output)",
                        (long long)n_ctx, (long long)(np + j->gp.max_tokens), (long long)np,
                        (long long)j->gp.max_tokens);
    return 0;
}

void srv_make_id(struct cw_server *s, char *out, size_t cap, const char *prefix)
{
    static const char hex[] = "0123456789abcdef";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (srv_next_seq(s) * 0x9E3779B97F4A7C15u);
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && n + 1 < cap; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[n++] = hex[x & 15];
    }
    out[n] = 0;
}
