/* cwen.h — the narrow engine API that cli/ and server/ use.
 *
 * Owns the contract between front ends and the engine: open a GGUF (model,
 * tokenizer, chat template, threads), tokenize / render a conversation into
 * prompt text, and generate from prompt tokens with sampling, stop
 * conditions and a token budget, streaming what the model says as typed
 * events (answer text, reasoning text, tool calls, per-token log-probs)
 * through a callback that can cancel. Front ends never see tensors, caches
 * or the tokenizer's tables; what they get back is text, ids and numbers.
 *
 * Threads: one thread at a time may call cwen_generate on an engine (the
 * server's single worker). cwen_tokenize, cwen_render_chat and the
 * cwen_*_name / info calls are read-only and safe from any thread at any
 * time. struct cw_sampling (engine/sampler.h) is plain parameters. */
#ifndef CWEN_H
#define CWEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/sampler.h"

typedef struct cwen cwen; /* opaque engine handle */

struct cwen_opts {
    const char *path; /* the GGUF */
    int n_threads;    /* forward threads; 0: all CPUs */
    int64_t n_ctx;    /* positions per sequence; 0: min(training context, 8192) */
    const char *backend; /* "cpu", "cuda", "auto" (NULL: auto — the GPU when present) */
};

/* Opens and binds the model. Returns 0 or -1 with err set (*out NULL). */
int cwen_open(cwen **out, const struct cwen_opts *opts, struct cw_err *err);
void cwen_close(cwen *e); /* NULL is fine */

struct cwen_info {
    const char *model_name; /* checkpoint name (Qwen3.6-35B-A3B…) or the file's base name */
    const char *file_name;  /* base name of the GGUF */
    const char *arch;       /* qwen35moe | qwen35 */
    int64_t n_ctx;          /* positions a request may use (prompt + output) */
    int32_t n_vocab;
    int n_threads;
    const char *backend;    /* the backend that runs the model: "cpu" | "cuda" */
};
/* Borrowed for the engine's lifetime. */
const struct cwen_info *cwen_get_info(const cwen *e);

/* Whether name selects the served model: empty/NULL, the checkpoint name,
 * or the file's base name (with or without ".gguf"). */
bool cwen_model_name_ok(const cwen *e, const char *name);

/* Tokenizes text (special tokens parsed when parse_special). *ids is
 * malloc'd (caller frees). 0 or -1. */
int cwen_tokenize(const cwen *e, const char *text, size_t len, bool parse_special, int32_t **ids,
                  size_t *n, struct cw_err *err);

/* The bytes of one token (special tokens rendered); NULL for a bad id. */
const char *cwen_token_piece(const cwen *e, int32_t id, size_t *len);

/* Copies s[0..n) to out (room for 3n bytes) with every byte that is not
 * part of a valid UTF-8 sequence replaced by U+FFFD; returns the length.
 * Event text is always valid UTF-8; token pieces need not be. */
size_t cwen_utf8_lossy(const char *s, size_t n, char *out);

/* Renders a conversation given as OpenAI-shaped JSON text
 * {messages, tools, add_generation_prompt, enable_thinking} with the file's
 * chat template. *prompt is malloc'd. Errors: CW_ERR_INVALID (the template
 * refuses the conversation), CW_ERR_FORMAT (malformed messages/tools). */
int cwen_render_chat(const cwen *e, const char *conv_json, size_t len, char **prompt,
                     struct cw_err *err);

/* ---- generation -------------------------------------------------------- */

enum cwen_out_mode {
    CWEN_OUT_TEXT,      /* raw completion: everything is answer text */
    CWEN_OUT_CHAT,      /* split <think>…</think> and <tool_call>… blocks */
};

#define CWEN_MAX_TOP_LOGPROBS 20

