/* test_server_translate.c — the dialects' translation of engine events into
 * replies, for what a random-weight model never produces on its own: tool
 * calls (two in one reply, arguments streamed in pieces) after reasoning
 * and text. Each dialect parses a real request against a real (tiny) engine,
 * then gets a scripted event sequence; the non-streaming JSON and the SSE
 * stream are checked field by field, and the streamed deltas must add up to
 * the non-streamed reply. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "test.h"

static struct cw_server *srv;

static const char *ARGS0 = "{\"city\": \"Paris\", \"days\": 2}";

/* reasoning, text, then two tool calls; the first's arguments in 3 pieces */
static void script(struct srv_job *j)
{
    struct cwen_event evs[] = {
        {.type = CWEN_EV_REASONING, .text = "Let me ", .len = 7},
        {.type = CWEN_EV_REASONING, .text = "check.", .len = 6},
        {.type = CWEN_EV_TEXT, .text = "Sure.", .len = 5},
        {.type = CWEN_EV_TOOL_BEGIN, .text = "get_weather", .len = 11, .tool_index = 0},
        {.type = CWEN_EV_TOOL_ARGS, .text = ARGS0, .len = 17, .tool_index = 0},
        {.type = CWEN_EV_TOOL_ARGS, .text = ARGS0 + 17, .len = 10, .tool_index = 0},
        {.type = CWEN_EV_TOOL_ARGS, .text = ARGS0 + 27, .len = 1, .tool_index = 0},
        {.type = CWEN_EV_TOOL_END, .text = ARGS0, .len = 28, .tool_index = 0},
        {.type = CWEN_EV_TOOL_BEGIN, .text = "get_time", .len = 8, .tool_index = 1},
        {.type = CWEN_EV_TOOL_ARGS, .text = "{}", .len = 2, .tool_index = 1},
        {.type = CWEN_EV_TOOL_END, .text = "{}", .len = 2, .tool_index = 1},
    };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        ok(j->on_event(j, &evs[i]) == 0, "event %zu accepted", i);
    struct cwen_usage u = {.n_prompt = (int64_t)j->gp.n_prompt, .n_completion = 30,
                           .n_reasoning = 4, .n_tool_calls = 2, .finish = CWEN_FINISH_TOOL_CALLS};
    j->on_done(j, &u, NULL);
}

static struct srv_job *job(enum srv_dialect d, const char *req_json, bool stream,
                           int (*parse)(struct srv_job *, struct srv_err *))
{
    json_t *req = json_loads(req_json, 0, NULL);
    json_object_set_new(req, "stream", json_boolean(stream));
    struct srv_job *j = srv_job_new(srv, d, req);
    struct srv_err e = {0};
    ok(parse(j, &e) == 0, "request parses: %s", e.msg);
    return j;
}

/* SSE text → array of {event, data} */
static json_t *sse(const struct srv_job *j)
{
    json_t *out = json_array();
    const char *p = j->out ? j->out : "";
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end)
            break;
        const char *ev = NULL, *data = strstr(p, "data: ");
        size_t evn = 0;
        if (!strncmp(p, "event: ", 7)) {
            ev = p + 7;
            evn = (size_t)(strchr(ev, '\n') - ev);
        }
        json_t *d = strncmp(data + 6, "[DONE]", 6) ? json_loadb(data + 6, (size_t)(end - data - 6), 0, NULL)
                                                   : json_string("[DONE]");
        json_array_append_new(out, json_pack("{s:s%, s:o}", "event", ev ? ev : "", evn, "data", d));
        p = end + 2;
    }
    return out;
}

static const char *S(json_t *v) { return json_string_value(v) ? json_string_value(v) : "(null)"; }
#define AT(o, path) json_object_get(o, path)

static const char *OAI_REQ = "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],"
                             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                             "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}],"
                             "\"max_tokens\":8}";

