/* api_anthropic.c — the Anthropic dialect: /v1/messages (plain and streamed),
 * /v1/messages/count_tokens, and Anthropic's error body.
 *
 * Owns translating Anthropic requests (system, content blocks: text,
 * thinking, tool_use, tool_result; tools with input_schema; tool_choice;
 * thinking on/off) into the OpenAI-shaped conversation the chat template
 * takes, and the model's events back into content blocks: thinking, text
 * and tool_use, streamed as message_start / content_block_start / *_delta /
 * content_block_stop / message_delta / message_stop with a ping. */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

const char *anthropic_error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *anthropic_error(const struct srv_err *e)
{
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                     anthropic_error_type(e->status), "message", e->msg);
}

/* Text of a string or an array of text blocks; NULL with e set otherwise. */
static char *block_text(json_t *c, const char *where, struct srv_err *e)
{
    if (json_is_string(c))
        return strdup(json_string_value(c));
    if (!json_is_array(c)) {
        srv_errf(e, 400, where, "%s must be a string or an array of text blocks", where);
        return NULL;
    }
    size_t n = 0, i;
    json_t *b;
    json_array_foreach(c, i, b) {
        const char *t = json_string_value(json_object_get(b, "type"));
        if (!t || strcmp(t, "text") || !json_is_string(json_object_get(b, "text"))) {
            srv_errf(e, 400, where, "%s[%zu]: only text blocks are supported here (got %s)", where,
                     i, t ? t : "no type");
            return NULL;
        }
        n += json_string_length(json_object_get(b, "text"));
    }
    char *out = malloc(n + 1), *p = out;
    json_array_foreach(c, i, b) {
        json_t *t = json_object_get(b, "text");
        memcpy(p, json_string_value(t), json_string_length(t));
        p += json_string_length(t);
    }
    *p = 0;
    return out;
}

/* One Anthropic message → OpenAI messages appended to out. */
static int convert_message(json_t *m, size_t i, json_t *out, struct srv_err *e)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return srv_errf(e, 400, "messages", "messages[%zu].role must be \"user\" or \"assistant\"", i);
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
        return 0;
    }
    if (!json_is_array(c))
        return srv_errf(e, 400, "messages", "messages[%zu].content must be a string or an array", i);
    bool asst = !strcmp(role, "assistant");
    json_t *text = json_string(""), *reasoning = NULL, *calls = json_array();
    size_t k;
    json_t *b;
    int rc = 0;
    json_array_foreach(c, k, b) {
        const char *t = json_string_value(json_object_get(b, "type"));
        if (!t) {
            rc = srv_errf(e, 400, "messages", "messages[%zu].content[%zu] has no type", i, k);
            break;
        }
        if (!strcmp(t, "text") && json_is_string(json_object_get(b, "text"))) {
            char *s = malloc(json_string_length(text) + json_string_length(json_object_get(b, "text")) + 1);
            strcpy(s, json_string_value(text));
            strcat(s, json_string_value(json_object_get(b, "text")));
            json_decref(text);
            text = json_string(s);
            free(s);
        } else if (asst && !strcmp(t, "thinking") && json_is_string(json_object_get(b, "thinking"))) {
            json_decref(reasoning);
            reasoning = json_incref(json_object_get(b, "thinking"));
        } else if (asst && !strcmp(t, "redacted_thinking")) {
            continue;
        } else if (asst && !strcmp(t, "tool_use")) {
            json_t *in = json_object_get(b, "input");
            const char *name = json_string_value(json_object_get(b, "name"));
            if (!name || (in && !json_is_object(in))) {
                rc = srv_errf(e, 400, "messages",
                              "messages[%zu].content[%zu]: tool_use needs a name and an object input", i, k);
                break;
            }
            json_array_append_new(calls, json_pack("{s:O?, s:s, s:{s:s, s:O}}", "id",
                                                   json_object_get(b, "id"), "type", "function",
                                                   "function", "name", name, "arguments",
                                                   in ? in : json_object()));
        } else if (!asst && !strcmp(t, "tool_result")) {
            json_t *rcnt = json_object_get(b, "content");
            char *s = rcnt ? block_text(rcnt, "messages", e) : strdup("");
            if (!s) {
                rc = -1;
                break;
            }
            json_array_append_new(out, json_pack("{s:s, s:s, s:O?}", "role", "tool", "content", s,
                                                 "tool_call_id", json_object_get(b, "tool_use_id")));
            free(s);
        } else {
            rc = srv_errf(e, 400, "messages",
                          "messages[%zu].content[%zu]: block type '%s' is not supported in a %s message",
                          i, k, t, role);
            break;
        }
    }
    if (!rc && (json_string_length(text) || json_array_size(calls) || reasoning || asst ||
                !json_array_size(c))) {
        json_t *msg = json_pack("{s:s, s:O}", "role", role, "content", text);
        if (reasoning)
            json_object_set(msg, "reasoning_content", reasoning);
        if (json_array_size(calls))
            json_object_set(msg, "tool_calls", calls);
        json_array_append_new(out, msg);
    }
    json_decref(text);
    json_decref(reasoning);
    json_decref(calls);
    return rc;
}

