/* chat_output_check.h — shared by test_chat_output.c and the fuzzer: runs
 * the chat-output parser over a text fed in given pieces and collects what
 * came out, both from the streaming events and from the final message, so
 * that feeds can be compared and checked for lost bytes. */
#ifndef CW_CHAT_OUTPUT_CHECK_H
#define CW_CHAT_OUTPUT_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "model/chat_output.h"

struct co_result {
    char *reasoning, *content, *calls; /* calls: "name(args)\n" per completed call */
    size_t n_reasoning, n_content, n_calls_text, n_calls;
    /* invariants, each true when it holds */
    bool events_match;  /* deltas concatenate to the final message */
    bool bytes_account; /* reasoning + content + tool raw + markup == input */
    bool ok;            /* no error from the parser */
};

struct co_stream {
    struct cw_chat_strbuf r, c, args;
    size_t n_start, n_end, n_abort;
    bool args_ok;
};

static int co_append(struct cw_chat_strbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int co_on_event(void *user, const struct cw_chat_event *ev)
{
    struct co_stream *st = user;
    switch (ev->type) {
    case CW_CHAT_EV_REASONING: return co_append(&st->r, ev->text, ev->len);
    case CW_CHAT_EV_CONTENT: return co_append(&st->c, ev->text, ev->len);
    case CW_CHAT_EV_TOOL_START:
        st->n_start++;
        st->args.n = 0;
        return 0;
    case CW_CHAT_EV_TOOL_ARGS: return co_append(&st->args, ev->text, ev->len);
    case CW_CHAT_EV_TOOL_END:
        st->n_end++;
        if (st->args.n != ev->len || memcmp(st->args.p, ev->text, ev->len))
            st->args_ok = false;
        return 0;
    case CW_CHAT_EV_TOOL_ABORT: st->n_abort++; return 0;
    }
    return 0;
}

/* Feeds text in pieces: cuts[0..n_cuts) are increasing offsets. */
static struct co_result co_run(const char *text, size_t len, bool in_reasoning, const char *tools,
                               const size_t *cuts, size_t n_cuts)
{
    struct co_result res = {0};
    struct co_stream st = {.args_ok = true};
    struct cw_chat_parser p;
    struct cw_err err = {0};
    if (cw_chat_parser_init(&p, in_reasoning, tools, co_on_event, &st, &err))
        return res;
    res.ok = true;
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts && res.ok; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        if (to > len)
            to = len;
        if (to < at)
            continue;
        res.ok = cw_chat_parser_feed(&p, text + at, to - at, &err) == 0;
        at = to;
    }
    res.ok = res.ok && cw_chat_parser_finish(&p, &err) == 0;
    struct cw_chat_strbuf calls = {0};
    for (size_t i = 0; i < p.n_calls; i++) {
        co_append(&calls, p.calls[i].name, strlen(p.calls[i].name));
        co_append(&calls, "(", 1);
        co_append(&calls, p.calls[i].arguments, strlen(p.calls[i].arguments));
        co_append(&calls, ")\n", 2);
    }
    res.events_match = st.args_ok && st.r.n == p.reasoning.n && st.c.n == p.content.n &&
                       !memcmp(st.r.p ? st.r.p : "", p.reasoning.p, p.reasoning.n) &&
                       !memcmp(st.c.p ? st.c.p : "", p.content.p, p.content.n) &&
                       st.n_end == p.n_calls && st.n_start == st.n_end + st.n_abort;
    res.bytes_account = p.reasoning.n + p.content.n + p.n_tool_raw + p.n_markup == len;
    res.reasoning = p.reasoning.p;
    res.n_reasoning = p.reasoning.n;
    res.content = p.content.p;
    res.n_content = p.content.n;
    res.calls = calls.p ? calls.p : calloc(1, 1);
    res.n_calls_text = calls.n;
    res.n_calls = p.n_calls;
    p.reasoning.p = p.content.p = NULL;
    p.reasoning.n = p.content.n = 0;
    cw_chat_parser_free(&p);
    free(st.r.p);
    free(st.c.p);
    free(st.args.p);
    return res;
}

static bool co_same(const struct co_result *a, const struct co_result *b)
{
    return a->n_reasoning == b->n_reasoning && a->n_content == b->n_content &&
           a->n_calls_text == b->n_calls_text && !memcmp(a->reasoning, b->reasoning, a->n_reasoning) &&
           !memcmp(a->content, b->content, a->n_content) &&
           !memcmp(a->calls, b->calls, a->n_calls_text);
}

static void co_free(struct co_result *r)
{
    free(r->reasoning);
    free(r->content);
    free(r->calls);
    memset(r, 0, sizeof *r);
}

#endif