static void openai_chat_tools(void)
{
    struct srv_job *j = job(SRV_OPENAI, OAI_REQ, false, openai_chat);
    ok(j->gp.tools_json != NULL, "tools reach the output parser");
    script(j);
    json_t *ch = json_array_get(AT(j->reply, "choices"), 0), *m = AT(ch, "message");
    ok(!strcmp(S(AT(ch, "finish_reason")), "tool_calls"), "finish_reason tool_calls");
    ok(!strcmp(S(AT(m, "reasoning_content")), "Let me check."), "reasoning_content");
    ok(!strcmp(S(AT(m, "content")), "Sure."), "content");
    json_t *tc = AT(m, "tool_calls");
    ok(json_array_size(tc) == 2, "two tool calls");
    json_t *t0 = json_array_get(tc, 0), *t1 = json_array_get(tc, 1);
    ok(!strcmp(S(AT(AT(t0, "function"), "name")), "get_weather"), "call 0 name");
    ok(!strcmp(S(AT(AT(t0, "function"), "arguments")), ARGS0), "call 0 arguments (a JSON string)");
    ok(!strcmp(S(AT(AT(t1, "function"), "arguments")), "{}"), "call 1 arguments");
    ok(!strcmp(S(AT(t0, "type")), "function") && !strncmp(S(AT(t0, "id")), "call_", 5) &&
           strcmp(S(AT(t0, "id")), S(AT(t1, "id"))),
       "ids: call_…, distinct");
    json_t *reply = json_incref(j->reply);
    srv_job_release(j);

    j = job(SRV_OPENAI, OAI_REQ, true, openai_chat);
    script(j);
    json_t *evs = sse(j);
    char args[2][128] = {{0}};
    int n_named = 0;
    size_t i;
    json_t *e;
    const char *fin = NULL;
    json_array_foreach(evs, i, e) {
        json_t *d = AT(e, "data");
        if (json_is_string(d))
            continue;
        json_t *c = json_array_get(AT(d, "choices"), 0);
        if (json_is_string(AT(c, "finish_reason")))
            fin = S(AT(c, "finish_reason"));
        json_t *calls = AT(AT(c, "delta"), "tool_calls");
        size_t k;
        json_t *tcd;
        json_array_foreach(calls, k, tcd) {
            int idx = (int)json_integer_value(AT(tcd, "index"));
            if (AT(tcd, "id")) {
                n_named++;
                ok(!strncmp(S(AT(tcd, "id")), "call_", 5) &&
                       !strcmp(S(AT(AT(tcd, "function"), "name")), idx ? "get_time" : "get_weather"),
                   "call %d announced with its id and name", idx);
            }
            strcat(args[idx], S(AT(AT(tcd, "function"), "arguments")));
        }
    }
    ok(n_named == 2, "each call announced once with id and name (%d)", n_named);
    ok(!strcmp(args[0], ARGS0) && !strcmp(args[1], "{}"), "argument deltas add up: %s | %s", args[0], args[1]);
    ok(fin && !strcmp(fin, "tool_calls"), "stream finish_reason tool_calls");
    ok(!strcmp(S(AT(json_array_get(evs, json_array_size(evs) - 1), "data")), "[DONE]"), "[DONE] last");
    json_decref(evs);
    json_decref(reply);
    srv_job_release(j);
}

static const char *ANT_REQ = "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],"
                             "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}]}";

