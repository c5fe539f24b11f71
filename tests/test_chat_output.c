/* test_chat_output.c — the reasoning/tool-call parser: expected splits of
 * well-formed and malformed outputs, identical results for every split point
 * and for byte-by-byte feeding, the splitter's consumed/-2 contract, a
 * render → parse round trip through chat_template, and random bytes in
 * random pieces (nothing lost, nothing crashes). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_output_check.h"
#include "model/chat_template.h"
#include "test.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"expr\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"},\"vals\":{\"type\":"
    "\"array\"},\"maybe\":{\"type\":[\"number\",\"string\"]},\"flag\":{\"type\":\"boolean\"}}}}}]";

struct expect {
    const char *name;
    bool in_reasoning;
    const char *text;
    const char *reasoning, *content, *calls; /* calls as "name(args)\n"... */
};

static const struct expect CASES[] = {
    {"reasoning then answer", true, "Let me think.\n</think>\n\nThe answer is 4.", "Let me think.",
     "The answer is 4.", ""},
    {"thinking off", false, "Hello there!\nSecond line.", "", "Hello there!\nSecond line.", ""},
    {"explicit <think> at start", false, "<think>\nhmm\n</think>\n\nok", "hmm", "ok", ""},
    {"explicit <think> with thinking on", true, "<think>\nhmm\n</think>\n\nok", "hmm", "ok", ""},
    {"unterminated reasoning", true, "still thinking <b>bold</b> and </thin", "still thinking <b>bold</b> and </thin", "", ""},
    {"one tool call", true,
     "Need weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
     "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "Need weather.", "", "get_weather({\"city\":\"Paris\",\"days\":3})\n"},
    {"content then two calls", false,
     "Checking both.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
     "</function>\n</tool_call>\n<tool_call>\n<function=calc>\n<parameter=expr>\n2*21\n</parameter>\n"
     "<parameter=opts>\n{\"deg\": true, \"p\": [1, 2]}\n</parameter>\n<parameter=vals>\n[1, \"a\"]\n"
     "</parameter>\n<parameter=maybe>\n1.5\n</parameter>\n<parameter=flag>\ntrue\n</parameter>\n"
     "</function>\n</tool_call>\n",
     "", "Checking both.",
     "get_weather({\"city\":\"42\"})\ncalc({\"expr\":\"2*21\",\"opts\":{\"deg\":true,\"p\":[1,2]},"
     "\"vals\":[1,\"a\"],\"maybe\":1.5,\"flag\":true})\n"},
    {"untyped values: JSON if it parses, else string", false,
     "<tool_call>\n<function=unknown>\n<parameter=a>\n{\"x\": 1}\n</parameter>\n<parameter=b>\n"
     "not json\n</parameter>\n<parameter=c>\nmulti\nline\n</parameter>\n<parameter=d>\n</parameter>\n"
     "</function>\n</tool_call>",
     "", "", "unknown({\"a\":{\"x\":1},\"b\":\"not json\",\"c\":\"multi\\nline\",\"d\":\"\"})\n"},
    {"typed value that does not parse stays a string", false,
     "<tool_call>\n<function=calc>\n<parameter=maybe>\nabc\n</parameter>\n<parameter=flag>\nyes\n"
     "</parameter>\n</function>\n</tool_call>",
     "", "", "calc({\"maybe\":\"abc\",\"flag\":\"yes\"})\n"},
    {"reasoning ended by a tool call", true,
     "I will call it.\n\n<tool_call>\n<function=calc>\n<parameter=expr>\n1+1\n</parameter>\n"
     "</function>\n</tool_call>",
     "I will call it.", "", "calc({\"expr\":\"1+1\"})\n"},
    {"no arguments, compact layout", false,
     "<tool_call><function=ping></function></tool_call>", "", "", "ping({})\n"},
    {"value containing tags", false,
     "<tool_call>\n<function=calc>\n<parameter=expr>\na < b </param and\n<x>\n</parameter>\n"
     "</function>\n</tool_call>",
     "", "", "calc({\"expr\":\"a < b </param and\\n<x>\"})\n"},
    {"unicode", true, "Réfléchir… 日本\n</think>\n\nRéponse 🙂 <tool_call>\n<function=calc>\n"
     "<parameter=expr>\nπ·2\n</parameter>\n</function>\n</tool_call>",
     "Réfléchir… 日本", "Réponse 🙂", "calc({\"expr\":\"π·2\"})\n"},
    {"</think> in thinking-off content stays text", false, "a </think> b", "", "a </think> b", ""},
    {"text after the call is content", false,
     "<tool_call>\n<function=ping>\n</function>\n</tool_call>\nNo suffix allowed, but here.", "",
     "No suffix allowed, but here.", "ping({})\n"},
    /* malformed: every byte survives as content */
    {"tool_call without function", false, "x <tool_call>\nnot a function</tool_call> y", "",
     "x <tool_call>\nnot a function</tool_call> y", ""},
    {"unterminated tool call", false,
     "Sure.\n\n<tool_call>\n<function=calc>\n<parameter=expr>\n1+", "",
     "Sure.\n\n<tool_call>\n<function=calc>\n<parameter=expr>\n1+", ""},
    {"garbage inside the call", false,
     "<tool_call>\n<function=calc>\n<parameter=expr>\n1\n</parameter>\nGARBAGE</function></tool_call>", "",
     "<tool_call>\n<function=calc>\n<parameter=expr>\n1\n</parameter>\nGARBAGE</function></tool_call>", ""},
    {"good call then broken call", false,
     "<tool_call>\n<function=ping>\n</function>\n</tool_call>\n<tool_call>\n<function=calc>\n<oops>",
     "", "<tool_call>\n<function=calc>\n<oops>", "ping({})\n"},
    {"cut tag at end", false, "text <tool_ca", "", "text <tool_ca", ""},
    {"header without close bracket", false, "<tool_call>\n<function=calc\nrest", "",
     "<tool_call>\n<function=calc\nrest", ""},
    {"empty output", true, "", "", "", ""},
};


/* One-shot, every two-piece split, and byte-by-byte feeding agree. */
static void check_splits(const char *name, const char *text, bool in_reasoning, const char *tools,
                         struct co_result *one_out)
{
    size_t len = strlen(text);
    struct co_result one = co_run(text, len, in_reasoning, tools, NULL, 0);
    ok(one.ok && one.events_match && one.bytes_account, "%s: one-shot invariants", name);
    size_t bad_split = (size_t)-1;
    for (size_t cut = 0; cut <= len && bad_split == (size_t)-1; cut++) {
        struct co_result r = co_run(text, len, in_reasoning, tools, &cut, 1);
        if (!co_same(&r, &one) || !r.events_match || !r.bytes_account)
            bad_split = cut;
        co_free(&r);
    }
    ok(bad_split == (size_t)-1, "%s: every split point gives the one-shot result (first bad: %zu)",
       name, bad_split);
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    struct co_result bb = co_run(text, len, in_reasoning, tools, cuts, len);
    ok(co_same(&bb, &one) && bb.events_match && bb.bytes_account, "%s: byte-by-byte feeding", name);
    co_free(&bb);
    free(cuts);
    if (one_out)
        *one_out = one;
    else
        co_free(&one);
}

static void check_cases(void)
{
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const struct expect *e = &CASES[i];
        struct co_result r;
        check_splits(e->name, e->text, e->in_reasoning, TOOLS, &r);
        ok(!strcmp(r.reasoning, e->reasoning), "%s: reasoning [%s] want [%s]", e->name, r.reasoning,
           e->reasoning);
        ok(!strcmp(r.content, e->content), "%s: content [%s] want [%s]", e->name, r.content, e->content);
        ok(!strcmp(r.calls, e->calls), "%s: calls [%s] want [%s]", e->name, r.calls, e->calls);
        co_free(&r);
    }
}

/* The splitter itself: -2 on undecidable prefixes, spans tile the input. */
static void check_splitter_contract(void)
{
    struct cw_chat_splitter s;
    struct cw_chat_span sp;
    cw_chat_split_init(&s, false);
    ok(cw_chat_split_next(&s, "<tool_c", 7, false, &sp) == -2, "partial tag: -2");
    ok(cw_chat_split_next(&s, "<tool_c", 7, true, &sp) == 7 && sp.kind == CW_SPAN_CONTENT,
       "partial tag at eof: it is content");
    cw_chat_split_init(&s, false);
    ok(cw_chat_split_next(&s, "", 0, false, &sp) == -2, "empty input: -2");
    ok(cw_chat_split_next(NULL, "x", 1, false, &sp) == -1, "NULL splitter: -1");
    const char *t = "<tool_call>\n<function=f>\n<parameter=a>\nv\n</parameter>\n</function>\n</tool_call>";
    cw_chat_split_init(&s, false);
    int n = cw_chat_split_next(&s, t, strlen(t), false, &sp);
    ok(n == 25 && sp.kind == CW_SPAN_TOOL_OPEN && sp.name_len == 1 && t[sp.name_off] == 'f',
       "tool open span: %d", n);
    n = cw_chat_split_next(&s, t + 25, strlen(t) - 25, false, &sp);
    ok(n == 14 && sp.kind == CW_SPAN_ARG_OPEN && t[25 + sp.name_off] == 'a', "arg open span: %d", n);
    /* an undecided "\n" inside a value: is it the close? */
    ok(cw_chat_split_next(&s, "v\n", 2, false, &sp) == 1 && sp.kind == CW_SPAN_ARG_VALUE,
       "value piece before a newline");
    ok(cw_chat_split_next(&s, "\n</param", 8, false, &sp) == -2, "possible close: -2");
}

/* Render an assistant turn with the template, parse it back. */
static void check_round_trip(void)
{
    static const char conv_json[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris and Oslo?\"},"
        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"reasoning_content\":\"Two cities.\","
        "\"tool_calls\":[{\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":2}}},"
        "{\"function\":{\"name\":\"calc\",\"arguments\":{\"expr\":\"a\\nb\",\"opts\":{\"k\":[1,2.5]},"
        "\"flag\":false}}}]}],\"tools\":%s}";
    char buf[4096];
    snprintf(buf, sizeof buf, conv_json, TOOLS);
    struct cw_chat_conv_owned conv;
    struct cw_chat_template t = {.variant = "qwen3.5"};
    struct cw_err err = {0};
    char *out = NULL;
    size_t n = 0;
    ok(cw_chat_conv_from_json(&conv, buf, strlen(buf), &err) == 0, "round trip: conversation: %s", err.msg);
    ok(cw_chat_render(&t, &conv.conv, &out, &n, &err) == 0, "round trip: render: %s", err.msg);
    cw_chat_conv_free(&conv);
    const char *gen = out ? strstr(out, "<|im_start|>assistant\n<think>\n") : NULL;
    const char *end = gen ? strstr(gen, "<|im_end|>") : NULL;
    ok(gen && end, "round trip: assistant turn found");
    if (gen && end) {
        gen += strlen("<|im_start|>assistant\n<think>\n");
        char *turn = strndup(gen, (size_t)(end - gen));
        struct co_result r;
        check_splits("round trip", turn, true, TOOLS, &r);
        ok(!strcmp(r.reasoning, "Two cities.") && !strcmp(r.content, "Checking."),
           "round trip: reasoning [%s] content [%s]", r.reasoning, r.content);
        ok(!strcmp(r.calls, "get_weather({\"city\":\"Paris\",\"days\":2})\n"
                            "calc({\"expr\":\"a\\nb\",\"opts\":{\"k\":[1,2.5]},\"flag\":false})\n"),
           "round trip: calls [%s]", r.calls);
        co_free(&r);
        free(turn);
    }
    free(out);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random text built from markup fragments and bytes, in random pieces. */
