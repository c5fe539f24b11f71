/* test_tokenizer.c — the tokenizer against llama.cpp's own test vectors
 * (models/ggml-vocab-{qwen35,qwen2}.gguf with .inp/.out, written by
 * llama.cpp's tests/test-tokenizer-0 with add_special=false,
 * parse_special=false), plus round trips and streaming detokenisation on
 * the same inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/tokenizer.h"
#include "test.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

static void check_stream(const struct cw_tokenizer *t, const int32_t *ids, size_t n,
                         const char *name, int idx)
{
    size_t want_n = cw_detokenize(t, ids, n, false, NULL, 0);
    char *want = malloc(want_n + 1), *got = malloc(want_n + 64);
    cw_detokenize(t, ids, n, false, want, want_n);
    struct cw_detok d = {.special = false};
    size_t o = 0;
    int ok_split = 1;
    for (size_t i = 0; i < n; i++) {
        int k = cw_detok_push(&d, t, ids[i], got + o, want_n + 64 - o);
        if (k < 0) {
            ok_split = 0;
            break;
        }
        /* every chunk ends on a sequence boundary unless it is invalid UTF-8 */
        if (k > 0) {
            unsigned char last = (unsigned char)got[o + k - 1];
            if (last >= 0xC0 && last < 0xF8)
                ok_split = 0;
        }
        o += (size_t)k;
    }
    o += (size_t)cw_detok_flush(&d, got + o, 64);
    ok(ok_split && o == want_n && memcmp(got, want, o) == 0,
       "%s case %d: streaming detokenisation equals detokenize", name, idx);
    free(want);
    free(got);
}

/* The token of one raw byte: its GPT-2 byte-level form (printable Latin-1
 * stands for itself, other bytes are moved to U+0100 upwards in order). */
static int32_t byte_token(const struct cw_tokenizer *t, unsigned b)
{
    unsigned cp = 256;
    for (unsigned x = 0; x < b; x++)
        cp += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        cp = b;
    char z[4] = {0};
    if (cp < 0x80) {
        z[0] = (char)cp;
    } else {
        z[0] = (char)(0xC0 | (cp >> 6));
        z[1] = (char)(0x80 | (cp & 0x3F));
    }
    return cw_token_id(t, z);
}

