/* fuzz_tokenizer.c — libFuzzer target: tokenizing arbitrary bytes (with and
 * without parse_special) never crashes, every id is in range, and for valid
 * UTF-8 input detokenize(tokenize(x)) == x. Loads the qwen35 test vocab from
 * $CWEN_ORACLE_DIR/llama.cpp/models once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

static struct cw_tokenizer tok;
static struct cw_tokens out;
static int loaded;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[4096];
    const char *dir = getenv("CWEN_ORACLE_DIR");
    snprintf(path, sizeof path, "%s/llama.cpp/models/ggml-vocab-qwen35.gguf",
             dir ? dir : ".");
    struct cw_gguf g;
    struct cw_err err = {0};
    if (cw_gguf_open(&g, path, &err) < 0 || cw_tokenizer_load(&tok, &g, &err) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        exit(1);
    }
    cw_gguf_close(&g);
    loaded = 1;
    return 0;
}

static int valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = cw_utf8_decode(s + i, n - i, &l);
        if (cp == CW_UCP_REPLACEMENT && !(l == 3 && s[i] == 0xEF))
            return 0;
        uint8_t re[4];
        if (cw_utf8_encode(cp, re) != l || (cp >= 0xD800 && cp < 0xE000))
            return 0; /* overlong or surrogate */
        i += l;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cw_err err;
    for (int sp = 0; sp < 2; sp++) {
        if (cw_tokenize(&tok, (const char *)data, size, sp, &out, &err) < 0)
            abort();
        for (size_t i = 0; i < out.n; i++)
            if (out.ids[i] < 0 || out.ids[i] >= tok.n_vocab)
                abort();
        if (valid_utf8(data, size)) {
            size_t n = cw_detokenize(&tok, out.ids, out.n, sp, NULL, 0);
            char *back = malloc(n + 1);
            cw_detokenize(&tok, out.ids, out.n, sp, back, n);
            if (n != size || memcmp(back, data, size))
                abort();
            free(back);
        }
    }
    return 0;
}