static void check_random(void)
{
    static const char *const frags[] = {
        "<tool_call>", "\n", "<function=calc>", "<parameter=expr>", "</parameter>", "</function>",
        "</tool_call>", "<think>", "</think>", " ", "x", "\xc3\xa9", "\xff", "<", "42", "{\"a\":1}",
        "<parameter=", "<function=", "\n\n", "</"};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    size_t n_bad = 0, n_runs = 3000;
    char text[512];
    size_t cuts[64];
    for (size_t run = 0; run < n_runs; run++) {
        size_t len = 0;
        size_t n_frag = rng_next(&seed) % 40;
        for (size_t i = 0; i < n_frag; i++) {
            const char *f = frags[rng_next(&seed) % (sizeof frags / sizeof frags[0])];
            size_t fl = strlen(f);
            if (len + fl >= sizeof text)
                break;
            memcpy(text + len, f, fl);
            len += fl;
        }
        if (rng_next(&seed) % 4 == 0)
            for (size_t i = 0; i < len; i++)
                if (rng_next(&seed) % 16 == 0)
                    text[i] = (char)(rng_next(&seed) & 0xff);
        size_t n_cuts = len ? rng_next(&seed) % 64 : 0;
        for (size_t i = 0; i < n_cuts; i++)
            cuts[i] = rng_next(&seed) % (len + 1);
        for (size_t i = 1; i < n_cuts; i++) /* insertion sort */
            for (size_t k = i; k > 0 && cuts[k - 1] > cuts[k]; k--) {
                size_t tmp = cuts[k];
                cuts[k] = cuts[k - 1];
                cuts[k - 1] = tmp;
            }
        bool in_r = run & 1;
        struct co_result a = co_run(text, len, in_r, TOOLS, NULL, 0);
        struct co_result b = co_run(text, len, in_r, TOOLS, cuts, n_cuts);
        if (!a.ok || !b.ok || !co_same(&a, &b) || !a.events_match || !b.events_match ||
            !a.bytes_account || !b.bytes_account) {
            if (n_bad++ < 3)
                note("random case %zu differs or loses bytes: %.*s", run, (int)len, text);
        }
        co_free(&a);
        co_free(&b);
    }
    ok(n_bad == 0, "random texts in random pieces: %zu of %zu bad", n_bad, n_runs);
}

int main(void)
{
    check_splitter_contract();
    check_cases();
    check_round_trip();
    check_random();
    return done();
}
