/* outstream.h — the text side of a generation: from token text to events.
 *
 * Owns what happens to each sampled token's text in cwen_generate: the
 * stop-string filter (text that could still begin a stop string is held
 * back, so none is ever emitted, even split across tokens), the chat output
 * parser (model/chat_output.h: reasoning, answer, tool calls) and the hold of
 * each tool call until it is complete (the parser may withdraw a malformed
 * call, and a stream cannot take back what it sent), then the events to the
 * caller, who may cancel after any of them. Text in must be valid UTF-8
 * (cwen_utf8_lossy); sampling and the model are cwen_generate's business.
 * Engine-internal: front ends see only cwen.h. */
#ifndef CW_OUTSTREAM_H
#define CW_OUTSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "cwen.h"
#include "model/chat_output.h"

struct cw_outstream {
    const struct cwen_gen_params *p; /* mode, in_reasoning, tools_json, stop, one_tool_call */
    cwen_event_fn fn;
    void *ctx;
    bool cancelled;          /* fn asked to stop */
    bool stop_now;           /* one_tool_call satisfied: nothing more is passed on */
    const char *stop_string; /* the stop string that matched, or NULL */
    int n_tools;             /* tool calls completed */
    /* private */
    struct cw_chat_parser parser;
    bool has_parser;
    char *pending;           /* held back: might begin a stop string */
    size_t n_pending, cap_pending;
    char *tname;             /* the tool call being held */
    char *targs;             /* its argument deltas, concatenated */
    size_t n_targs, cap_targs;
    size_t *tdelta;          /* end offset of each delta */
    size_t n_tdelta, cap_tdelta;
};

/* Borrows p (for its lifetime) and fn/ctx. 0 or -1 (bad tools JSON, memory). */
int cw_outstream_init(struct cw_outstream *o, const struct cwen_gen_params *p, cwen_event_fn fn,
                      void *ctx, struct cw_err *err);
/* One token's text. Returns 0 (go on), 1 (stop: cancelled, a stop string
 * matched, or the one tool call is complete — see the fields), -1 on error. */
int cw_outstream_push(struct cw_outstream *o, const char *s, size_t n, struct cw_err *err);
/* End of generation: releases what is held (unless a stop string or the
 * tool-call limit ended it) and settles the parser. 0, 1 (cancelled), -1. */
int cw_outstream_finish(struct cw_outstream *o, struct cw_err *err);
void cw_outstream_free(struct cw_outstream *o);

#endif
