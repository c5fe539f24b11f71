/* cmd_chat.c — `cwen chat`: a conversation through the model's chat template.
 *
 * Owns the conversation: the messages array (OpenAI-shaped JSON, built with
 * jansson), rendered whole each turn by cwen_render_chat, so the template
 * decides what earlier turns keep (it drops their reasoning). One question on
 * the command line is one turn; otherwise each line of stdin is a turn until
 * EOF or "/exit". Generation runs in chat mode, so the engine splits
 * reasoning from the answer and stops at end-of-turn; gen.c prints both. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/gen.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cwen chat -m FILE [options] [QUESTION]\n"
            "Chats with the model through its chat template. With QUESTION, answers it\n"
            "and exits; otherwise reads one message per line from stdin until EOF or\n"
            "/exit, keeping the conversation (a \"> \" prompt is shown when stdin is a\n"
            "terminal). The answer streams to stdout. The model's thinking goes to stdout\n"
            "before it, set apart: dimmed on a terminal, otherwise between \"<think>\" and\n"
            "\"</think>\" lines. After each answer a line on stderr gives prompt tokens,\n"
            "prefill tok/s, generated tokens, decode tok/s and why it stopped. Ctrl-C\n"
            "stops the answer (the conversation goes on); a second one, or one at the\n"
            "prompt, exits.\n"
            "  --system TEXT            a system message first\n"
            "  --no-think               thinking off (the template's empty think block)\n");
    cw_cli_gen_usage(f);
}

struct chat {
    struct cw_cli_gen *g;
    cwen *e;
    json_t *msgs; /* the conversation so far */
    bool think;
};

static int add_msg(json_t *msgs, const char *role, const char *content, const char *reasoning)
{
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
    if (m && reasoning && json_object_set_new(m, "reasoning_content", json_string(reasoning)) < 0) {
        json_decref(m);
        m = NULL;
    }
    if (!m || json_array_append_new(msgs, m) < 0) {
        fprintf(stderr, "cwen chat: out of memory\n");
        return -1;
    }
    return 0;
}

/* The conversation as the prompt's tokens (malloc'd), or -1. */
static int render(struct chat *c, int32_t **ids, size_t *n, bool *in_reasoning)
{
    struct cw_err err = {0};
    json_t *conv = json_pack("{s:O, s:b, s:b}", "messages", c->msgs, "add_generation_prompt", 1,
                             "enable_thinking", c->think);
    char *text = conv ? json_dumps(conv, JSON_COMPACT) : NULL;
    json_decref(conv);
    char *prompt = NULL;
    int rc = -1;
    if (!text) {
        fprintf(stderr, "cwen chat: out of memory\n");
        return -1;
    }
    if (cwen_render_chat(c->e, text, strlen(text), &prompt, &err) < 0 ||
        cwen_tokenize(c->e, prompt, strlen(prompt), true, ids, n, &err) < 0) {
        fprintf(stderr, "cwen chat: %s\n", err.msg);
        goto done;
    }
    /* thinking on leaves the prompt open inside <think> */
    size_t len = strlen(prompt);
    *in_reasoning = len >= 8 && !strcmp(prompt + len - 8, "<think>\n");
    rc = 0;
done:
    free(prompt);
    free(text);
    return rc;
}

/* One turn: the user's message in, the answer streamed and kept. Returns 0,
 * 130 (cancelled by Ctrl-C) or 1 (error, printed). */
static int turn(struct chat *c, const char *question)
{
    if (add_msg(c->msgs, "user", question, NULL) < 0)
        return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    bool in_reasoning = false;
    if (render(c, &ids, &n, &in_reasoning) < 0)
        return 1;
    struct cwen_gen_params p = {.prompt = ids, .n_prompt = n, .sampling = c->g->s,
                                .max_tokens = cw_cli_max_tokens(c->g, c->e, n),
                                .mode = CWEN_OUT_CHAT, .in_reasoning = in_reasoning,
                                .n_top_logprobs = -1};
    int rc = 1;
    struct cw_cli_out o;
    cw_cli_out_init(&o);
    struct cwen_usage u;
    struct cw_err err = {0};
    if (!p.max_tokens)
        goto done;
    cw_cli_interrupt_clear();
    int gr = cwen_generate(c->e, &p, cw_cli_out_event, &o, &u, &err);
    cw_cli_out_end(&o, true);
    if (gr < 0) {
        fprintf(stderr, "cwen chat: %s\n", err.msg);
        goto done;
    }
    cw_cli_print_stats(&u);
    if (o.oom) {
        fprintf(stderr, "cwen chat: out of memory keeping the answer\n");
        goto done;
    }
    if (add_msg(c->msgs, "assistant", o.answer.p ? o.answer.p : "", o.reasoning.p) < 0)
        goto done;
    rc = u.finish == CWEN_FINISH_CANCELLED ? 130 : 0;
    cw_cli_interrupt_clear();
done:
    cw_cli_out_free(&o);
    free(ids);
    return rc;
}

/* Lines from stdin, a turn each, until EOF, "/exit" or Ctrl-C at the prompt. */
static int interactive(struct chat *c)
{
    bool tty = isatty(STDIN_FILENO) != 0;
    if (tty)
        fprintf(stderr, "cwen chat: %s; /exit or Ctrl-D ends\n", cwen_get_info(c->e)->model_name);
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) {
            if (tty)
                fputs("\n", stdout);
            if (errno && errno != EINTR) {
                perror("cwen chat: stdin");
                rc = 1;
            }
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!strcmp(line, "/exit"))
            break;
        if (!len)
            continue;
        int r = turn(c, line);
        if (r == 1) {
            rc = 1;
            break;
        }
    }
    free(line);
    return rc;
}

int cw_cmd_chat(int argc, char **argv)
{
    struct cw_cli_gen g;
    cw_cli_gen_init(&g, "chat");
    const char *system = NULL, *question = NULL;
    bool think = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        int r = cw_cli_gen_flag(&g, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(a, "--no-think")) {
            think = false;
        } else if (!strcmp(a, "--system")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "cwen chat: --system needs a value\n");
                return 2;
            }
            system = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cwen chat: unknown option '%s' (see cwen chat --help)\n", a);
            return 2;
        } else if (question) {
            fprintf(stderr, "cwen chat: one question at most (quote it): '%s'\n", a);
            return 2;
        } else {
            question = a;
        }
    }
    cwen *e = NULL;
    int rc = cw_cli_gen_open(&g, &e);
    if (rc)
        return rc;
    struct chat c = {.g = &g, .e = e, .msgs = json_array(), .think = think};
    if (!c.msgs || (system && add_msg(c.msgs, "system", system, NULL) < 0))
        rc = 1;
    else if (question)
        rc = turn(&c, question);
    else
        rc = interactive(&c);
    json_decref(c.msgs);
    cwen_close(e);
    return rc;
}