/* The request's conversation, tools and switches → j's prompt. */
static int anth_prompt(struct srv_job *j, struct srv_err *e)
{
    json_t *r = j->req;
    json_t *msgs = json_object_get(r, "messages");
    if (!msgs)
        return srv_errf(e, 400, "messages", "'messages' is required");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return srv_errf(e, 400, "messages", "'messages' must be a non-empty array");
    bool think = true;
    json_t *th = json_object_get(r, "thinking");
    if (th && !json_is_null(th)) {
        const char *t = json_string_value(json_object_get(th, "type"));
        if (!t || (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
            return srv_errf(e, 400, "thinking",
                            "'thinking.type' must be \"enabled\", \"adaptive\" or \"disabled\"");
        think = strcmp(t, "disabled") != 0;
    }
    json_t *tc = json_object_get(r, "tool_choice");
    bool drop_tools = false;
    if (tc && !json_is_null(tc)) {
        const char *t = json_string_value(json_object_get(tc, "type"));
        if (!t || (strcmp(t, "auto") && strcmp(t, "none")))
            return srv_errf(e, 400, "tool_choice",
                            "'tool_choice.type' must be \"auto\" or \"none\": forcing a tool call is "
                            "not supported");
        drop_tools = !strcmp(t, "none");
        j->gp.one_tool_call = json_is_true(json_object_get(tc, "disable_parallel_tool_use"));
    }
    json_t *out = json_array();
    json_t *conv = json_pack("{s:o, s:b, s:b}", "messages", out, "add_generation_prompt", 1,
                             "enable_thinking", think);
    json_t *sys = json_object_get(r, "system");
    if (sys && !json_is_null(sys)) {
        char *s = block_text(sys, "system", e);
        if (!s)
            goto fail;
        json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", s));
        free(s);
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) {
            srv_errf(e, 400, "messages", "messages[%zu] must be an object", i);
            goto fail;
        }
        if (convert_message(m, i, out, e))
            goto fail;
    }
    json_t *tools = json_object_get(r, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        srv_errf(e, 400, "tools", "'tools' must be an array");
        goto fail;
    }
    if (json_array_size(tools) && !drop_tools) {
        json_t *ct = json_array(), *t;
        json_object_set_new(conv, "tools", ct);
        json_array_foreach(tools, i, t) {
            const char *name = json_string_value(json_object_get(t, "name"));
            json_t *type = json_object_get(t, "type");
            if (!name || (type && !json_is_null(type) &&
                          strcmp(json_string_value(type) ? json_string_value(type) : "", "custom"))) {
                srv_errf(e, 400, "tools",
                         "tools[%zu]: only custom tools with a name and input_schema are supported", i);
                goto fail;
            }
            json_t *f = json_pack("{s:s}", "name", name);
            if (json_object_get(t, "description"))
                json_object_set(f, "description", json_object_get(t, "description"));
            json_object_set(f, "parameters", json_object_get(t, "input_schema")
                                                 ? json_object_get(t, "input_schema")
                                                 : json_object());
            json_array_append_new(ct, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        j->tools_json = json_dumps(ct, JSON_COMPACT);
        j->gp.tools_json = j->tools_json;
    }
    return rq_chat_prompt(j, conv, e);
fail:
    json_decref(conv);
    return -1;
}

json_t *anthropic_count_tokens(struct cw_server *s, json_t *req, struct srv_err *e)
{
    struct srv_job j = {.srv = s, .req = req, .dialect = SRV_ANTHROPIC};
    json_t *out = NULL;
    if (!rq_model(&j, req, false, e) && !anth_prompt(&j, e))
        out = json_pack("{s:I}", "input_tokens", (json_int_t)j.gp.n_prompt);
    free(j.prompt);
    free(j.tools_json);
    free(j.model);
    return out;
}

/* ---- replies -------------------------------------------------------------- */

struct anth_state {
    int n_blocks; /* blocks opened */
    int open;     /* 0 none, 1 thinking, 2 text, 3 tool_use */
};

static void tool_use_id(struct srv_job *j, int idx, char *out, size_t cap)
{
    snprintf(out, cap, "toolu_%.16s_%d", j->id + strlen(j->id) - 16, idx);
}

static json_t *parse_args(const char *args)
{
    json_t *in = json_loads(args ? args : "{}", 0, NULL);
    if (!json_is_object(in)) {
        json_decref(in);
        in = json_object();
    }
    return in;
}

static void block_stop(struct srv_job *j)
{
    struct anth_state *a = j->api;
    if (!a->open)
        return;
    srv_sse_json(j, "content_block_stop",
                 json_pack("{s:s, s:i}", "type", "content_block_stop", "index", a->n_blocks - 1));
    a->open = 0;
}

static void block_start(struct srv_job *j, int kind, json_t *block)
{
    struct anth_state *a = j->api;
    block_stop(j);
    a->open = kind;
    srv_sse_json(j, "content_block_start",
                 json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", a->n_blocks++,
                           "content_block", block));
}

static void delta(struct srv_job *j, json_t *d)
{
    struct anth_state *a = j->api;
    srv_sse_json(j, "content_block_delta",
                 json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index",
                           a->n_blocks - 1, "delta", d));
}

static json_t *usage_json(const struct cwen_usage *u, bool start)
{
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", (json_int_t)u->n_prompt,
                     "output_tokens", (json_int_t)(start ? 0 : u->n_completion),
                     "cache_read_input_tokens", (json_int_t)u->n_cached,
                     "cache_creation_input_tokens", (json_int_t)0);
}

