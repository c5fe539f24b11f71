/* test_outstream.c — the text side of generation (engine/outstream.h): a
 * Qwen3.5/3.6 reply with reasoning, an answer and two tool calls, fed whole,
 * split at every byte position, byte by byte and as the tokenizer's own
 * pieces, must give the same events: reasoning and answer never mixed, each
 * tool call announced once with its typed arguments streamed as deltas that
 * add up to the final object; stop strings never emitted however they are
 * split; parallel_tool_calls=false stops after the first call; a cancel
 * stops the stream; malformed markup comes back as text. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/outstream.h"
#include "gguf/gguf.h"
#include "model/tokenizer.h"
#include "test.h"

/* What came out, as one comparable string plus checks done on the way. */
struct rec {
    char out[4096];
    char args[4][256]; /* concatenated TOOL_ARGS per call */
    char end[4][256];  /* TOOL_END text per call */
    int n_begin, n_end;
    int open;          /* a tool call is between BEGIN and END */
    int bad_order;     /* an event that does not belong where it came */
    int cancel_after;  /* return 1 on this event number (0: never) */
    int n_events;
    enum cwen_ev_type last;
};

static int on_event(void *ctx, const struct cwen_event *ev)
{
    struct rec *r = ctx;
    r->n_events++;
    char tag = "KTRBAE"[ev->type];
    size_t n = strlen(r->out);
    /* merge consecutive text of one kind, so that splits do not show */
    bool merge = n && ev->type == r->last && (ev->type == CWEN_EV_TEXT || ev->type == CWEN_EV_REASONING);
    if (!merge && ev->type != CWEN_EV_TOOL_ARGS)
        snprintf(r->out + n, sizeof r->out - n, "|%c:", tag), n = strlen(r->out);
    if (ev->type == CWEN_EV_TEXT || ev->type == CWEN_EV_REASONING || ev->type == CWEN_EV_TOOL_BEGIN)
        snprintf(r->out + n, sizeof r->out - n, "%.*s", (int)ev->len, ev->text);
    if (ev->type == CWEN_EV_TOOL_BEGIN) {
        r->bad_order |= r->open || ev->tool_index != r->n_begin;
        r->open = 1, r->n_begin++;
    } else if (ev->type == CWEN_EV_TOOL_ARGS) {
        r->bad_order |= !r->open || ev->tool_index != r->n_begin - 1;
        strncat(r->args[ev->tool_index & 3], ev->text, ev->len);
    } else if (ev->type == CWEN_EV_TOOL_END) {
        r->bad_order |= !r->open;
        r->open = 0, r->n_end++;
        snprintf(r->end[ev->tool_index & 3], sizeof r->end[0], "%.*s", (int)ev->len, ev->text);
    } else {
        r->bad_order |= r->open; /* nothing interleaves with a held call */
    }
    r->last = ev->type;
    return r->cancel_after && r->n_events >= r->cancel_after;
}

/* Feeds text in the given pieces (cuts: ascending offsets); returns the rec. */
static struct rec run(const struct cwen_gen_params *p, const char *text, const size_t *cuts,
                      size_t n_cuts, int cancel_after, int *rc_push, struct cw_outstream *keep)
{
    struct rec r = {.cancel_after = cancel_after};
    struct cw_outstream o = {0};
    struct cw_err err = {0};
    if (cw_outstream_init(&o, p, on_event, &r, &err) < 0) {
        ok(0, "init: %s", err.msg);
        return r;
    }
    size_t at = 0, len = strlen(text);
    int rc = 0;
    for (size_t i = 0; i <= n_cuts && !rc; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        rc = cw_outstream_push(&o, text + at, to - at, &err);
        at = to;
    }
    if (rc >= 0 && !rc)
        rc = cw_outstream_finish(&o, &err);
    if (rc_push)
        *rc_push = rc;
    if (keep) {
        *keep = o;
        keep->parser = (struct cw_chat_parser){0}, keep->has_parser = false;
        keep->pending = NULL, keep->tname = NULL, keep->targs = NULL, keep->tdelta = NULL;
    }
    cw_outstream_free(&o);
    return r;
}

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\"}}}]";

static const char *REPLY =
    "Let me check the weather.\n</think>\n\nSure, checking.\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
    "</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>";

static const char *WANT = "|R:Let me check the weather.|T:Sure, checking.|B:get_weather|E:"
                          "|B:get_time|E:";

static bool json_same(const char *a, const char *b)
{
    json_t *x = json_loads(a, 0, NULL), *y = json_loads(b, 0, NULL);
    bool eq = x && y && json_equal(x, y);
    json_decref(x), json_decref(y);
    return eq;
}

static void check_reply(const struct rec *r, const char *how)
{
    ok(!strcmp(r->out, WANT), "%s: events %s", how, r->out);
    ok(!r->bad_order, "%s: tool events contiguous and in order", how);
    ok(r->n_begin == 2 && r->n_end == 2, "%s: two calls", how);
    ok(json_same(r->end[0], "{\"city\":\"Paris\",\"days\":2}"), "%s: typed arguments %s", how, r->end[0]);
    ok(!strcmp(r->args[0], r->end[0]), "%s: deltas add up to the object", how);
    ok(json_same(r->end[1], "{}") && !strcmp(r->args[1], r->end[1]), "%s: no-argument call", how);
}

