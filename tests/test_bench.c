/* test_bench.c — `cwen bench` (bench/bench.c) on a tiny generated model,
 * CPU backend: the table has one row per planned test, --json gives one
 * parseable object per test with consistent numbers, two invocations give
 * the same logits and ids hashes (the CPU forward is deterministic), the MTP
 * rows decode the same tokens as the plain ones, the weight bytes per token
 * agree with the generator's own count, and bad flags exit 2. Speed is not
 * asserted: benchmarks make speed claims, tests do not. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

static const char *bin, *tmp;
static char model[1024];

/* Runs a shell command; returns its stdout (malloc'd) and *rc its exit code. */
static char *run(int *rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int *rc, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    if (!p) {
        *rc = -1;
        return NULL;
    }
    size_t cap = 1 << 16, len = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + len, 1, cap - 1 - len, p)) > 0) {
        len += r;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf)
        buf[len] = 0;
    return buf;
}

/* the "| ... | TEST | t/s |" row of the table for test, or NULL */
static const char *table_row(const char *out, const char *test)
{
    char pat[96];
    snprintf(pat, sizeof pat, "| %-16s |", test);
    return strstr(out, pat);
}

/* Parses one JSON object per line into arr; returns the count or -1. */
static int parse_lines(char *out, json_t *arr)
{
    int n = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        json_t *j = json_loads(l, 0, &je);
        if (!j || !json_is_object(j)) {
            note("not a JSON object: %s (%s)", l, je.text);
            json_decref(j);
            return -1;
        }
        json_array_append_new(arr, j);
        n++;
    }
    return n;
}

static const char *str_of(json_t *j, const char *k)
{
    const char *s = json_string_value(json_object_get(j, k));
    return s ? s : "";
}

static json_t *find_test(json_t *arr, const char *name)
{
    size_t i;
    json_t *j;
    json_array_foreach(arr, i, j)
        if (!strcmp(str_of(j, "test"), name))
            return j;
    return NULL;
}

static void test_table(void)
{
    int rc;
    char *out = run(&rc, "'%s' bench -m '%s' --backend cpu -t 2 -p 8,16 -n 4 -d 0,12 -r 2 2>/dev/null",
                    bin, model);
    ok(out && rc == 0, "table run exits 0 (rc %d)", rc);
    if (!out)
        return;
    static const char *rows[] = {"pp8", "pp16", "tg4", "tg4@d12"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *r = table_row(out, rows[i]);
        ok(r != NULL, "table has a %s row", rows[i]);
        if (r) {
            char line[256];
            size_t n = strcspn(r, "\n");
            snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), r);
            ok(!strstr(line, "failed") && strchr(line, '[') && strchr(line, ']'),
               "%s row has a median and a range: %s", rows[i], line);
        }
    }
    ok(strstr(out, "| model ") && strstr(out, "| cpu     |") && strstr(out, "bench.gguf"),
       "header, backend and model name in the table");
    ok(!table_row(out, "pp0") && !table_row(out, "tg4@d0"), "no rows for tests not asked for");
    ok(strstr(out, "achieved") && strstr(out, "GB/s"), "decode bandwidth line printed");
    free(out);
}

