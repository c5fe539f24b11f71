/* test_tokenizer_oracle.c — cwen's tokenizer against llama.cpp's
 * (libllama, vocab_only) on a large corpus generated here deterministically:
 * code, prose with contractions in mixed case, CJK, emoji (ZWJ sequences,
 * flags, skin tones), combining marks, Arabic/Hindi/Thai, whitespace runs of
 * every kind, digit runs, special tokens embedded in text, random code
 * points and random bytes (invalid UTF-8). Compares ids with parse_special
 * off and on, detokenisation, every token's piece and attributes, the
 * special ids and the EOG set, and prints throughput of both (MB/s). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "llama.h"
#include "model/tokenizer.h"
#include "oracle.h"
#include "../test.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

struct buf {
    char *p;
    size_t n, cap;
};
static void put(struct buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(struct buf *b, const char *s) { put(b, s, strlen(s)); }
static void put_cp(struct buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    put(b, u, n);
}

static const char *const POOL[] = {
    /* code */
    "int main(int argc, char **argv) {\n\treturn argc > 1 ? atoi(argv[1]) : 0;\n}\n",
    "def f(x):\n    return [i**2 for i in range(x) if i % 3 == 0]  # squares\n",
    "const add = (a, b) => a + b;\nconsole.log(`sum=${add(2, 40)}`);\r\n",
    "fn main() { let v: Vec<u32> = (0..10).collect(); println!(\"{:?}\", v); }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "#!/bin/sh\nfor f in *.txt; do wc -l \"$f\"; done 2>&1 | sort -n\n",
    "    if (x != NULL && x->next) {\n        x = x->next;\n    }\n",
    "<html><body class=\"main\"><p>Hello &amp; welcome</p></body></html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    /* prose, contractions in mixed case */
    "I'm sure you'RE right, but they'LL say it'S what we'VE DONE'T.",
    "She'd've known. WE'D GO. it's, It'S, IT's, 'tis the season's end.",
    "Hello world! How are you doing today?  Fine, thanks...",
    "The quick brown fox jumps over the lazy dog 1234567890 times.",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ''s '''",
    /* CJK */
    "你好，世界！这是一个测试。我们今天去公园散步吧。",
    "こんにちは、世界。カタカナとひらがな、漢字を混ぜる。",
    "안녕하세요 세계! 한국어 문장입니다.",
    "中文English混合mixed文本123数字",
    /* emoji */
    "😀😃😄 👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 🇺🇸🇯🇵🇩🇪 flags, 👍🏽 thumbs, 1️⃣ keycap",
    "❤️🔥✨🎉🙏 🧑🏿‍💻 👩‍❤️‍💋‍👨",
    /* combining marks */
    "e\xcc\x81 a\xcc\x88\xcc\x84 n\xcc\x83o Z\xcd\xa7\xcc\x91\xcc\x93\xcc\xa4\xcd\x94" "a\xcc\x88",
    "\xcc\x81\xcc\x82 leading marks, x\xe2\x83\x9d enclosing",
    "caf\xc3\xa9 vs cafe\xcc\x81, na\xc3\xafve vs nai\xcc\x88ve",
    /* Arabic, Hindi, Thai */
    "مرحبا بالعالم! هذا اختبار ١٢٣.",
    "नमस्ते दुनिया। यह एक परीक्षण है १२३।",
    "สวัสดีชาวโลก นี่คือการทดสอบ ๑๒๓",
    /* digits */
    "3.14159265358979 2,718 1e-9 0x1F 007 ①②③ ¹²³ ½",
    "12345678901234567890123456789012345678901234567890",
    /* special tokens in text */
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|endoftext|><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    "<|im_end <|im_end| <<|im_end|>> <|im_start|><|im_start|>",
    "<tool_response>ok</tool_response><|file_sep|><|repo_name|>",
};
static const char *const SPACES[] = {" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n",
    "\r\n\r\n", "\r", " \n", "\n ", " \t\n", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\x89",
    "\xc2\x85", "\x0b", "\x0c", "\xe2\x80\xa8", "    \n    ", "\xc2\xa0\xc2\xa0 "};

static void gen_doc(struct buf *b)
{
    int parts = 1 + (int)(rnd() % 24);
    for (int i = 0; i < parts; i++) {
        uint32_t r = rnd() % 100;
        if (r < 45) {
            puts_(b, POOL[rnd() % (sizeof POOL / sizeof POOL[0])]);
        } else if (r < 65) {
            puts_(b, SPACES[rnd() % (sizeof SPACES / sizeof SPACES[0])]);
        } else if (r < 72) { /* digits run */
            int n = 1 + (int)(rnd() % 12);
            for (int k = 0; k < n; k++)
                put_cp(b, '0' + rnd() % 10);
        } else if (r < 82) { /* random code points from mixed ranges */
            static const uint32_t lo[] = {0x20, 0xA0, 0x300, 0x370, 0x400, 0x590, 0x600, 0x900,
                0xE00, 0x1100, 0x2000, 0x2190, 0x3000, 0x4E00, 0xAC00, 0xE000, 0xFE00, 0xFFF0,
                0x1F300, 0x1F600, 0x20000, 0xE0000, 0x10FFF0, 0xD800};
            int n = 1 + (int)(rnd() % 8);
            for (int k = 0; k < n; k++) {
                uint32_t base = lo[rnd() % (sizeof lo / sizeof lo[0])];
                put_cp(b, base + rnd() % 0x100 % (base == 0x10FFF0 ? 16 : 0x100));
            }
        } else if (r < 90) { /* random bytes: invalid UTF-8 */
            int n = 1 + (int)(rnd() % 6);
            for (int k = 0; k < n; k++) {
                unsigned char c = (unsigned char)rnd();
                if (c >= 0xF4 && c <= 0xF7) /* sequences past U+10FFFF: see note */
                    c = 0xF0;
                put(b, (const char *)&c, 1);
            }
        } else { /* ASCII punctuation and letters soup */
            static const char soup[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ aZ09sStTmMdD'";
            int n = 1 + (int)(rnd() % 10);
            for (int k = 0; k < n; k++)
                put(b, &soup[rnd() % (sizeof soup - 1)], 1);
        }
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int32_t *ref_tokenize(const struct llama_vocab *v, const char *s, size_t n, bool special,
                             int32_t *n_out)
{
    int32_t cap = (int32_t)n + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int32_t k = llama_tokenize(v, s, (int32_t)n, ids, cap, false, special);
    if (k < 0) {
        cap = -k;
        ids = realloc(ids, (size_t)cap * sizeof *ids);
        k = llama_tokenize(v, s, (int32_t)n, ids, cap, false, special);
    }
    *n_out = k;
    return ids;
}

static void hexdump(const char *s, size_t n)
{
    printf("#   text (%zu bytes):", n);
    for (size_t i = 0; i < n && i < 200; i++)
        printf(" %02x", (unsigned char)s[i]);
    printf("\n");
}

static void run(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", oracle_src_path(name));
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    ok(model != NULL, "%s: llama.cpp loads the vocab", name);
    if (!model)
        return;
    const struct llama_vocab *v = llama_model_get_vocab(model);
    struct cw_gguf g;
    struct cw_err err = {0};
    struct cw_tokenizer t;
    int rc = cw_gguf_open(&g, path, &err);
    if (rc == 0) {
        rc = cw_tokenizer_load(&t, &g, &err);
        cw_gguf_close(&g);
    }
    ok(rc == 0, "%s: cwen loads the vocab: %s", name, err.msg);
    if (rc) {
        llama_model_free(model);
        return;
    }

    /* vocabulary facts */
    int32_t nv = llama_vocab_n_tokens(v);
    ok(nv == t.n_vocab, "%s: n_vocab %d vs %d", name, t.n_vocab, nv);
    ok(t.eos == llama_vocab_eos(v) && t.eot == llama_vocab_eot(v) && t.bos == llama_vocab_bos(v) &&
           t.pad == llama_vocab_pad(v) && t.fim_pad == llama_vocab_fim_pad(v),
       "%s: special ids eos %d/%d eot %d/%d bos %d/%d pad %d/%d fim_pad %d/%d", name, t.eos,
       llama_vocab_eos(v), t.eot, llama_vocab_eot(v), t.bos, llama_vocab_bos(v), t.pad,
       llama_vocab_pad(v), t.fim_pad, llama_vocab_fim_pad(v));
    int bad_attr = 0, bad_eog = 0, bad_piece = 0, n_eog = 0;
    char pbuf[1024];
    for (int32_t id = 0; id < nv; id++) {
        if ((int)llama_vocab_get_attr(v, id) != (int)cw_token_attr(&t, id) && bad_attr++ < 3)
            note("attr of %d: llama %d cwen %d", id, (int)llama_vocab_get_attr(v, id),
                 (int)cw_token_attr(&t, id));
        n_eog += llama_vocab_is_eog(v, id);
        if (llama_vocab_is_eog(v, id) != cw_token_is_eog(&t, id))
            bad_eog++;
        for (int sp = 0; sp < 2; sp++) {
            int32_t k = llama_token_to_piece(v, id, pbuf, sizeof pbuf, 0, sp);
            size_t l;
            const char *p = cw_token_piece(&t, id, sp, &l);
            if (k < 0 || (size_t)k != l || memcmp(p, pbuf, l))
                bad_piece++;
        }
    }
    ok(bad_attr == 0, "%s: token attributes agree (%d differ)", name, bad_attr);
    ok(bad_eog == 0 && n_eog == t.n_eog, "%s: EOG sets agree (%d ids, %d differ)", name, n_eog,
       bad_eog);
    ok(bad_piece == 0, "%s: every token's piece agrees, special on and off (%d differ)", name,
       bad_piece);

    /* the corpus */
    rng_state = 0x9E3779B97F4A7C15ull;
    struct cw_tokens toks = {0};
    int n_docs = 2000, bad_ids[2] = {0, 0}, bad_detok[2] = {0, 0};
    size_t bytes = 0, n_ids = 0;
    struct buf all = {0};
    char *d1 = NULL, *d2 = NULL;
    size_t dcap = 0;
    for (int i = 0; i < n_docs; i++) {
        struct buf b = {0};
        gen_doc(&b);
        bytes += b.n;
        if (all.n < (1u << 20))
            put(&all, b.p, b.n);
        for (int sp = 0; sp < 2; sp++) {
            int32_t nr;
            int32_t *ref = ref_tokenize(v, b.p, b.n, sp, &nr);
            cw_tokenize(&t, b.p, b.n, sp, &toks, &err);
            n_ids += toks.n;
            if (nr < 0 || toks.n != (size_t)nr || memcmp(ref, toks.ids, toks.n * 4)) {
                if (bad_ids[sp]++ < 3) {
                    note("%s doc %d parse_special=%d: cwen %zu ids, llama %d", name, i, sp, toks.n,
                         nr);
                    hexdump(b.p, b.n);
                    for (size_t k = 0; k < toks.n && (int)k < nr; k++)
                        if (toks.ids[k] != ref[k]) {
                            note("  first difference at %zu: cwen %d llama %d", k, toks.ids[k],
                                 ref[k]);
                            break;
                        }
                }
            } else {
                size_t need = cw_detokenize(&t, ref, (size_t)nr, sp, NULL, 0);
                if (need + 1 > dcap) {
                    dcap = need * 2 + 16;
                    d1 = realloc(d1, dcap);
                    d2 = realloc(d2, dcap);
                }
                cw_detokenize(&t, ref, (size_t)nr, sp, d1, need);
                int32_t k = llama_detokenize(v, ref, nr, d2, (int32_t)dcap, false, sp);
                if (k < 0 || (size_t)k != need || memcmp(d1, d2, need))
                    bad_detok[sp]++;
            }
            free(ref);
        }
        free(b.p);
    }
    note("%s: corpus %d docs, %zu bytes, %zu ids", name, n_docs, bytes, n_ids);
    for (int sp = 0; sp < 2; sp++) {
        ok(bad_ids[sp] == 0, "%s: parse_special=%d: ids agree on %d/%d docs", name, sp,
           n_docs - bad_ids[sp], n_docs);
        ok(bad_detok[sp] == 0, "%s: parse_special=%d: detokenize agrees (%d differ)", name, sp,
           bad_detok[sp]);
    }

    /* throughput on the same 1 MB text (the corpus, repeated), same run */
    while (all.n < (1u << 20)) {
        size_t k = all.n < (1u << 20) - all.n ? all.n : (1u << 20) - all.n;
        char *copy = malloc(k);
        memcpy(copy, all.p, k);
        put(&all, copy, k);
        free(copy);
    }
    int32_t nr;
    double t0 = now();
    int32_t *ref = ref_tokenize(v, all.p, all.n, false, &nr);
    double t1 = now();
    cw_tokenize(&t, all.p, all.n, false, &toks, &err);
    double t2 = now();
    ok(nr >= 0 && toks.n == (size_t)nr && !memcmp(ref, toks.ids, toks.n * 4),
       "%s: 1 MB text: ids agree (%zu)", name, toks.n);
    double mb = (double)all.n / 1e6;
    note("%s: throughput on %.2f MB: cwen %.1f MB/s (%.3f s), llama.cpp %.1f MB/s (%.3f s)", name,
         mb, mb / (t2 - t1), t2 - t1, mb / (t1 - t0), t1 - t0);
#if defined(__SANITIZE_ADDRESS__) || defined(__has_feature)
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
    ok(t2 - t1 < 1.0, "%s: 1 MB tokenizes in under a second", name);
#endif
    free(ref);
    free(all.p);
    free(d1);
    free(d2);
    cw_tokens_free(&toks);
    cw_tokenizer_free(&t);
    llama_model_free(model);
}

int main(void)
{
    oracle_init();
    run("models/ggml-vocab-qwen35.gguf");
    run("models/ggml-vocab-qwen2.gguf");
    return done();
}
