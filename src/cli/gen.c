/* gen.c — the pieces `cwen run` and `cwen chat` share (see gen.h): flags for
 * the engine and the sampler, opening the engine, the stdout/stderr layout
 * of a streamed generation, and SIGINT.
 *
 * The one mutable static is the SIGINT flag: a signal handler has nowhere
 * else to write (a volatile sig_atomic_t, as C11 7.14.1.1 allows). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/gen.h"

#define DIM "\x1b[2m"
#define UNDIM "\x1b[0m"

static volatile sig_atomic_t sigint_seen;

static void on_sigint(int sig)
{
    (void)sig;
    if (sigint_seen)
        _exit(130); /* the second Ctrl-C: the user wants out now */
    sigint_seen = 1;
}

bool cw_cli_interrupted(void) { return sigint_seen != 0; }
void cw_cli_interrupt_clear(void) { sigint_seen = 0; }

void cw_cli_gen_init(struct cw_cli_gen *g, const char *cmd)
{
    *g = (struct cw_cli_gen){.cmd = cmd, .s = cw_sampling_default()};
}

void cw_cli_gen_usage(FILE *f)
{
    fprintf(f,
            "engine:\n"
            "  -m, --model FILE         the GGUF (required)\n"
            "  --backend NAME           cpu | cuda | auto (default auto: the GPU when present)\n"
            "  -t, --threads N          CPU threads (default: all CPUs)\n"
            "  -c, --ctx N              context, prompt + output (default min(train, 8192))\n"
            "  -n, --max-tokens N       tokens to generate at most (default: to the end of the\n"
            "                           context; generation also stops at end-of-turn)\n"
            "sampling (defaults as the HTTP API's; temperature 0 is greedy):\n"
            "  --temp T                 temperature (default 1)\n"
            "  --top-p P                nucleus mass in (0, 1] (default 1: off)\n"
            "  --top-k K                keep the K best (default 0: off)\n"
            "  --min-p P                drop tokens below P x the best's probability (default 0)\n"
            "  --repeat-penalty R       > 1 discourages repeats (default 1: off)\n"
            "  --repeat-last-n N        tokens the penalties look back at (default 64, -1: all)\n"
            "  --presence-penalty X     (default 0)\n"
            "  --frequency-penalty X    (default 0)\n"
            "  --seed N                 same seed, same output (default: from the clock)\n");
}

bool cw_cli_backend_ok(const char *name)
{
    return !strcmp(name, "cpu") || !strcmp(name, "cuda") || !strcmp(name, "auto");
}

static int bad(const struct cw_cli_gen *g, const char *opt, const char *want)
{
    fprintf(stderr, "cwen %s: %s needs %s\n", g->cmd, opt, want);
    return -1;
}

static int num_f(const char *v, double lo, double hi, bool lo_open, float *out)
{
    char *end;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return -1;
    *out = (float)x;
    return 0;
}

