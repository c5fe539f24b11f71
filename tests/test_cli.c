/* test_cli.c — `cwen run` and `cwen chat`, run as the real binary ($CWEN_BIN)
 * on a generated tiny model: greedy and seeded reproducibility, -n bounding
 * the output, the stats line (format, on stderr only, counts), the prompt
 * from -p, stdin and a file giving the same completion, chat with and
 * without thinking, multi-turn chat from stdin keeping its history, Ctrl-C
 * cancelling with stats, and bad flags / backends / files failing with a
 * message and the documented exit code. */
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static const char *bin, *tmp;
static char model[1024], out_path[1100], err_path[1100];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

struct res {
    int rc;          /* exit status, -1 if it did not exit */
    char *out, *err; /* what it wrote (malloc'd) */
};

static void res_free(struct res *r)
{
    free(r->out);
    free(r->err);
    *r = (struct res){0};
}

/* Runs `cwen ARGS` through the shell (stdin from STDIN_TEXT when non-NULL,
 * else /dev/null); collects the exit status, stdout and stderr. */
static struct res cwen(const char *stdin_text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static struct res cwen(const char *stdin_text, const char *fmt, ...)
{
    char args[2048], cmd[8192], in_path[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(in_path, sizeof in_path, "%s/cli-in.txt", tmp);
    if (stdin_text) {
        FILE *f = fopen(in_path, "wb");
        fputs(stdin_text, f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "'%s' %s <'%s' >'%s' 2>'%s'", bin, args, stdin_text ? in_path : "/dev/null",
             out_path, err_path);
    int st = system(cmd);
    struct res r = {.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1, .out = slurp(out_path), .err = slurp(err_path)};
    if (!r.out)
        r.out = strdup("");
    if (!r.err)
        r.err = strdup("");
    return r;
}

struct stats {
    long long n_prompt, n_gen;
    double prefill, decode;
    char finish[16];
    int n_lines; /* stats lines found */
};

/* Parses every stats line in err; s holds the last one. */
static struct stats parse_stats(const char *err, struct stats *first)
{
    struct stats s = {0}, t;
    for (const char *p = err; (p = strstr(p, "cwen: prompt ")); p++) {
        if (sscanf(p, "cwen: prompt %lld tokens (%lf tok/s prefill), generated %lld tokens (%lf tok/s decode), finish: %15s",
                   &t.n_prompt, &t.prefill, &t.n_gen, &t.decode, t.finish) != 5)
            continue;
        t.n_lines = s.n_lines + 1;
        if (t.n_lines == 1 && first)
            *first = t;
        s = t;
    }
    return s;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

#define COMMON "-m '%s' -t 2 -c 256"

static void test_run(void)
{
    struct res h = cwen(NULL, "run --help");
    ok(h.rc == 0 && strstr(h.out, "usage: cwen run") && strstr(h.out, "--repeat-last-n") &&
           strstr(h.out, "--backend"), "run --help: rc %d", h.rc);
    res_free(&h);

    /* greedy: twice the same, text on stdout, stats only on stderr */
    struct res a = cwen(NULL, "run " COMMON " -p 'The capital of France is' -n 12 --temp 0", model);
    struct res b = cwen(NULL, "run " COMMON " -p 'The capital of France is' -n 12 --temp 0", model);
    struct stats s = parse_stats(a.err, NULL);
    ok(a.rc == 0 && *a.out, "greedy run: rc %d, %zu bytes: %s", a.rc, strlen(a.out), a.err);
    ok(!strcmp(a.out, b.out), "greedy run reproduces");
    ok(s.n_lines == 1 && !strstr(a.out, "cwen: prompt"), "one stats line, on stderr only: %s", a.err);
    ok(s.n_prompt >= 4 && s.n_prompt <= 8, "prompt tokens %lld (5 words)", s.n_prompt);
    ok(s.n_gen >= 1 && s.n_gen <= 12 && (s.n_gen == 12 ? !strcmp(s.finish, "length") : !strcmp(s.finish, "stop")),
       "generated %lld of 12, finish %s", s.n_gen, s.finish);
    ok(s.prefill > 0 && (s.n_gen < 2 || s.decode > 0), "rates: prefill %.1f, decode %.1f tok/s", s.prefill, s.decode);
    res_free(&b);

    /* -n bounds the count */
    b = cwen(NULL, "run " COMMON " -p 'The capital of France is' -n 3 --temp 0", model);
    struct stats s3 = parse_stats(b.err, NULL);
    ok(b.rc == 0 && s3.n_lines == 1 && s3.n_gen <= 3 && (s3.n_gen == 3 || !strcmp(s3.finish, "stop")),
       "-n 3: generated %lld, finish %s", s3.n_gen, s3.finish);
    ok(s.n_gen < 12 || s3.n_gen == 3, "-n 3 stops where -n 12 went on");
    res_free(&b);

    /* the prompt from stdin and from a file: the same completion */
    b = cwen("The capital of France is", "run " COMMON " -p - -n 12 --temp 0", model);
    ok(b.rc == 0 && !strcmp(a.out, b.out), "-p - reads stdin");
    res_free(&b);
    char pf[1100];
    snprintf(pf, sizeof pf, "%s/cli-prompt.txt", tmp);
    FILE *f = fopen(pf, "wb");
    fputs("The capital of France is", f);
    fclose(f);
    b = cwen(NULL, "run " COMMON " -f '%s' -n 12 --temp 0 --backend cpu", model, pf);
    ok(b.rc == 0 && !strcmp(a.out, b.out), "-f FILE reads the file (and --backend cpu runs)");
    res_free(&b);
    remove(pf);
    res_free(&a);

    /* seeded sampling: the same seed the same text; some other seed differs */
    a = cwen(NULL, "run " COMMON " -p 'Once upon a time' -n 16 --temp 1 --seed 7", model);
    b = cwen(NULL, "run " COMMON " -p 'Once upon a time' -n 16 --temp 1 --seed 7", model);
    ok(a.rc == 0 && *a.out && !strcmp(a.out, b.out), "--seed 7 twice: same output");
    bool differs = false;
    for (int seed = 8; seed < 12 && !differs; seed++) {
        struct res c = cwen(NULL, "run " COMMON " -p 'Once upon a time' -n 16 --temp 1 --seed %d", model, seed);
        differs = c.rc == 0 && strcmp(a.out, c.out);
        res_free(&c);
    }
    ok(differs, "another seed, another output (seeds 8..11 vs 7)");
    res_free(&a);
    res_free(&b);

    /* every sampling flag is accepted and the run still reproduces */
    const char *all = "--temp 0.8 --top-p 0.9 --top-k 40 --min-p 0.05 --repeat-penalty 1.1 --repeat-last-n 32 "
                      "--presence-penalty 0.5 --frequency-penalty 0.25 --seed 3";
    a = cwen(NULL, "run " COMMON " -p 'Once upon a time' -n 8 %s", model, all);
    b = cwen(NULL, "run " COMMON " -p 'Once upon a time' -n 8 %s", model, all);
    ok(a.rc == 0 && !strcmp(a.out, b.out) && parse_stats(a.err, NULL).n_lines == 1,
       "all sampling flags: rc %d %s", a.rc, a.err);
    res_free(&a);
    res_free(&b);
}

static void test_chat(void)
{
    struct res h = cwen(NULL, "chat --help");
    ok(h.rc == 0 && strstr(h.out, "--no-think") && strstr(h.out, "<think>"), "chat --help");
    res_free(&h);

    /* thinking on: the prompt ends inside <think>, so the greedy output opens
     * with the reasoning block; --no-think: no block */
    struct res t = cwen(NULL, "chat " COMMON " -n 8 --temp 0 'What is two plus two?'", model);
    struct stats st = parse_stats(t.err, NULL);
    ok(t.rc == 0 && st.n_lines == 1 && st.n_gen >= 1, "chat one-shot: rc %d %s", t.rc, t.err);
    ok(!strncmp(t.out, "<think>\n", 8) && strstr(t.out, "</think>\n"), "thinking shown as a <think> block: %.60s", t.out);
    struct res n = cwen(NULL, "chat " COMMON " -n 8 --temp 0 --no-think 'What is two plus two?'", model);
    struct stats sn = parse_stats(n.err, NULL);
    ok(n.rc == 0 && sn.n_lines == 1 && !strstr(n.out, "<think>") && !strstr(n.out, "</think>") && *n.out,
       "--no-think: no reasoning block: %.60s", n.out);
    /* the empty think block the template adds costs prompt tokens */
    ok(sn.n_prompt > st.n_prompt, "--no-think prompt %lld > thinking prompt %lld", sn.n_prompt, st.n_prompt);
    res_free(&t);
    res_free(&n);

    /* multi-turn from stdin: a turn per line, /exit ends, history kept (the
     * same question twice makes a longer second prompt only with history) */
    struct res m = cwen("hello there\nhello there\n/exit\nnever read\n",
                        "chat " COMMON " -n 4 --temp 0 --no-think --system 'Be brief.'", model);
    struct stats first, last = parse_stats(m.err, &first);
    ok(m.rc == 0 && last.n_lines == 2, "two turns answered, /exit stops: rc %d, %d stats lines", m.rc, last.n_lines);
    ok(last.n_prompt > first.n_prompt + first.n_gen, "second prompt %lld > first %lld + its answer %lld",
       last.n_prompt, first.n_prompt, first.n_gen);
    ok(count(m.out, "\n") >= 2, "each answer ends its line");
    res_free(&m);
    /* EOF ends it too */
    m = cwen("one\n", "chat " COMMON " -n 2 --temp 0 --no-think", model);
    ok(m.rc == 0 && parse_stats(m.err, NULL).n_lines == 1, "EOF ends the chat");
    res_free(&m);
}

/* Ctrl-C during a long generation: cancelled, stats printed, exit 130. */
static void test_sigint(void)
{
    int fd[2];
    if (pipe(fd)) {
        skip("pipe failed");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec '%s' run -m '%s' -t 2 -c 8192 -p 'Hello' -n 8000 --temp 1 --seed 1 2>'%s'", bin, model,
             err_path);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t r = read(fd[0], buf, sizeof buf); /* generation has begun */
    kill(pid, SIGINT);
    while (read(fd[0], buf, sizeof buf) > 0)
        ;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    char *err = slurp(err_path);
    struct stats s = parse_stats(err ? err : "", NULL);
    ok(r > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 130, "Ctrl-C: exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    ok(s.n_lines == 1 && !strcmp(s.finish, "cancelled") && s.n_gen >= 1 && s.n_gen < 8000,
       "Ctrl-C: stats with finish %s after %lld tokens", s.finish, s.n_gen);
    free(err);
}

static void test_errors(void)
{
    struct res r = cwen(NULL, "run " COMMON " -p x --bogus", model);
    ok(r.rc == 2 && strstr(r.err, "unknown option '--bogus'"), "unknown flag: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run " COMMON " -p x --temp abc", model);
    ok(r.rc == 2 && strstr(r.err, "--temp"), "bad number: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run " COMMON " -p x --top-p 0", model);
    ok(r.rc == 2 && strstr(r.err, "--top-p"), "top-p out of range: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run " COMMON " -p x -n", model);
    ok(r.rc == 2 && strstr(r.err, "-n"), "flag without value: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run -p x");
    ok(r.rc == 2 && strstr(r.err, "no model"), "no model: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run " COMMON, model);
    ok(r.rc == 2 && strstr(r.err, "prompt"), "no prompt: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run -m '%s/no-such.gguf' -p x", tmp);
    ok(r.rc == 1 && strstr(r.err, "no-such.gguf"), "missing model file: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "run " COMMON " -f '%s/no-such.txt'", model, tmp);
    ok(r.rc == 1 && strstr(r.err, "no-such.txt"), "missing prompt file: rc %d %s", r.rc, r.err);
    res_free(&r);
    const char *cmds[] = {"run " COMMON " -p x", "chat " COMMON, "serve " COMMON};
    for (int i = 0; i < 3; i++) {
        char c[1200];
        snprintf(c, sizeof c, cmds[i], model);
        r = cwen(NULL, "%s --backend tpu", c);
        ok(r.rc == 2 && strstr(r.err, "unknown backend \"tpu\"") && strstr(r.err, "cpu, cuda or auto"),
           "%.5s --backend tpu: rc %d %s", cmds[i], r.rc, r.err);
        res_free(&r);
    }
    r = cwen(NULL, "chat " COMMON " one two", model);
    ok(r.rc == 2 && strstr(r.err, "one question"), "chat: two questions: rc %d %s", r.rc, r.err);
    res_free(&r);
    r = cwen(NULL, "chat " COMMON " --nope", model);
    ok(r.rc == 2 && strstr(r.err, "unknown option"), "chat: unknown flag: rc %d %s", r.rc, r.err);
    res_free(&r);
}

int main(void)
{
    bin = getenv("CWEN_BIN"), tmp = getenv("CWEN_TMP");
    if (!bin || !tmp) {
        skip("CWEN_BIN / CWEN_TMP not set (run through ctest)");
        return done();
    }
    snprintf(model, sizeof model, "%s/cli-tiny.gguf", tmp);
    snprintf(out_path, sizeof out_path, "%s/cli-out.txt", tmp);
    snprintf(err_path, sizeof err_path, "%s/cli-err.txt", tmp);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny-dense --no-mtp --threads 2 -o '%s' >/dev/null", bin, model);
    ok(system(cmd) == 0, "mkmodel");
    test_run();
    test_chat();
    test_sigint();
    test_errors();
    remove(model);
    remove(out_path);
    remove(err_path);
    char in_path[1100];
    snprintf(in_path, sizeof in_path, "%s/cli-in.txt", tmp);
    remove(in_path);
    return done();
}