static void run_vocab(const char *dir, const char *name, enum cw_tok_pre pre)
{
    char path[4096], pin[4200], pout[4200];
    snprintf(path, sizeof path, "%s/llama.cpp/models/%s", dir, name);
    snprintf(pin, sizeof pin, "%s.inp", path);
    snprintf(pout, sizeof pout, "%s.out", path);
    size_t nin, nout;
    char *inp = slurp(pin, &nin), *outp = slurp(pout, &nout);
    struct cw_gguf g;
    struct cw_err err = {0};
    if (!inp || !outp || cw_gguf_open(&g, path, &err) < 0) {
        skip("%s: oracle vocab files absent (%s)", name, err.msg);
        free(inp);
        free(outp);
        return;
    }
    struct cw_tokenizer t;
    int rc = cw_tokenizer_load(&t, &g, &err);
    cw_gguf_close(&g);
    ok(rc == 0, "%s: load: %s", name, err.msg);
    if (rc) {
        free(inp);
        free(outp);
        return;
    }
    ok(t.pre == pre, "%s: pre-tokenizer type", name);
    struct cw_tokens toks = {0};
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = inp, *line = outp;
    int idx = 0, pass = 0;
    for (;;) {
        char *e = strstr(p, sep);
        if (!e)
            break;
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = 0;
        /* expected ids */
        int32_t want[4096];
        size_t nw = 0;
        for (char *q = line; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q)
                break;
            want[nw++] = (int32_t)v;
            q = end;
        }
        rc = cw_tokenize(&t, p, (size_t)(e - p), false, &toks, &err);
        int same = rc == 0 && toks.n == nw && (nw == 0 || !memcmp(toks.ids, want, nw * 4));
        pass += same;
        ok(same, "%s case %d (%zu bytes): %zu ids, want %zu", name, idx, (size_t)(e - p),
           toks.n, nw);
        /* detokenisation gives the input back (the vectors are valid UTF-8) */
        size_t need = cw_detokenize(&t, toks.ids, toks.n, false, NULL, 0);
        char *back = malloc(need + 1);
        cw_detokenize(&t, toks.ids, toks.n, false, back, need);
        ok(need == (size_t)(e - p) && memcmp(back, p, need) == 0, "%s case %d: round trip",
           name, idx);
        free(back);
        check_stream(&t, toks.ids, toks.n, name, idx);
        idx++;
        p = e + strlen(sep);
        line = nl + 1;
    }
    note("%s: %d/%d vectors match llama.cpp", name, pass, idx);
    ok(idx >= 40, "%s: read %d vectors", name, idx);

    /* special ids and lookups come from the file */
    int32_t im_end = cw_token_id(&t, "<|im_end|>"), eot = cw_token_id(&t, "<|endoftext|>");
    ok(im_end > 0 && eot > 0, "%s: <|im_end|> %d, <|endoftext|> %d", name, im_end, eot);
    ok(cw_token_is_eog(&t, im_end) && cw_token_is_eog(&t, eot), "%s: im_end/endoftext are EOG", name);
    ok(cw_token_id(&t, "<|no such token|>") == -1, "%s: absent token gives -1", name);
    rc = cw_tokenize(&t, "a<|im_end|>b", 12, true, &toks, &err);
    ok(rc == 0 && toks.n == 3 && toks.ids[1] == im_end, "%s: parse_special splits <|im_end|>", name);
    rc = cw_tokenize(&t, "a<|im_end|>b", 12, false, &toks, &err);
    ok(rc == 0 && toks.n > 3, "%s: without parse_special <|im_end|> is text (%zu ids)", name, toks.n);
    size_t l;
    cw_token_piece(&t, im_end, false, &l);
    ok(l == 0, "%s: control token piece is empty unless special", name);
    const char *pc = cw_token_piece(&t, im_end, true, &l);
    ok(l == 10 && !memcmp(pc, "<|im_end|>", 10), "%s: control token piece with special", name);

    /* streaming holds a split sequence: "€" is E2 82 AC; feed byte tokens */
    const char *euro = "\xe2\x82\xac";
    int32_t bid[3];
    for (int i = 0; i < 3; i++)
        bid[i] = byte_token(&t, (unsigned char)euro[i]);
    struct cw_detok d = {0};
    char buf[16];
    int n0 = cw_detok_push(&d, &t, bid[0], buf, sizeof buf);
    int n1 = cw_detok_push(&d, &t, bid[1], buf, sizeof buf);
    int n2 = cw_detok_push(&d, &t, bid[2], buf, sizeof buf);
    ok(n0 == 0 && n1 == 0 && n2 == 3 && !memcmp(buf, euro, 3), "%s: stream holds E2 82 until AC",
       name);
    n0 = cw_detok_push(&d, &t, bid[0], buf, sizeof buf);
    cw_tokenize(&t, "x", 1, false, &toks, &err);
    n1 = cw_detok_push(&d, &t, toks.ids[0], buf, sizeof buf);
    ok(n0 == 0 && n1 == 2 && buf[0] == '\xe2' && buf[1] == 'x',
       "%s: a lead byte that is never completed passes through", name);

    cw_tokens_free(&toks);
    cw_tokenizer_free(&t);
    free(inp);
    free(outp);
}

int main(void)
{
    const char *dir = test_env("CWEN_ORACLE_DIR", NULL);
    if (!dir) {
        skip("CWEN_ORACLE_DIR not set: llama.cpp vocab vectors unavailable");
        return done();
    }
    run_vocab(dir, "ggml-vocab-qwen35.gguf", CW_TOK_PRE_QWEN35);
    run_vocab(dir, "ggml-vocab-qwen2.gguf", CW_TOK_PRE_QWEN2);
    return done();
}