static void test_json(void)
{
    int rc1, rc2, rc3;
    const char *args = "--backend cpu -t 2 -p 16 -n 6 -d 0,16 -r 2 --mtp --json";
    char *a = run(&rc1, "'%s' bench -m '%s' %s 2>/dev/null", bin, model, args);
    char *b = run(&rc2, "'%s' bench -m '%s' %s -t 1 2>/dev/null", bin, model, args);
    /* the generator's own count of weight bytes read per decoded token */
    char *dry = run(&rc3, "'%s' mkmodel --preset tiny-moe --dry-run -o /dev/null", bin);
    ok(a && b && rc1 == 0 && rc2 == 0, "--json runs exit 0 (rc %d, %d)", rc1, rc2);
    json_t *ja = json_array(), *jb = json_array();
    int na = a ? parse_lines(a, ja) : -1, nb = b ? parse_lines(b, jb) : -1;
    /* pp16, tg6, tg6@d16, tg6+mtp, tg6+mtp@d16 */
    ok(na == 5 && nb == 5, "one JSON object per test (%d, %d lines)", na, nb);
    static const char *tests[] = {"pp16", "tg6", "tg6@d16", "tg6+mtp", "tg6+mtp@d16"};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        json_t *x = find_test(ja, tests[i]), *y = find_test(jb, tests[i]);
        ok(x && y, "%s present in both runs", tests[i]);
        if (!x || !y)
            continue;
        ok(!json_object_get(x, "error"), "%s: no error (%s)", tests[i], str_of(x, "error"));
        json_t *tps = json_object_get(x, "tps");
        double med = json_real_value(json_object_get(x, "tps_median"));
        double lo = json_real_value(json_object_get(x, "tps_min"));
        double hi = json_real_value(json_object_get(x, "tps_max"));
        ok(json_array_size(tps) == 2, "%s: 2 timed runs (the warm-up dropped)", tests[i]);
        ok(lo > 0 && lo <= med && med <= hi, "%s: 0 < min <= median <= max (%g %g %g)", tests[i],
           lo, med, hi);
        ok(strlen(str_of(x, "logits_fnv1a64")) == 16 &&
           !strcmp(str_of(x, "logits_fnv1a64"), str_of(y, "logits_fnv1a64")),
           "%s: logits hash identical across invocations and thread counts (%s vs %s)", tests[i],
           str_of(x, "logits_fnv1a64"), str_of(y, "logits_fnv1a64"));
        ok(!strcmp(str_of(x, "ids_fnv1a64"), str_of(y, "ids_fnv1a64")) &&
           json_is_true(json_object_get(x, "ids_same_all_runs")),
           "%s: ids hash identical across invocations and runs", tests[i]);
        ok(json_integer_value(json_object_get(x, "n_tokens")) == (tests[i][0] == 'p' ? 16 : 6),
           "%s: token count", tests[i]);
    }
    /* drafting with the MTP block must not change what the main pass decodes */
    json_t *t0 = find_test(ja, "tg6"), *m0 = find_test(ja, "tg6+mtp");
    json_t *t16 = find_test(ja, "tg6@d16"), *m16 = find_test(ja, "tg6+mtp@d16");
    ok(t0 && m0 && !strcmp(str_of(t0, "ids_fnv1a64"), str_of(m0, "ids_fnv1a64")) &&
       !strcmp(str_of(t0, "logits_fnv1a64"), str_of(m0, "logits_fnv1a64")),
       "tg6+mtp decodes the same ids and logits as tg6");
    ok(t16 && m16 && !strcmp(str_of(t16, "ids_fnv1a64"), str_of(m16, "ids_fnv1a64")),
       "tg6+mtp@d16 decodes the same ids as tg6@d16");
    ok(t0 && t16 && strcmp(str_of(t0, "ids_fnv1a64"), str_of(t16, "ids_fnv1a64")),
       "a prompt of depth 16 changes the decoded ids (the depth is really prefilled)");
    if (t0 && t16) {
        double w = json_real_value(json_object_get(t0, "bytes_weights"));
        double s = json_real_value(json_object_get(t0, "bytes_state"));
        double kv0 = json_real_value(json_object_get(t0, "bytes_kv"));
        double kv16 = json_real_value(json_object_get(t16, "bytes_kv"));
        double tot = json_real_value(json_object_get(t0, "bytes_per_token"));
        double gbps = json_real_value(json_object_get(t0, "decode_gbps"));
        double med = json_real_value(json_object_get(t0, "tps_median"));
        const char *d = dry ? strstr(dry, "decode bytes/token: ") : NULL;
        double dw = d ? atof(d + strlen("decode bytes/token: ")) : -1;
        ok(w > 0 && w == dw, "weight bytes per token %.0f = the generator's count %.0f", w, dw);
        ok(s > 0 && tot == w + s + kv0, "bytes per token = weights + state + K/V");
        /* K/V rows grow with the depth: 16 more rows per token on average */
        ok(kv16 > kv0 && kv0 > 0, "K/V bytes grow with the depth (%.0f -> %.0f)", kv0, kv16);
        ok(gbps > 0 && gbps == tot * med / 1e9, "GB/s = bytes per token x tok/s");
    }
    json_decref(ja);
    json_decref(jb);
    free(a);
    free(b);
    free(dry);
}

static void test_bad_flags(void)
{
    static const char *bad[] = {
        "-m '%s' --frobnicate",  "-m '%s' -r 0",          "-m '%s' -p 12x",
        "-m '%s' --backend tpu", "-m '%s' -t 0",          "-p 512",
        "-m '%s' -n",            "-m '%s' -d -5",         "-m '%s' extra",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1200];
        snprintf(args, sizeof args, bad[i], model);
        int rc;
        free(run(&rc, "'%s' bench %s >/dev/null 2>&1", bin, args));
        ok(rc == 2, "bench %s exits 2 (got %d)", bad[i], rc);
    }
    int rc;
    free(run(&rc, "'%s' bench -m '%s/no-such.gguf' >/dev/null 2>&1", bin, tmp));
    ok(rc == 1, "a missing file exits 1 (got %d)", rc);
    free(run(&rc, "'%s' bench -m '%s' --backend cpu --mtp -p 4 -n 0 >/dev/null 2>&1", bin, model));
    ok(rc == 0, "-n 0: prefill only, exit 0 (got %d)", rc);
    free(run(&rc, "'%s' bench --help >/dev/null 2>&1", bin));
    ok(rc == 0, "--help exits 0");
}

int main(void)
{
    bin = test_env("CWEN_BIN", "cwen");
    tmp = test_env("CWEN_TMP", "/tmp");
    snprintf(model, sizeof model, "%s/bench.gguf", tmp);
    int rc;
    free(run(&rc, "'%s' mkmodel --preset tiny-moe -o '%s' >/dev/null 2>&1", bin, model));
    ok(rc == 0, "tiny-moe model generated");
    if (rc)
        return done();
    test_table();
    test_json();
    test_bad_flags();
    remove(model);
    return done();
}