static int num_i(const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

int cw_cli_gen_flag(struct cw_cli_gen *g, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    struct cw_sampling *s = &g->s;
    long long x;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (!v)
            return bad(g, a, "a file");
        g->eo.path = v;
    } else if (!strcmp(a, "--backend")) {
        if (!v || !cw_cli_backend_ok(v)) {
            fprintf(stderr, "cwen %s: unknown backend \"%s\" (expected cpu, cuda or auto)\n",
                    g->cmd, v ? v : "");
            return -1;
        }
        g->eo.backend = v;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (num_i(v, 0, 1024, &x))
            return bad(g, a, "an integer in [0, 1024]");
        g->eo.n_threads = (int)x;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
        if (num_i(v, 0, 1LL << 30, &x))
            return bad(g, a, "an integer in [0, 2^30]");
        g->eo.n_ctx = x;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
        if (num_i(v, 0, 1LL << 30, &x))
            return bad(g, a, "an integer in [0, 2^30]");
        g->n_predict = x;
    } else if (!strcmp(a, "--temp")) {
        if (num_f(v, 0, 1e6, false, &s->temperature))
            return bad(g, a, "a number >= 0");
    } else if (!strcmp(a, "--top-p")) {
        if (num_f(v, 0, 1, true, &s->top_p))
            return bad(g, a, "a number in (0, 1]");
    } else if (!strcmp(a, "--top-k")) {
        if (num_i(v, 0, INT32_MAX, &x))
            return bad(g, a, "an integer >= 0");
        s->top_k = (int32_t)x;
    } else if (!strcmp(a, "--min-p")) {
        if (num_f(v, 0, 1, false, &s->min_p))
            return bad(g, a, "a number in [0, 1]");
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (num_f(v, 0, 1e6, true, &s->repetition_penalty))
            return bad(g, a, "a number > 0");
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (num_i(v, -1, INT32_MAX, &x))
            return bad(g, a, "an integer >= -1");
        s->penalty_last_n = (int32_t)x;
    } else if (!strcmp(a, "--presence-penalty")) {
        if (num_f(v, -1e6, 1e6, false, &s->presence_penalty))
            return bad(g, a, "a number");
    } else if (!strcmp(a, "--frequency-penalty")) {
        if (num_f(v, -1e6, 1e6, false, &s->frequency_penalty))
            return bad(g, a, "a number");
    } else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long u = v && *v != '-' ? strtoull(v, &end, 10) : 0;
        if (!v || !*v || *v == '-' || *end || errno)
            return bad(g, a, "an unsigned integer");
        s->seed = u;
        g->has_seed = true;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

int cw_cli_gen_open(struct cw_cli_gen *g, cwen **e)
{
    *e = NULL;
    if (!g->eo.path) {
        fprintf(stderr, "cwen %s: no model: -m FILE (see cwen %s --help)\n", g->cmd, g->cmd);
        return 2;
    }
    if (!g->has_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g->s.seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
    }
    struct cw_err err = {0};
    if (cwen_open(e, &g->eo, &err) < 0) {
        fprintf(stderr, "cwen %s: %s\n", g->cmd, err.msg);
        return 1;
    }
    /* no SA_RESTART: a Ctrl-C at chat's prompt interrupts the read */
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    return 0;
}

int64_t cw_cli_max_tokens(const struct cw_cli_gen *g, const cwen *e, size_t n_prompt)
{
    int64_t left = cwen_get_info(e)->n_ctx - (int64_t)n_prompt;
    if (left < 1) {
        fprintf(stderr, "cwen %s: the prompt (%zu tokens) fills the context (%lld); raise --ctx\n",
                g->cmd, n_prompt, (long long)cwen_get_info(e)->n_ctx);
        return 0;
    }
    return g->n_predict && g->n_predict < left ? g->n_predict : left;
}

/* ---- output ------------------------------------------------------------ */

void cw_cli_out_init(struct cw_cli_out *o)
{
    *o = (struct cw_cli_out){.tty = isatty(STDOUT_FILENO) != 0, .last = '\n'};
}

void cw_cli_out_free(struct cw_cli_out *o)
{
    free(o->answer.p);
    free(o->reasoning.p);
    *o = (struct cw_cli_out){0};
}

int cw_cli_buf_add(struct cw_cli_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static void put(struct cw_cli_out *o, const char *s, size_t n)
{
    if (!n)
        return;
    fwrite(s, 1, n, stdout);
    o->last = s[n - 1];
}

static void close_reasoning(struct cw_cli_out *o)
{
    if (o->block != 1)
        return;
    if (o->tty)
        fputs(UNDIM "\n\n", stdout);
    else
        fputs(o->last == '\n' ? "</think>\n\n" : "\n</think>\n\n", stdout);
    o->last = '\n';
    o->block = 2;
}

int cw_cli_out_event(void *ctx, const struct cwen_event *ev)
{
    struct cw_cli_out *o = ctx;
    switch (ev->type) {
    case CWEN_EV_REASONING:
        if (o->block == 0) {
            fputs(o->tty ? DIM : "<think>\n", stdout);
            o->block = 1;
        }
        if (o->block == 1) {
            put(o, ev->text, ev->len);
            o->oom |= cw_cli_buf_add(&o->reasoning, ev->text, ev->len) < 0;
            break;
        }
        /* reasoning after the answer began: show it as answer text */
        /* fall through */
    case CWEN_EV_TEXT:
        close_reasoning(o);
        o->block = 2;
        put(o, ev->text, ev->len);
        o->oom |= cw_cli_buf_add(&o->answer, ev->text, ev->len) < 0;
        break;
    case CWEN_EV_TOOL_BEGIN:
        close_reasoning(o);
        o->block = 2;
        printf("%s[tool call %s ", o->last == '\n' ? "" : "\n", ev->text);
        break;
    case CWEN_EV_TOOL_END:
        put(o, ev->text, ev->len);
        put(o, "]\n", 2);
        break;
    case CWEN_EV_TOKEN:
    case CWEN_EV_TOOL_ARGS: /* TOOL_END carries the whole object */
        break;
    }
    fflush(stdout);
    return cw_cli_interrupted();
}

void cw_cli_out_end(struct cw_cli_out *o, bool newline)
{
    if (o->block == 1 && o->tty)
        fputs(UNDIM, stdout);
    else
        close_reasoning(o);
    if ((newline || o->tty) && o->last != '\n')
        put(o, "\n", 1);
    fflush(stdout);
}

void cw_cli_print_stats(const struct cwen_usage *u)
{
    double pf = u->t_prompt_ms > 0 ? (double)u->n_prompt * 1e3 / u->t_prompt_ms : 0;
    /* decode: the tokens after the first, over the time after the first */
    double dc = u->t_decode_ms > 0 && u->n_completion > 1
                    ? (double)(u->n_completion - 1) * 1e3 / u->t_decode_ms : 0;
    fprintf(stderr,
            "cwen: prompt %lld tokens (%.1f tok/s prefill), generated %lld tokens (%.1f tok/s "
            "decode), finish: %s\n",
            (long long)u->n_prompt, pf, (long long)u->n_completion, dc, cwen_finish_name(u->finish));
    fflush(stderr);
}