static void tool_calls(const struct cw_tokenizer *tok)
{
    struct cwen_gen_params p = {.mode = CWEN_OUT_CHAT, .in_reasoning = true, .tools_json = TOOLS};
    struct cw_outstream o = {0};
    struct rec r = run(&p, REPLY, NULL, 0, 0, NULL, &o);
    check_reply(&r, "whole");
    ok(o.n_tools == 2, "n_tools 2");
    /* every two-piece split */
    size_t len = strlen(REPLY), bad = 0;
    for (size_t cut = 1; cut < len; cut++) {
        struct rec s = run(&p, REPLY, &cut, 1, 0, NULL, NULL);
        if (strcmp(s.out, WANT) || strcmp(s.end[0], r.end[0]) || strcmp(s.args[0], s.end[0]) || s.bad_order)
            bad++;
    }
    ok(bad == 0, "every 2-piece split gives the same events (%zu differ)", bad);
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t i = 0; i < len - 1; i++)
        cuts[i] = i + 1;
    struct rec b = run(&p, REPLY, cuts, len - 1, 0, NULL, NULL);
    check_reply(&b, "byte by byte");
    if (tok) {
        struct cw_tokens t = {0};
        struct cw_err err = {0};
        cw_tokenize(tok, REPLY, len, true, &t, &err);
        size_t at = 0;
        for (size_t i = 0; i + 1 < t.n; i++) {
            size_t n;
            cw_token_piece(tok, t.ids[i], true, &n);
            cuts[i] = at += n;
        }
        ok(t.n > 20, "tokenized into %zu tokens", t.n);
        struct rec k = run(&p, REPLY, cuts, t.n - 1, 0, NULL, NULL);
        check_reply(&k, "token pieces");
        cw_tokens_free(&t);
    } else {
        skip("no tokenizer vocabulary (CWEN_ORACLE_DIR): token-piece feed");
    }
    free(cuts);

    /* parallel_tool_calls = false: the first call, then nothing */
    p.one_tool_call = true;
    int rc;
    struct rec one = run(&p, REPLY, NULL, 0, 0, &rc, &o);
    ok(one.n_begin == 1 && one.n_end == 1 && o.stop_now && rc == 1, "one tool call, then stop");
    p.one_tool_call = false;

    /* cancel on the third event */
    struct rec c = run(&p, REPLY, NULL, 0, 3, &rc, &o);
    ok(c.n_events == 3 && o.cancelled && rc == 1, "cancel stops after the event that asked (%d)", c.n_events);

    /* malformed: a call that breaks off comes back as text */
    const char *broken = "Fine.</think>\nAnswer <tool_call>\n<function=get_weather>\n<oops";
    struct rec m = run(&p, broken, NULL, 0, 0, NULL, NULL);
    ok(m.n_begin == 0 && strstr(m.out, "|T:Answer") && strstr(m.out, "<oops"), "malformed call as text: %s", m.out);

    /* thinking off: all answer; a leading <think> block is still reasoning */
    p.in_reasoning = false;
    struct rec off = run(&p, "Just text.", NULL, 0, 0, NULL, NULL);
    ok(!strcmp(off.out, "|T:Just text."), "thinking off: %s", off.out);
    struct rec lead = run(&p, "<think>\nhm\n</think>\n\nyes", NULL, 0, 0, NULL, NULL);
    ok(!strcmp(lead.out, "|R:hm|T:yes"), "leading <think>: %s", lead.out);
}

static void stop_strings(void)
{
    const char *stops[] = {"STOP", "</answer>", "zz"};
    struct cwen_gen_params p = {.mode = CWEN_OUT_TEXT, .stop = stops, .n_stop = 3};
    const char *texts[] = {"abc STOP def", "ST then S, T, O, STO and STOPS", "a</answer", "q </ans</answer>zz",
                           "z not stopped", "no stop at all", "zzz"};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        const char *s = texts[t];
        size_t len = strlen(s), first = len;
        const char *hit = NULL;
        for (size_t k = 0; k < 3; k++) {
            const char *f = strstr(s, stops[k]);
            if (f && (size_t)(f - s) < first)
                first = (size_t)(f - s), hit = stops[k];
        }
        char want[128];
        snprintf(want, sizeof want, "%s%.*s", first ? "|T:" : "", (int)first, s);
        size_t bad = 0;
        for (size_t cut = 0; cut <= len; cut++) {
            size_t cuts[2] = {cut / 2, cut};
            struct cw_outstream o = {0};
            struct rec r = run(&p, s, cuts, 2, 0, NULL, &o);
            if (strcmp(r.out, want) || (hit ? !o.stop_string || strcmp(o.stop_string, hit) : !!o.stop_string))
                bad++;
        }
        ok(bad == 0, "'%s': emitted exactly '%.*s' for every 3-piece split (%zu differ)", s, (int)first, s, bad);
    }
    /* in chat mode the filter sees the raw text, before the reasoning split */
    struct cwen_gen_params c = {.mode = CWEN_OUT_CHAT, .in_reasoning = true, .stop = stops, .n_stop = 3};
    struct cw_outstream o = {0};
    struct rec r = run(&c, "thinking zz more</think>answer", NULL, 0, 0, NULL, &o);
    ok(!strcmp(r.out, "|R:thinking") && o.stop_string && !strcmp(o.stop_string, "zz"),
       "chat: stop inside reasoning: %s", r.out);
}

int main(void)
{
    struct cw_tokenizer tok = {0};
    bool have_tok = false;
    const char *od = getenv("CWEN_ORACLE_DIR");
    if (od) {
        char path[1024];
        snprintf(path, sizeof path, "%s/llama.cpp/models/ggml-vocab-qwen35.gguf", od);
        struct cw_gguf g;
        struct cw_err err = {0};
        if (cw_gguf_open(&g, path, &err) == 0) {
            have_tok = cw_tokenizer_load(&tok, &g, &err) == 0;
            cw_gguf_close(&g);
        }
    }
    tool_calls(have_tok ? &tok : NULL);
    stop_strings();
    cw_tokenizer_free(&tok);
    return done();
}
