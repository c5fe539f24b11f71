/* chat_output.h — splitting Qwen3.5/3.6 model output into reasoning, answer
 * and tool calls, incrementally, as tokens decode.
 *
 * Two layers:
 *  - the splitter (cw_chat_split_*) is a state machine over the raw text with
 *    picohttpparser's contract: it never allocates, returns the bytes consumed
 *    as one labelled span, or -2 when the bytes given cannot be decided yet
 *    (the caller keeps them and calls again with more appended), or -1 on a
 *    bad argument. Spans tile the input: every byte lands in exactly one.
 *  - the parser (cw_chat_parser_*) owns buffers, feeds the splitter, converts
 *    parameter values to JSON using the tool schemas, and reports streaming
 *    events; it also accumulates the final message.
 *
 * The format is what chat_template.c teaches the model:
 *   [reasoning]</think>\n\n[content]\n\n<tool_call>\n<function=NAME>\n
 *   <parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>
 * With thinking on, the prompt ends in "<think>\n", so output starts inside
 * the reasoning; a leading "<think>" is accepted either way. Reasoning also
 * ends at a tool call (as llama.cpp's Qwen3-Coder handler allows). Malformed
 * markup is never dropped: a "<tool_call>" without a valid header is text,
 * and a tool call that breaks off (garbage inside, end of output) is
 * withdrawn (TOOL_ABORT) and its raw text is re-emitted as content. */
#ifndef CW_CHAT_OUTPUT_H
#define CW_CHAT_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* ---- the splitter (no allocation) ---------------------------------------- */

enum cw_chat_span_kind {
    CW_SPAN_REASONING,  /* reasoning text */
    CW_SPAN_CONTENT,    /* answer text */
    CW_SPAN_MARKUP,     /* <think>, </think> and the whitespace the format puts around them */
    CW_SPAN_PRE_TOOL,   /* whitespace between text and a tool call */
    CW_SPAN_TOOL_OPEN,  /* "<tool_call>\n<function=NAME>\n"; NAME at name_off/name_len */
    CW_SPAN_ARG_OPEN,   /* "<parameter=NAME>\n"; NAME at name_off/name_len */
    CW_SPAN_ARG_VALUE,  /* a piece of a parameter value */
    CW_SPAN_ARG_CLOSE,  /* "\n</parameter>\n" */
    CW_SPAN_TOOL_CLOSE, /* "</function>\n</tool_call>" */
    CW_SPAN_TOOL_ABORT, /* zero bytes: the open tool call is malformed; text follows as content */
};

struct cw_chat_span {
    enum cw_chat_span_kind kind;
    size_t name_off, name_len; /* TOOL_OPEN, ARG_OPEN: the name within the span */
};

struct cw_chat_splitter {
    int state;
};

/* in_reasoning: the prompt ended inside <think> (thinking on). */
void cw_chat_split_init(struct cw_chat_splitter *s, bool in_reasoning);

/* Labels the next span at the start of buf[0..len). eof: no more bytes will
 * come, so nothing is left undecided. Returns the span's length (> 0, or 0
 * for CW_SPAN_TOOL_ABORT) with *span set; -2 when more input is needed
 * (always, once len is 0 and nothing is open); -1 for NULL arguments. */
int cw_chat_split_next(struct cw_chat_splitter *s, const char *buf, size_t len, bool eof,
                       struct cw_chat_span *span);

/* ---- the parser ---------------------------------------------------------- */

enum cw_chat_event_type {
    CW_CHAT_EV_REASONING,  /* text: a reasoning delta */
    CW_CHAT_EV_CONTENT,    /* text: an answer delta */
    CW_CHAT_EV_TOOL_START, /* tool: index; text: the function name */
    CW_CHAT_EV_TOOL_ARGS,  /* tool: index; text: a delta of the arguments JSON (per parameter) */
    CW_CHAT_EV_TOOL_END,   /* tool: index; text: the complete arguments JSON object */
    CW_CHAT_EV_TOOL_ABORT, /* tool: index, withdrawn; its raw text follows as CONTENT */
};

struct cw_chat_event {
    enum cw_chat_event_type type;
    size_t tool;      /* index of the call among this message's calls */
    const char *text; /* borrowed for the duration of the callback */
    size_t len;
};

/* Returns 0 to go on, non-zero to stop feeding (reported as an error). */
typedef int (*cw_chat_event_fn)(void *user, const struct cw_chat_event *ev);

struct cw_chat_strbuf {
    char *p; /* NUL-terminated, or NULL when empty */
    size_t n, cap;
};

struct cw_chat_call {
    char *name;
    char *arguments; /* JSON object text, compact */
};

struct cw_chat_parser {
    /* the message so far (owned; read after cw_chat_parser_finish) */
    struct cw_chat_strbuf reasoning, content;
    struct cw_chat_call *calls; /* completed calls */
    size_t n_calls;
    /* byte accounting: reasoning.n + content.n + n_tool_raw + n_markup is
     * every byte fed */
    size_t n_tool_raw, n_markup;

    /* internal */
    struct cw_chat_splitter split_;
    void *tools_;           /* json_t array of tool definitions, or NULL */
    cw_chat_event_fn fn_;
    void *user_;
    struct cw_chat_strbuf pending_, raw_, args_, value_, cur_name_, arg_name_;
    size_t n_args_cap_;
    bool in_call_, failed_;
};

/* tools_json: the request's tool definitions (used to type parameter values:
 * a parameter whose schema type is only "string" stays a string; others are
 * parsed as JSON when they parse to an allowed type). May be NULL. fn may be
 * NULL. Returns 0 or -1 (bad tools JSON, no memory). */
int cw_chat_parser_init(struct cw_chat_parser *p, bool in_reasoning, const char *tools_json,
                        cw_chat_event_fn fn, void *user, struct cw_err *err);
/* Feeds decoded text (any split, even inside a UTF-8 sequence or a tag). */
int cw_chat_parser_feed(struct cw_chat_parser *p, const char *text, size_t len, struct cw_err *err);
/* End of output: settles everything held back, withdraws an open tool call. */
int cw_chat_parser_finish(struct cw_chat_parser *p, struct cw_err *err);
void cw_chat_parser_free(struct cw_chat_parser *p);

#endif