static void message_start(struct srv_job *j)
{
    struct cwen_usage u0 = {.n_prompt = (int64_t)j->gp.n_prompt};
    srv_sse_json(j, "message_start",
                 json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type",
                           "message_start", "message", "id", j->id, "type", "message", "role",
                           "assistant", "model", j->model, "content", "stop_reason",
                           "stop_sequence", "usage", usage_json(&u0, true)));
    srv_sse_json(j, "ping", json_pack("{s:s}", "type", "ping"));
}

static int anth_event(struct srv_job *j, const struct cwen_event *ev)
{
    struct anth_state *a = j->api;
    if (srv_accumulate(j, ev) < 0)
        return 1;
    if (!j->stream)
        return 0;
    if (ev->type == CWEN_EV_REASONING) {
        if (a->open != 1)
            block_start(j, 1, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "",
                                        "signature", ""));
        delta(j, json_pack("{s:s, s:s%}", "type", "thinking_delta", "thinking", ev->text, ev->len));
    } else if (ev->type == CWEN_EV_TEXT) {
        if (a->open != 2)
            block_start(j, 2, json_pack("{s:s, s:s}", "type", "text", "text", ""));
        delta(j, json_pack("{s:s, s:s%}", "type", "text_delta", "text", ev->text, ev->len));
    } else if (ev->type == CWEN_EV_TOOL_BEGIN) {
        char id[64];
        tool_use_id(j, ev->tool_index, id, sizeof id);
        block_start(j, 3, json_pack("{s:s, s:s, s:s%, s:{}}", "type", "tool_use", "id", id, "name",
                                    ev->text, ev->len, "input"));
    } else if (ev->type == CWEN_EV_TOOL_ARGS) {
        delta(j, json_pack("{s:s, s:s%}", "type", "input_json_delta", "partial_json", ev->text,
                           ev->len));
    } else if (ev->type == CWEN_EV_TOOL_END) {
        block_stop(j);
    }
    return 0;
}

