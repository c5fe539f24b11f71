/* gen.h — what `cwen run` and `cwen chat` share: the engine and sampling
 * flags, opening the engine, printing the event stream and the closing
 * stats line, and Ctrl-C (first one cancels the generation, second exits);
 * serve uses the backend-name check too.
 * Only cli/ includes this. */
#ifndef CW_CLI_GEN_H
#define CW_CLI_GEN_H

#include <stdbool.h>
#include <stdio.h>

#include "cwen.h"

struct cw_cli_gen {
    const char *cmd;       /* "run" | "chat", for messages */
    struct cwen_opts eo;   /* model, backend, threads, context */
    struct cw_sampling s;
    bool has_seed;         /* --seed given; otherwise a seed from the clock */
    int64_t n_predict;     /* -n; 0: until end of turn or the context is full */
};

void cw_cli_gen_init(struct cw_cli_gen *g, const char *cmd);

/* Parses the flag at argv[*i] if it is one of the shared ones, advancing *i
 * past its value. Returns 1 (consumed), 0 (not a shared flag) or -1 (bad
 * value; the message is printed). */
int cw_cli_gen_flag(struct cw_cli_gen *g, int argc, char **argv, int *i);

/* The shared flags' --help lines. */
void cw_cli_gen_usage(FILE *f);

/* Whether name is a backend cwen knows ("cpu", "cuda", "auto"). */
bool cw_cli_backend_ok(const char *name);

/* Checks the model was given, then opens the engine and installs the SIGINT
 * handler. Returns 0, or the exit code (2: usage, 1: runtime) after
 * printing why. */
int cw_cli_gen_open(struct cw_cli_gen *g, cwen **e);

/* Tokens the next generation may produce for a prompt of n_prompt tokens:
 * -n, capped by what is left of the context. 0 (after printing why) when the
 * prompt alone fills the context. */
int64_t cw_cli_max_tokens(const struct cw_cli_gen *g, const cwen *e, size_t n_prompt);

/* ---- output ---------------------------------------------------------------
 * Answer text goes to stdout as it comes (flushed per event). Reasoning goes
 * to stdout too, set apart: dimmed when stdout is a terminal, else wrapped
 * in "<think>\n" … "\n</think>\n\n". */

struct cw_cli_buf {
    char *p; /* NUL-terminated; NULL until the first append */
    size_t len, cap;
};

struct cw_cli_out {
    bool tty;        /* stdout is a terminal */
    int block;       /* 0: nothing printed, 1: inside reasoning, 2: answer */
    char last;       /* the last byte printed, to end the line cleanly */
    bool oom;        /* a collect buffer could not grow */
    struct cw_cli_buf answer, reasoning; /* what was said (for chat history) */
};

void cw_cli_out_init(struct cw_cli_out *o);
void cw_cli_out_free(struct cw_cli_out *o);
/* cwen_event_fn: prints the event; returns nonzero once Ctrl-C was pressed. */
int cw_cli_out_event(void *ctx, const struct cwen_event *ev);
/* Closes an open reasoning block; ends the line when newline is set or
 * stdout is a terminal (so the stats line starts on its own). */
void cw_cli_out_end(struct cw_cli_out *o, bool newline);

/* Appends s[0..n) to b; -1 when out of memory. */
int cw_cli_buf_add(struct cw_cli_buf *b, const char *s, size_t n);

/* The closing line, on stderr:
 *   cwen: prompt P tokens (X tok/s prefill), generated G tokens (Y tok/s decode), finish: F */
void cw_cli_print_stats(const struct cwen_usage *u);

/* ---- Ctrl-C ---------------------------------------------------------------
 * The first SIGINT sets a flag (the event callback then cancels); another
 * one before the flag is cleared exits the process (status 130). */
bool cw_cli_interrupted(void);
void cw_cli_interrupt_clear(void);

#endif
