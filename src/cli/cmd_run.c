/* cmd_run.c — `cwen run`: raw completion of a prompt, streamed to stdout.
 *
 * Owns the command line (prompt from -p, stdin or a file) and one
 * generation in plain-text mode: no chat template, special tokens in the
 * prompt are parsed, the model's text goes to stdout as it is generated and
 * the stats line to stderr. Flags, output and Ctrl-C are gen.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cwen run -m FILE (-p PROMPT | -p - | -f FILE) [options]\n"
            "Completes PROMPT as raw text (no chat template; special tokens such as\n"
            "<|im_start|> in the prompt are parsed). The completion streams to stdout\n"
            "(the prompt is not echoed); a closing line on stderr gives prompt tokens,\n"
            "prefill tok/s, generated tokens, decode tok/s and why it stopped. Ctrl-C\n"
            "stops the generation (stats still printed, exit 130); a second one exits.\n"
            "  -p, --prompt TEXT        the prompt; \"-\" reads it from stdin\n"
            "  -f, --file FILE          read the prompt from FILE\n");
    cw_cli_gen_usage(f);
}

/* Reads all of f into a malloc'd NUL-terminated buffer, or NULL. */
static char *slurp(FILE *f)
{
    struct cw_cli_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (cw_cli_buf_add(&b, chunk, n) < 0) {
            free(b.p);
            return NULL;
        }
    if (ferror(f) || (!b.p && cw_cli_buf_add(&b, "", 0) < 0)) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

static char *read_prompt(const char *text, const char *file)
{
    if (text && strcmp(text, "-"))
        return strdup(text);
    FILE *f = text ? stdin : fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "cwen run: %s: %s\n", file, strerror(errno));
        return NULL;
    }
    char *s = slurp(f);
    if (!s)
        fprintf(stderr, "cwen run: could not read %s\n", text ? "stdin" : file);
    if (f != stdin)
        fclose(f);
    return s;
}

int cw_cmd_run(int argc, char **argv)
{
    struct cw_cli_gen g;
    cw_cli_gen_init(&g, "run");
    const char *text = NULL, *file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        int r = cw_cli_gen_flag(&g, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r)
            continue;
        bool is_p = !strcmp(a, "-p") || !strcmp(a, "--prompt");
        if (is_p || !strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!v) {
                fprintf(stderr, "cwen run: %s needs a value\n", a);
                return 2;
            }
            if (is_p)
                text = v;
            else
                file = v;
            i++;
        } else {
            fprintf(stderr, "cwen run: unknown option '%s' (see cwen run --help)\n", a);
            return 2;
        }
    }
    if (!text == !file) {
        fprintf(stderr, "cwen run: give the prompt with one of -p TEXT, -p - or -f FILE\n");
        return 2;
    }
    /* the prompt before the model, so that a bad file fails fast */
    char *prompt = read_prompt(text, file);
    if (!prompt)
        return 1;
    cwen *e = NULL;
    int rc = cw_cli_gen_open(&g, &e);
    if (rc) {
        free(prompt);
        return rc;
    }
    rc = 1;
    struct cw_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (cwen_tokenize(e, prompt, strlen(prompt), true, &ids, &n, &err) < 0) {
        fprintf(stderr, "cwen run: %s\n", err.msg);
        goto done;
    }
    if (!n) {
        fprintf(stderr, "cwen run: the prompt is empty\n");
        goto done;
    }
    struct cwen_gen_params p = {.prompt = ids, .n_prompt = n, .sampling = g.s,
                                .max_tokens = cw_cli_max_tokens(&g, e, n),
                                .mode = CWEN_OUT_TEXT, .n_top_logprobs = -1};
    if (!p.max_tokens)
        goto done;
    struct cw_cli_out o;
    cw_cli_out_init(&o);
    struct cwen_usage u;
    int gr = cwen_generate(e, &p, cw_cli_out_event, &o, &u, &err);
    cw_cli_out_end(&o, false);
    cw_cli_out_free(&o);
    if (gr < 0) {
        fprintf(stderr, "cwen run: %s\n", err.msg);
        goto done;
    }
    cw_cli_print_stats(&u);
    rc = u.finish == CWEN_FINISH_CANCELLED ? 130 : 0;
done:
    free(ids);
    free(prompt);
    cwen_close(e);
    return rc;
}