static const char *stop_reason(const struct cwen_usage *u)
{
    switch (u->finish) {
    case CWEN_FINISH_LENGTH: return "max_tokens";
    case CWEN_FINISH_TOOL_CALLS: return "tool_use";
    default: return u->stop_string ? "stop_sequence" : "end_turn";
    }
}

static void anth_done(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err)
{
    if (j->stream) {
        block_stop(j);
        srv_sse_json(j, "message_delta",
                     json_pack("{s:s, s:{s:s, s:s?}, s:o}", "type", "message_delta", "delta",
                               "stop_reason", stop_reason(u), "stop_sequence", u->stop_string,
                               "usage", usage_json(u, false)));
        srv_sse_json(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    json_t *content = json_array();
    if (j->n_reasoning)
        json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking",
                                                 j->reasoning, "signature", ""));
    if (j->n_content)
        json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", j->content));
    size_t i;
    json_t *c;
    json_array_foreach(j->tool_calls, i, c) {
        char id[64];
        tool_use_id(j, (int)i, id, sizeof id);
        json_array_append_new(content,
                              json_pack("{s:s, s:s, s:O, s:o}", "type", "tool_use", "id", id, "name",
                                        json_object_get(c, "name"), "input",
                                        parse_args(json_string_value(json_object_get(c, "arguments")))));
    }
    j->reply = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:s?, s:o}", "id", j->id, "type",
                         "message", "role", "assistant", "model", j->model, "content", content,
                         "stop_reason", stop_reason(u), "stop_sequence", u->stop_string, "usage",
                         usage_json(u, false));
}

static int anth_first(struct srv_job *j, const struct cwen_event *ev)
{
    /* message_start goes out when the worker starts the job */
    j->on_event = anth_event;
    if (j->stream)
        message_start(j);
    return anth_event(j, ev);
}

static void anth_done_first(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err)
{
    if (j->stream && j->on_event != anth_event)
        message_start(j);
    anth_done(j, u, err);
}

int anthropic_messages(struct srv_job *j, struct srv_err *e)
{
    static const char *const refused[] = {"container", "mcp_servers", NULL};
    json_t *r = j->req;
    struct anth_state *a = calloc(1, sizeof *a);
    j->api = a;
    j->api_free = free;
    srv_make_id(j->srv, j->id, sizeof j->id, "msg_");
    j->on_event = anth_first;
    j->on_done = anth_done_first;
    if (!json_object_get(r, "max_tokens"))
        return srv_errf(e, 400, "max_tokens", "'max_tokens' is required");
    if (rq_model(j, r, false, e) || rq_refuse(r, refused, e) ||
        rq_int(r, "max_tokens", 1, 1 << 30, &j->gp.max_tokens, e) ||
        rq_bool(r, "stream", &j->stream, e) || rq_sampling(j, r, "stop_sequences", e) ||
        anth_prompt(j, e))
        return -1;
    return rq_fits(j, e);
}