static void anthropic_tools(void)
{
    struct srv_job *j = job(SRV_ANTHROPIC, ANT_REQ, false, anthropic_messages);
    script(j);
    json_t *c = AT(j->reply, "content");
    ok(json_array_size(c) == 4, "thinking, text, 2 tool_use blocks");
    ok(!strcmp(S(AT(json_array_get(c, 0), "type")), "thinking") &&
           !strcmp(S(AT(json_array_get(c, 0), "thinking")), "Let me check."), "thinking block");
    ok(!strcmp(S(AT(json_array_get(c, 1), "text")), "Sure."), "text block");
    json_t *tu = json_array_get(c, 2);
    ok(!strcmp(S(AT(tu, "type")), "tool_use") && !strcmp(S(AT(tu, "name")), "get_weather") &&
           !strncmp(S(AT(tu, "id")), "toolu_", 6), "tool_use block");
    ok(json_integer_value(AT(AT(tu, "input"), "days")) == 2 &&
           !strcmp(S(AT(AT(tu, "input"), "city")), "Paris"), "tool_use input is the parsed object");
    ok(!strcmp(S(AT(j->reply, "stop_reason")), "tool_use"), "stop_reason tool_use");
    srv_job_release(j);

    j = job(SRV_ANTHROPIC, ANT_REQ, true, anthropic_messages);
    script(j);
    json_t *evs = sse(j);
    static const char *const want[] = {
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"};
    size_t n = sizeof want / sizeof want[0];
    ok(json_array_size(evs) == n, "%zu events (got %zu)", n, json_array_size(evs));
    char partial[128] = "";
    for (size_t i = 0; i < n && i < json_array_size(evs); i++) {
        json_t *e = json_array_get(evs, i), *d = AT(e, "data");
        ok(!strcmp(S(AT(e, "event")), want[i]) && !strcmp(S(AT(d, "type")), want[i]),
           "event %zu is %s (got %s)", i, want[i], S(AT(e, "event")));
        if (i >= 9 && i <= 13 && !strcmp(want[i], "content_block_delta")) {
            ok(!strcmp(S(AT(AT(d, "delta"), "type")), "input_json_delta") &&
                   json_integer_value(AT(d, "index")) == 2, "input_json_delta on block 2");
            strcat(partial, S(AT(AT(d, "delta"), "partial_json")));
        }
    }
    ok(!strcmp(partial, ARGS0), "partial_json adds up: %s", partial);
    json_t *start = AT(json_array_get(evs, 9), "data");
    ok(!strcmp(S(AT(AT(start, "content_block"), "name")), "get_weather") &&
           json_is_object(AT(AT(start, "content_block"), "input")), "tool_use block start");
    ok(!strcmp(S(AT(AT(AT(json_array_get(evs, n - 2), "data"), "delta"), "stop_reason")), "tool_use"),
       "message_delta stop_reason tool_use");
    json_decref(evs);
    srv_job_release(j);
}

static const char *RESP_REQ = "{\"input\":\"weather?\",\"max_output_tokens\":8,"
                              "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{}}]}";

static void responses_tools(void)
{
    struct srv_job *j = job(SRV_OPENAI, RESP_REQ, false, openai_responses);
    script(j);
    json_t *out = AT(j->reply, "output");
    ok(json_array_size(out) == 4, "reasoning, message, 2 function_call items");
    ok(!strcmp(S(AT(json_array_get(out, 0), "type")), "reasoning"), "reasoning item");
    ok(!strcmp(S(AT(json_array_get(AT(json_array_get(out, 1), "content"), 0), "text")), "Sure."),
       "message item text");
    json_t *fc = json_array_get(out, 2);
    ok(!strcmp(S(AT(fc, "type")), "function_call") && !strcmp(S(AT(fc, "name")), "get_weather") &&
           !strcmp(S(AT(fc, "arguments")), ARGS0) && !strncmp(S(AT(fc, "call_id")), "call_", 5),
       "function_call item");
    ok(!strcmp(S(AT(j->reply, "status")), "completed"), "status completed");
    json_t *reply = json_incref(j->reply);
    srv_job_release(j);

    j = job(SRV_OPENAI, RESP_REQ, true, openai_responses);
    script(j);
    json_t *evs = sse(j);
    size_t i;
    json_t *e;
    char args[128] = "";
    int added = 0, done = 0;
    bool seq_ok = true;
    json_array_foreach(evs, i, e) {
        json_t *d = AT(e, "data");
        seq_ok &= json_integer_value(AT(d, "sequence_number")) == (json_int_t)i;
        seq_ok &= !strcmp(S(AT(e, "event")), S(AT(d, "type")));
        const char *t = S(AT(d, "type"));
        if (!strcmp(t, "response.output_item.added"))
            added++;
        if (!strcmp(t, "response.output_item.done"))
            done++;
        if (!strcmp(t, "response.function_call_arguments.delta") && json_integer_value(AT(d, "output_index")) == 2)
            strcat(args, S(AT(d, "delta")));
    }
    ok(seq_ok, "sequence numbers count up; event names match types");
    ok(added == 4 && done == 4, "4 items added and done (%d, %d)", added, done);
    ok(!strcmp(args, ARGS0), "function_call_arguments deltas add up: %s", args);
    json_t *last = AT(json_array_get(evs, json_array_size(evs) - 1), "data");
    ok(!strcmp(S(AT(last, "type")), "response.completed"), "response.completed last");
    json_t *o1 = AT(AT(last, "response"), "output"), *o2 = AT(reply, "output");
    ok(json_array_size(o1) == 4, "final output has the 4 items");
    for (i = 0; i < 4; i++) {
        json_t *a = json_deep_copy(json_array_get(o1, i)), *b = json_deep_copy(json_array_get(o2, i));
        json_object_del(a, "id"), json_object_del(b, "id");
        json_object_del(a, "call_id"), json_object_del(b, "call_id");
        ok(json_equal(a, b), "streamed item %zu equals the plain one (ids aside)", i);
        json_decref(a), json_decref(b);
    }
    json_decref(evs);
    json_decref(reply);
    srv_job_release(j);
}

int main(void)
{
    const char *bin = getenv("CWEN_BIN"), *tmp = getenv("CWEN_TMP");
    if (!bin || !tmp) {
        skip("CWEN_BIN / CWEN_TMP not set (run through ctest)");
        return done();
    }
    char path[1024], cmd[2400];
    snprintf(path, sizeof path, "%s/translate-tiny.gguf", tmp);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny-moe --no-mtp --threads 2 -o '%s' >/dev/null", bin, path);
    ok(system(cmd) == 0, "mkmodel");
    struct cw_err err = {0};
    cwen *e = NULL;
    struct cwen_opts eo = {.path = path, .n_threads = 1, .n_ctx = 512};
    ok(cwen_open(&e, &eo, &err) == 0, "open: %s", err.msg);
    if (!e)
        return done();
    ok(cwen_model_name_ok(e, "") && cwen_model_name_ok(e, NULL) &&
           cwen_model_name_ok(e, "translate-tiny.gguf") && cwen_model_name_ok(e, "translate-tiny") &&
           !cwen_model_name_ok(e, "gpt-4o"), "model name rules");
    char lossy[16];
    size_t n = cwen_utf8_lossy("a\xE4\xB8" "b\xC3\xA9", 6, lossy);
    ok(n == 10 && !memcmp(lossy, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xC3\xA9", 10),
       "lossy UTF-8: broken bytes become U+FFFD");
    struct cw_server_opts so = {.port = 0, .queue = 4, .log_level = CW_LOG_ERROR};
    ok(cw_server_start(&srv, e, &so, &err) == 0, "server: %s", err.msg);
    if (srv) {
        openai_chat_tools();
        anthropic_tools();
        responses_tools();
        cw_server_stop(srv);
    }
    cwen_close(e);
    remove(path);
    return done();
}