struct cwen_gen_params {
    const int32_t *prompt;
    size_t n_prompt;
    struct cw_sampling sampling;
    int64_t max_tokens;        /* > 0 */
    const char *const *stop;   /* stop strings, never emitted */
    size_t n_stop;
    enum cwen_out_mode mode;
    bool in_reasoning;         /* CWEN_OUT_CHAT: the prompt ended inside <think> */
    const char *tools_json;    /* CWEN_OUT_CHAT: tool definitions (types parameter values) */
    bool one_tool_call;        /* CWEN_OUT_CHAT: end after the first tool call */
    int n_top_logprobs;        /* -1: no log-probs; 0..20: chosen + that many alternatives */
};

enum cwen_ev_type {
    CWEN_EV_TOKEN,      /* a sampled token (before its text events): id, logprob, top[] */
    CWEN_EV_TEXT,       /* answer text */
    CWEN_EV_REASONING,  /* reasoning text */
    CWEN_EV_TOOL_BEGIN, /* tool call number tool_index starts: name */
    CWEN_EV_TOOL_ARGS,  /* a piece of the call's JSON arguments object */
    CWEN_EV_TOOL_END,   /* the call is complete: text is its whole arguments object */
};

struct cwen_logprob {
    int32_t id;
    float logprob;
};

struct cwen_event {
    enum cwen_ev_type type;
    const char *text; /* TEXT, REASONING, TOOL_ARGS: bytes (not NUL-terminated); TOOL_BEGIN: name */
    size_t len;
    int tool_index;   /* TOOL_*: 0, 1, … within the response */
    /* TOKEN: the token and, if asked, its log-prob and the top alternatives */
    int32_t token;
    float logprob;
    const struct cwen_logprob *top;
    int n_top;
};

/* Called for every event, on the generating thread. Return nonzero to
 * cancel (the generation ends with CWEN_FINISH_CANCELLED). Borrowed data is
 * valid during the call only. */
typedef int (*cwen_event_fn)(void *ctx, const struct cwen_event *ev);

enum cwen_finish {
    CWEN_FINISH_STOP,      /* end-of-generation token or a stop string */
    CWEN_FINISH_LENGTH,    /* max_tokens or the context reached */
    CWEN_FINISH_TOOL_CALLS,/* stopped after one or more tool calls */
    CWEN_FINISH_CANCELLED, /* the callback asked */
};

struct cwen_usage {
    int64_t n_prompt, n_cached, n_completion, n_reasoning;
    int n_tool_calls;
    enum cwen_finish finish;
    const char *stop_string; /* the stop string that ended it, or NULL (borrowed from params) */
    double t_prompt_ms;      /* prefill: to the first sampled token (TTFT) */
    double t_decode_ms;      /* after the first token */
};

/* Generates. Validates params (empty prompt, prompt + max_tokens over the
 * context → CW_ERR_INVALID; sampling ranges; token ids), then streams events.
 * Returns 0 with *usage filled (also on cancel), or -1 with err set. */
int cwen_generate(cwen *e, const struct cwen_gen_params *p, cwen_event_fn fn, void *ctx,
                  struct cwen_usage *usage, struct cw_err *err);

const char *cwen_finish_name(enum cwen_finish f); /* "stop", "length", "tool_calls", "cancelled" */

enum cw_log { CW_LOG_ERROR, CW_LOG_WARN, CW_LOG_INFO, CW_LOG_DEBUG };
struct cw_server;

/* ---- serving (implemented by server/http.c) ----------------------------------------------------------- */

struct cw_server_opts {
    const char *host;    /* default 127.0.0.1 */
    int port;            /* 0: any free port (see cw_server_port) */
    const char *api_key; /* NULL: no auth */
    int queue;           /* jobs waiting at most (beyond the running one) */
    enum cw_log log_level;
};

/* Starts listening and the worker; the engine is borrowed (and used by
 * the worker only, besides read-only calls). e may be NULL: until
 * cw_server_set_engine, /health says "loading" (503) and every other route
 * answers 503 (529 for Anthropic). */
int cw_server_start(struct cw_server **out, cwen *e, const struct cw_server_opts *o,
                    struct cw_err *err);
void cw_server_set_engine(struct cw_server *s, cwen *e);
int cw_server_port(const struct cw_server *s);
/* Stops accepting, ends queued and running jobs with an error, waits for
 * every connection, frees. */
void cw_server_stop(struct cw_server *s);

#endif
