/* sse.c — a job's outputs: server-sent events and the accumulated reply.
 *
 * Owns the byte stream a streaming connection drains (events appended by the
 * worker, one `event:`/`data:` record each, JSON always built by jansson)
 * and the accumulation every chat dialect shares: answer text, reasoning
 * text, completed tool calls and per-token log-probs, from which the
 * non-streaming replies and the final streaming events are built. */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static int append(char **p, size_t *n, size_t *cap, const char *s, size_t len)
{
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + len + 1)
            c *= 2;
        char *q = realloc(*p, c);
        if (!q)
            return -1;
        *p = q;
        *cap = c;
    }
    memcpy(*p + *n, s, len);
    *n += len;
    (*p)[*n] = 0;
    return 0;
}

void srv_sse_raw(struct srv_job *j, const char *text)
{
    pthread_mutex_lock(&j->mu);
    append(&j->out, &j->n_out, &j->cap_out, text, strlen(text));
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_sse_json(struct srv_job *j, const char *event, json_t *obj)
{
    char *data = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!data)
        return;
    pthread_mutex_lock(&j->mu);
    if (event) {
        append(&j->out, &j->n_out, &j->cap_out, "event: ", 7);
        append(&j->out, &j->n_out, &j->cap_out, event, strlen(event));
        append(&j->out, &j->n_out, &j->cap_out, "\n", 1);
    }
    append(&j->out, &j->n_out, &j->cap_out, "data: ", 6);
    append(&j->out, &j->n_out, &j->cap_out, data, strlen(data));
    append(&j->out, &j->n_out, &j->cap_out, "\n\n", 2);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(data);
}

static json_t *token_json(const cwen *e, int32_t id, float logprob)
{
    size_t n = 0;
    const char *s = cwen_token_piece(e, id, &n);
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)s[i]));
    /* a piece may be part of a UTF-8 sequence: bytes has the truth */
    char clean[3 * 256];
    json_t *tok = json_stringn(clean, n <= 256 ? cwen_utf8_lossy(s, n, clean) : 0);
    return json_pack("{s:I, s:o, s:f, s:o}", "id", (json_int_t)id, "token", tok, "logprob",
                     (double)logprob, "bytes", bytes);
}

int srv_accumulate(struct srv_job *j, const struct cwen_event *ev)
{
    switch (ev->type) {
    case CWEN_EV_TEXT:
        return append(&j->content, &j->n_content, &j->cap_content, ev->text, ev->len);
    case CWEN_EV_REASONING:
        return append(&j->reasoning, &j->n_reasoning, &j->cap_reasoning, ev->text, ev->len);
    case CWEN_EV_TOOL_BEGIN:
        return json_array_append_new(j->tool_calls,
                                     json_pack("{s:s%, s:s}", "name", ev->text, ev->len,
                                               "arguments", ""));
    case CWEN_EV_TOOL_END: {
        json_t *c = json_array_get(j->tool_calls, (size_t)ev->tool_index);
        return c ? json_object_set_new(c, "arguments", json_stringn(ev->text, ev->len)) : -1;
    }
    case CWEN_EV_TOOL_ARGS:
        return 0;
    case CWEN_EV_TOKEN: {
        if (!j->logprobs)
            j->logprobs = json_array();
        const cwen *e = srv_engine(j->srv);
        json_t *t = token_json(e, ev->token, ev->logprob);
        json_t *top = json_array();
        for (int i = 0; i < ev->n_top; i++)
            json_array_append_new(top, token_json(e, ev->top[i].id, ev->top[i].logprob));
        json_object_set_new(t, "top", top);
        return json_array_append_new(j->logprobs, t);
    }
    }
    return 0;
}
