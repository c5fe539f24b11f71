/* server.h — what the files of server/ share (nothing outside includes it).
 *
 * Owns the request/job record that travels from a libmicrohttpd connection
 * thread (parse, validate, tokenize, queue) to the one worker thread that
 * owns the engine (generate) and back (a JSON reply, or SSE bytes the
 * connection thread drains as they come), the typed readers of request JSON
 * with their errors, and the entry points of each dialect (api_*.c).
 * The public face of the server, cw_server_*, is declared in cwen.h. */
#ifndef CW_SERVER_H
#define CW_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cwen.h"

enum srv_dialect { SRV_OPENAI, SRV_ANTHROPIC, SRV_NATIVE };

struct cw_server;

/* A request error: HTTP status, the offending field (or ""), a message. */
struct srv_err {
    int status;
    char param[96];
    char msg[512];
};
int srv_errf(struct srv_err *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* One request's job. Fields above `mu` are written by the connection thread
 * before queueing and read-only afterwards; the rest are under mu. */
struct srv_job {
    struct cw_server *srv;
    enum srv_dialect dialect;
    const char *route; /* for the log line: "openai.chat", "anthropic.messages", ... */
    bool stream;
    json_t *req;       /* the parsed body (owned) */
    char *model;       /* model name to echo back */
    char id[48];       /* chatcmpl-…, msg_…, resp_… */
    int64_t created;   /* unix seconds */
    /* the generation */
    int32_t *prompt;
    struct cwen_gen_params gp;
    char **stops;
    struct cw_logit_bias *bias;
    char *tools_json;
    /* the dialect's hooks, run on the worker thread */
    int (*on_event)(struct srv_job *j, const struct cwen_event *ev);
    void (*on_done)(struct srv_job *j, const struct cwen_usage *u, const struct cw_err *err);
    void *api;              /* the dialect's state */
    void (*api_free)(void *api);
    /* what came out (every chat dialect accumulates; streams as well) */
    char *reasoning, *content;
    size_t n_reasoning, n_content, cap_reasoning, cap_content;
    json_t *tool_calls;     /* [{name, arguments(text)}] */
    json_t *logprobs;       /* [{id, token, logprob, top:[{id, token, logprob}]}] or NULL */
    struct cwen_usage usage;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *out;              /* SSE bytes not yet sent */
    size_t n_out, cap_out, off_out;
    bool done;              /* the worker is finished with it */
    bool gone;              /* the client went away: cancel */
    int refs;               /* connection + worker */
    int status;             /* non-stream: HTTP status of reply */
    json_t *reply;          /* non-stream: the body */
    struct srv_job *next;   /* queue link */
};

/* ---- shared helpers (http.c, sse.c) -------------------------------------- */

/* A job for req (stolen), one reference; the last release frees it. */
struct srv_job *srv_job_new(struct cw_server *s, enum srv_dialect d, json_t *req);
void srv_job_release(struct srv_job *j);

const cwen *srv_engine(const struct cw_server *s);
void srv_log(struct cw_server *s, enum cw_log level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends an SSE event (event: name when non-NULL; data: obj compact) to
 * the job's stream and wakes the connection. Steals obj. */
void srv_sse_json(struct srv_job *j, const char *event, json_t *obj);
void srv_sse_raw(struct srv_job *j, const char *text);
/* Appends accumulated text / tool calls / log-probs for ev to the job. */
int srv_accumulate(struct srv_job *j, const struct cwen_event *ev);

/* Request JSON readers: absent (or null) leaves *out unchanged and returns 0;
 * a wrong type or out-of-range value fills e and returns -1. */
int rq_num(json_t *o, const char *key, double lo, double hi, double *out, struct srv_err *e);
int rq_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, struct srv_err *e);
int rq_bool(json_t *o, const char *key, bool *out, struct srv_err *e);
int rq_str(json_t *o, const char *key, const char **out, struct srv_err *e);
/* Fills j->gp.sampling from the fields every dialect shares (temperature,
 * top_p, top_k, min_p, seed, penalties) and j->stops from key_stop
 * (string or array of strings). */
int rq_sampling(struct srv_job *j, json_t *o, const char *key_stop, struct srv_err *e);
/* logit_bias: {"token id": bias in [-100, 100]}. */
int rq_logit_bias(struct srv_job *j, json_t *o, struct srv_err *e);
/* The model field: absent/empty or a valid name; else 400 naming the valid ones. */
int rq_model(struct srv_job *j, json_t *o, bool required, struct srv_err *e);
/* Refuses fields this server knows but does not implement: each entry is
 * a key; a present non-null value is a 400 naming it. */
int rq_refuse(json_t *o, const char *const *keys, struct srv_err *e);
/* Tokenizes j's prompt text (special tokens parsed), sets j->gp.prompt. */
int rq_prompt(struct srv_job *j, const char *text, struct srv_err *e);
/* Renders an OpenAI-shaped conversation object with the chat template and
 * tokenizes it; sets in_reasoning from the rendered tail. Steals conv. */
int rq_chat_prompt(struct srv_job *j, json_t *conv, struct srv_err *e);
/* Checks prompt + max_tokens against the context (400 when over). */
int rq_fits(struct srv_job *j, struct srv_err *e);

/* A fresh id: prefix + 24 hex digits (time and the server's counter mixed). */
void srv_make_id(struct cw_server *s, char *out, size_t cap, const char *prefix);
uint64_t srv_next_seq(struct cw_server *s);

/* ---- dialects: parse a request into j (set hooks), or fail with e -------- */

int openai_chat(struct srv_job *j, struct srv_err *e);
int openai_completions(struct srv_job *j, struct srv_err *e);
int openai_responses(struct srv_job *j, struct srv_err *e);
json_t *openai_models(struct cw_server *s);
json_t *openai_error(const struct srv_err *e);

int anthropic_messages(struct srv_job *j, struct srv_err *e);
json_t *anthropic_count_tokens(struct cw_server *s, json_t *req, struct srv_err *e);
json_t *anthropic_error(const struct srv_err *e);
const char *anthropic_error_type(int status);

int native_generate(struct srv_job *j, struct srv_err *e);
json_t *native_health(struct cw_server *s);

#endif
