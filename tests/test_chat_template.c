/* test_chat_template.c — cwen's native chat rendering against a real Jinja
 * engine, byte for byte.
 *
 * Every conversation in tests/data/chat_conversations.json is rendered by
 * cw_chat_render and by scripts/render_template.py (Jinja2, Hugging Face
 * settings) from llama.cpp's Qwen3.5-4B.jinja, and again from a copy of that
 * template with Qwen3.6's preserve_thinking condition substituted (a
 * simulation: the real Qwen3.6 file is not in the oracle). Cases the template
 * rejects must fail in both, with the same message. Also checks that other
 * templates are refused with a message naming what is missing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat_template.h"
#include "test.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *p = malloc(cap);
    size_t k;
    while (p && (k = fread(p + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len < 2) {
            char *q = realloc(p, cap *= 2);
            if (!q) {
                free(p);
                p = NULL;
            }
            p = q;
        }
    }
    fclose(f);
    if (p)
        p[len] = 0;
    if (n)
        *n = len;
    return p;
}

static char *run_capture(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0, k;
    char *p = malloc(cap);
    while (p && (k = fread(p + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len < 2)
            p = realloc(p, cap *= 2);
    }
    int st = pclose(f);
    if (!p || st != 0) {
        free(p);
        return NULL;
    }
    p[len] = 0;
    return p;
}

/* Prints the first difference, for a failing case. */
static void show_diff(const char *a, size_t an, const char *b, size_t bn)
{
    size_t i = 0;
    while (i < an && i < bn && a[i] == b[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    note("first difference at byte %zu (cwen %zu bytes, jinja %zu bytes)", i, an, bn);
    note("cwen:  ...%.*s", (int)((an - from) < 120 ? an - from : 120), a + from);
    note("jinja: ...%.*s", (int)((bn - from) < 120 ? bn - from : 120), b + from);
}

/* Renders every case with cwen and Jinja2 from template file tpath. */
static void compare_all(const char *src_root, const char *tpath, json_t *cases,
                        const char *label)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/scripts/render_template.py' --batch '%s' "
             "'%s/tests/data/chat_conversations.json'", src_root, tpath, src_root);
    char *ref_text = run_capture(cmd);
    ok(ref_text != NULL, "%s: render_template.py ran", label);
    if (!ref_text)
        return;
    json_error_t je;
    json_t *ref = json_loads(ref_text, 0, &je);
    free(ref_text);
    ok(json_array_size(ref) == json_array_size(cases), "%s: one reference per case", label);

    char *tsrc = slurp(tpath, NULL);
    struct cw_chat_template t;
    struct cw_err err = {0};
    ok(tsrc && cw_chat_template_init(&t, tsrc, &err) == 0, "%s: template recognised: %s", label,
       err.msg);
    free(tsrc);
    ok(t.is_known, "%s: template fingerprint is a known variant", label);

    size_t n_same = 0, n_err = 0;
    for (size_t i = 0; i < json_array_size(cases) && i < json_array_size(ref); i++) {
        json_t *c = json_array_get(cases, i), *r = json_array_get(ref, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        bool expect_error = json_is_true(json_object_get(c, "expect_error"));
        ok(json_is_true(json_object_get(r, "ok")) == !expect_error, "%s: %s: jinja2 %s", label,
           name, expect_error ? "should raise" : "should render");
        char *cj = json_dumps(c, JSON_COMPACT);
        struct cw_chat_conv_owned conv;
        char *out = NULL;
        size_t out_len = 0;
        cw_err_clear(&err);
        int rc = cw_chat_conv_from_json(&conv, cj, strlen(cj), &err);
        if (rc == 0) {
            rc = cw_chat_render(&t, &conv.conv, &out, &out_len, &err);
            cw_chat_conv_free(&conv);
        }
        free(cj);
        if (json_is_true(json_object_get(r, "ok"))) {
            const char *want = json_string_value(json_object_get(r, "text"));
            size_t want_n = json_string_length(json_object_get(r, "text"));
            bool same = rc == 0 && out_len == want_n && !memcmp(out, want, want_n);
            ok(same, "%s: %s: byte-identical to Jinja2 (%s)", label, name, rc ? err.msg : "differs");
            if (!same && rc == 0)
                show_diff(out, out_len, want, want_n);
            n_same += same;
        } else {
            /* same failure, same words (the message follows "chat template: " or "chat: ") */
            const char *want = json_string_value(json_object_get(r, "error"));
            ok(rc != 0 && want && strstr(err.msg, want), "%s: %s: fails like Jinja2 (\"%s\" vs \"%s\")",
               label, name, rc ? err.msg : "rendered", want ? want : "?");
            n_err += rc != 0;
        }
        free(out);
    }
    note("%s: %zu conversations byte-identical, %zu rejected like Jinja2", label, n_same, n_err);
    json_decref(ref);
}

static void check_refused(const char *path, const char *label, const char *must_mention)
{
    char *src = slurp(path, NULL);
    if (!src) {
        ok(0, "%s: cannot read %s", label, path);
        return;
    }
    struct cw_chat_template t;
    struct cw_err err = {0};
    int rc = cw_chat_template_init(&t, src, &err);
    ok(rc == -1 && err.code == CW_ERR_UNSUPPORTED && strstr(err.msg, must_mention),
       "%s refused naming \"%s\": %s", label, must_mention, err.msg);
    free(src);
}

static void write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

/* Replaces the one occurrence of from with to; NULL when absent. */
static char *replace1(const char *s, const char *from, const char *to)
{
    const char *p = strstr(s, from);
    if (!p)
        return NULL;
    size_t a = (size_t)(p - s), fl = strlen(from), tl = strlen(to), n = strlen(s);
    char *o = malloc(n - fl + tl + 1);
    memcpy(o, s, a);
    memcpy(o + a, to, tl);
    memcpy(o + a + tl, p + fl, n - a - fl + 1);
    return o;
}

static void check_pydumps(void)
{
    static const struct { const char *in, *want; } cases[] = {
        {"{\"a\":1,\"b\":[true,false,null],\"c\":{}}", "{\"a\": 1, \"b\": [true, false, null], \"c\": {}}"},
        {"[1.0,0.1,1e16,1e15,1e-5,0.0001,-0.0,2.5e-300,123456789012345678.0]",
         "[1.0, 0.1, 1e+16, 1000000000000000.0, 1e-05, 0.0001, -0.0, 2.5e-300, 1.2345678901234568e+17]"},
        {"\"\\u001b\\t\\u00e9\\u2028\\\"\"", "\"\\u001b\\t\xc3\xa9\xe2\x80\xa8\\\"\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cw_err err = {0};
        char *s = cw_chat_json_pydumps(cases[i].in, strlen(cases[i].in), &err);
        ok(s && !strcmp(s, cases[i].want), "pydumps %s -> %s (want %s)", cases[i].in, s ? s : err.msg,
           cases[i].want);
        free(s);
    }
}

int main(void)
{
    const char *src_root = test_env("CWEN_SRC", ".");
    const char *oracle = test_env("CWEN_ORACLE_DIR", "/root/.cache/cwen-oracle");
    const char *tmp = test_env("CWEN_TMP", "/tmp");

    if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0) {
        ok(0, "python3-jinja2 is missing: the reference renderer needs it "
              "(apt-get install python3-jinja2)");
        return done();
    }
    check_pydumps();

    char path[2048], sim[2048];
    snprintf(path, sizeof path, "%s/tests/data/chat_conversations.json", src_root);
    json_error_t je;
    json_t *cases = json_load_file(path, 0, &je);
    ok(json_array_size(cases) >= 30, "%s: at least 30 conversations (%zu)", path,
       json_array_size(cases));

    snprintf(path, sizeof path, "%s/llama.cpp/models/templates/Qwen3.5-4B.jinja", oracle);
    compare_all(src_root, path, cases, "qwen3.5");

    /* Qwen3.6: the same template with the preserve_thinking condition. */
    char *base = slurp(path, NULL);
    char *v36 = base ? replace1(base, "{%- if loop.index0 > ns.last_query_index %}",
                                "{%- if (preserve_thinking is defined and preserve_thinking is true) "
                                "or loop.index0 > ns.last_query_index %}")
                     : NULL;
    ok(v36 != NULL, "built the simulated Qwen3.6 template");
    if (v36) {
        snprintf(sim, sizeof sim, "%s/qwen36-sim.jinja", tmp);
        write_file(sim, v36);
        compare_all(src_root, sim, cases, "qwen3.6-sim");
        struct cw_chat_template t;
        struct cw_err err = {0};
        ok(cw_chat_template_init(&t, v36, &err) == 0 && t.has_preserve_thinking &&
           !strcmp(t.variant, "qwen3.6"), "simulated Qwen3.6 detected as such");

        /* a template that uses the switch some other way is refused */
        char *odd = replace1(v36, "preserve_thinking is defined and preserve_thinking is true",
                             "preserve_thinking | default(true)");
        snprintf(sim, sizeof sim, "%s/qwen36-odd.jinja", tmp);
        write_file(sim, odd ? odd : "");
        check_refused(sim, "preserve_thinking with default(true)", "preserve_thinking");
        free(odd);
        free(v36);
    }
    /* a cosmetic edit keeps recognition but drops the fingerprint match */
    char *edited = base ? replace1(base, "{%- if not messages %}", "{#- edited -#}{%- if not messages %}") : NULL;
    if (edited) {
        struct cw_chat_template t;
        struct cw_err err = {0};
        ok(cw_chat_template_init(&t, edited, &err) == 0 && !t.is_known,
           "edited template recognised, not fingerprint-known");
        char *broken = replace1(edited, "'\\n</parameter>\\n'", "'</parameter>\\n'");
        ok(broken && cw_chat_template_init(&t, broken, &err) == -1 && strstr(err.msg, "parameter close"),
           "changed parameter close refused: %s", err.msg);
        free(broken);
        free(edited);
    }
    free(base);

    snprintf(path, sizeof path, "%s/llama.cpp/models/templates/Qwen3-Coder.jinja", oracle);
    check_refused(path, "Qwen3-Coder", "unsupported template");
    snprintf(path, sizeof path, "%s/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja", oracle);
    check_refused(path, "Qwen3-0.6B", "unsupported template");
    snprintf(path, sizeof path, "%s/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja", oracle);
    check_refused(path, "Qwen2.5", "unsupported template");
    {
        struct cw_chat_template t;
        struct cw_err err = {0};
        ok(cw_chat_template_init(&t, "", &err) == -1 && strstr(err.msg, "no chat template"),
           "empty template refused: %s", err.msg);
    }
    json_decref(cases);
    return done();
}
