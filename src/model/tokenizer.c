/* tokenizer.c — byte-level BPE for Qwen vocabularies (see tokenizer.h).
 *
 * Owns loading the vocabulary and merges into hash tables keyed by token
 * text and by (left id, right id), the qwen2/qwen35 pre-tokenizer split, the
 * BPE merge loop, special-token partitioning and token pieces. Behaviour
 * follows llama.cpp's llama-vocab.cpp and unicode.cpp (facts, not code):
 * the split is llama.cpp's hand-written matcher, not a general regex engine,
 * and its quirks (U+FFFD for bad bytes, per-fragment splitting) are kept. */
#include "base/grow.h"
#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "model/unicode.h"

/* ---- hashing ------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
}

static const char *tok_str(const struct cw_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

static int32_t str_find(const struct cw_tokenizer *t, const char *s, size_t n)
{
    uint32_t mask = t->str_cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t e = t->str_hash[i];
        if (!e)
            return -1;
        size_t l;
        const char *z = tok_str(t, (int32_t)(e - 1), &l);
        if (l == n && memcmp(z, s, n) == 0)
            return (int32_t)(e - 1);
    }
}

static int merge_find(const struct cw_tokenizer *t, int32_t a, int32_t b, uint32_t *rank,
                      int32_t *res)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint32_t mask = t->merge_cap - 1;
    for (uint32_t i = (uint32_t)hash_pair(key) & mask;; i = (i + 1) & mask) {
        uint64_t k = t->merge_key[i];
        if (k == key) {
            *rank = (uint32_t)(t->merge_val[i] >> 32);
            *res = (int32_t)(uint32_t)t->merge_val[i];
            return 1;
        }
        if (!k)
            return 0;
    }
}

/* ---- loading ------------------------------------------------------------- */

/* Growable state used only while loading. */
struct loader {
    struct cw_tokenizer *t;
    size_t text_len, text_cap; /* bytes in t->text */
    size_t ids_cap;            /* entries in t->text_off */
};

static int str_insert_slot(struct cw_tokenizer *t, int32_t id)
{
    size_t n;
    const char *s = tok_str(t, id, &n);
    uint32_t mask = t->str_cap - 1;
    uint32_t i = (uint32_t)hash_bytes(s, n) & mask;
    while (t->str_hash[i])
        i = (i + 1) & mask;
    t->str_hash[i] = (uint32_t)id + 1;
    return 0;
}

static int str_grow(struct cw_tokenizer *t, uint32_t cap)
{
    uint32_t *old = t->str_hash;
    t->str_hash = calloc(cap, sizeof *t->str_hash);
    if (!t->str_hash) {
        t->str_hash = old;
        return -1;
    }
    t->str_cap = cap;
    free(old);
    for (int32_t id = 0; id < t->n_ids; id++)
        if (t->text_off[id + 1] > t->text_off[id] || id < t->n_vocab) {
            /* later duplicates win (as llama.cpp's token_to_id[word] = i) */
            size_t n;
            const char *s = tok_str(t, id, &n);
            int32_t prev = str_find(t, s, n);
            if (prev < 0) {
                str_insert_slot(t, id);
            } else {
                uint32_t mask = t->str_cap - 1;
                for (uint32_t i = (uint32_t)hash_bytes(s, n) & mask;; i = (i + 1) & mask)
                    if (t->str_hash[i] == (uint32_t)prev + 1) {
                        t->str_hash[i] = (uint32_t)id + 1;
                        break;
                    }
            }
        }
    return 0;
}

/* Appends a string as a new id (no hashing). */
static int32_t add_string(struct loader *L, const char *s, size_t n)
{
    struct cw_tokenizer *t = L->t;
    if (L->text_len + n > L->text_cap) {
        size_t cap = (L->text_cap ? L->text_cap * 2 : 1 << 16);
        while (cap < L->text_len + n)
            cap *= 2;
        char *p = realloc(t->text, cap);
        if (!p)
            return -1;
        t->text = p;
        L->text_cap = cap;
    }
    if ((size_t)t->n_ids + 2 > L->ids_cap) {
        size_t cap = L->ids_cap ? L->ids_cap * 2 : 1024;
        uint32_t *p = realloc(t->text_off, cap * sizeof *p);
        if (!p)
            return -1;
        t->text_off = p;
        L->ids_cap = cap;
    }
    if (L->text_len + n > UINT32_MAX || t->n_ids >= INT32_MAX - 1)
        return -1;
    memcpy(t->text + L->text_len, s, n);
    t->text_off[t->n_ids] = (uint32_t)L->text_len;
    L->text_len += n;
    t->text_off[t->n_ids + 1] = (uint32_t)L->text_len;
    return t->n_ids++;
}

/* Id of string s, adding a virtual id (>= n_vocab) when it is not a token:
 * merges whose parts or result are missing from the vocabulary still take
 * part in merging, as llama.cpp merges by string. */
static int32_t intern(struct loader *L, const char *s, size_t n)
{
    struct cw_tokenizer *t = L->t;
    int32_t id = str_find(t, s, n);
    if (id >= 0)
        return id;
    if ((uint64_t)(t->n_ids + 1) * 2 > t->str_cap && str_grow(t, t->str_cap * 2) < 0)
        return -1;
    id = add_string(L, s, n);
    if (id >= 0)
        str_insert_slot(t, id);
    return id;
}

/* GPT-2's byte -> code point map: printable Latin-1 bytes stand for
 * themselves, the rest are moved to U+0100 upwards in byte order. */
static void byte_to_cp_table(uint32_t map[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        map[b] = keep ? (uint32_t)b : next++;
    }
}

static int find_text_id(const struct cw_tokenizer *t, const char *z)
{
    int32_t id = str_find(t, z, strlen(z));
    return id >= 0 && id < t->n_vocab ? id : -1;
}

/* First present token among candidate texts (llama.cpp scans its hash map,
 * whose order is unspecified; we take the list order). */
static int32_t detect(struct cw_tokenizer *t, const char *const *texts)
{
    for (; *texts; texts++) {
        int32_t id = find_text_id(t, *texts);
        if (id >= 0) {
            t->attr[id] |= CW_TOK_CONTROL;
            return id;
        }
    }
    return -1;
}

static const char *const EOT_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>", NULL};
static const char *const EOM_TEXTS[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_TEXTS[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>",
    "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const FIM_SUF_TEXTS[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>",
    "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const FIM_MID_TEXTS[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>",
    "<|code_middle|>", "<|middle|>", NULL};
static const char *const FIM_PAD_TEXTS[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
    "[PAD]", NULL};
static const char *const FIM_REP_TEXTS[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<REPO>", "<reponame>", NULL};
static const char *const FIM_SEP_TEXTS[] = {"<|file_sep|>", "<fim-sep>", "<fim_sep>",
    "<SEP>", NULL};
/* Texts llama.cpp treats as end of generation whatever the keys say. */
static const char *const EOG_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>",
    "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>",
    "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

static void eog_add(struct cw_tokenizer *t, int32_t id)
{
    if (id < 0)
        return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    if (t->n_eog < CW_TOK_MAX_EOG)
        t->eog[t->n_eog++] = id;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int get_id(const struct cw_gguf *g, const char *key, int32_t n_vocab, int32_t *id,
                  struct cw_err *err)
{
    if (!cw_gguf_find_kv(g, key))
        return 0;
    uint32_t v;
    if (cw_gguf_get_u32(g, key, &v, err) < 0)
        return -1;
    if (v < (uint32_t)n_vocab) /* out of range: llama.cpp keeps the default */
        *id = (int32_t)v;
    return 0;
}

/* Decodes a byte-encoded token text back to bytes (llama_decode_text):
 * code points outside the byte map become "[UNK_BYTE_0x<hex><text>]". */
static size_t decode_text(const char *s, size_t n, const int16_t *cp_to_byte, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = cw_utf8_decode((const uint8_t *)s + i, n - i, &l);
        i += l;
        if (cp < 0x144 && cp_to_byte[cp] >= 0) {
            out[o++] = (char)cp_to_byte[cp];
            continue;
        }
        uint8_t u[4];
        size_t ul = cw_utf8_encode(cp, u);
        memcpy(out + o, "[UNK_BYTE_0x", 12);
        o += 12;
        for (size_t k = 0; k < ul; k++) {
            static const char hex[] = "0123456789abcdef";
            out[o++] = hex[u[k] >> 4];
            out[o++] = hex[u[k] & 15];
        }
        memcpy(out + o, s, n);
        o += n;
        out[o++] = ']';
    }
    return o;
}

static int build_pieces(struct cw_tokenizer *t, const uint32_t byte_cp[256], struct cw_err *err)
{
    int16_t cp_to_byte[0x144];
    for (int i = 0; i < 0x144; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_to_byte[byte_cp[b]] = (int16_t)b;
    /* worst case per input byte: "[UNK_BYTE_0x" + 2 hex + the whole text + "]" */
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n = t->text_off[id + 1] - t->text_off[id];
        total += n + n * (16 + n);
    }
    t->piece = malloc(total ? total : 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off)
        return cw_errf(err, CW_ERR_NOMEM, "tokenizer: out of memory for pieces");
    size_t o = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->piece_off[id] = (uint32_t)o;
        size_t n;
        const char *s = tok_str(t, id, &n);
        uint8_t a = t->attr[id];
        if (a & (CW_TOK_CONTROL | CW_TOK_UNKNOWN | CW_TOK_USER_DEFINED)) {
            memcpy(t->piece + o, s, n);
            o += n;
        } else if (a & CW_TOK_NORMAL) {
            o += decode_text(s, n, cp_to_byte, t->piece + o);
        } else if (a & CW_TOK_BYTE) { /* "<0xXX>" */
            if (n >= 5)
                t->piece[o++] = (char)strtol((char[3]){s[3], s[4], 0}, NULL, 16);
        }
        if (o > UINT32_MAX)
            return cw_errf(err, CW_ERR_UNSUPPORTED, "tokenizer: pieces exceed 4 GiB");
    }
    t->piece_off[t->n_vocab] = (uint32_t)o;
    char *p = realloc(t->piece, o ? o : 1);
    if (p)
        t->piece = p;
    return 0;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct cw_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

int cw_tokenizer_load(struct cw_tokenizer *t, const struct cw_gguf *g, struct cw_err *err)
{
    struct loader L = {0};
    struct cw_gguf_str s;
    memset(t, 0, sizeof *t);
    L.t = t;

    if (cw_gguf_get_str(g, "tokenizer.ggml.model", &s, err) < 0)
        goto fail;
    if (!cw_gguf_str_eq(s, "gpt2")) {
        char buf[64];
        cw_errf(err, CW_ERR_UNSUPPORTED, "tokenizer: %s: model '%s' is not supported (gpt2 only)",
                g->path, cw_gguf_str_copy(s, buf, sizeof buf));
        goto fail;
    }
    if (cw_gguf_get_str(g, "tokenizer.ggml.pre", &s, err) < 0)
        goto fail;
    if (cw_gguf_str_eq(s, "qwen35")) {
        t->pre = CW_TOK_PRE_QWEN35;
    } else if (cw_gguf_str_eq(s, "qwen2") || cw_gguf_str_eq(s, "deepseek-r1-qwen") ||
               cw_gguf_str_eq(s, "kormo") || cw_gguf_str_eq(s, "f2llmv2")) {
        t->pre = CW_TOK_PRE_QWEN2;
    } else {
        char buf[64];
        cw_errf(err, CW_ERR_UNSUPPORTED, "tokenizer: %s: pre-tokenizer '%s' is not supported",
                g->path, cw_gguf_str_copy(s, buf, sizeof buf));
        goto fail;
    }

    const struct cw_gguf_kv *kv_tok = cw_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const struct cw_gguf_kv *kv_type = cw_gguf_find_kv(g, "tokenizer.ggml.token_type");
    const struct cw_gguf_kv *kv_merges = cw_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (!kv_tok || kv_tok->value.type != CW_GGUF_ARRAY || kv_tok->value.arr.type != CW_GGUF_STRING) {
        cw_errf(err, CW_ERR_FORMAT, "tokenizer: %s: tokenizer.ggml.tokens missing or not strings",
                g->path);
        goto fail;
    }
    if (!kv_merges || kv_merges->value.type != CW_GGUF_ARRAY ||
        kv_merges->value.arr.type != CW_GGUF_STRING) {
        cw_errf(err, CW_ERR_FORMAT, "tokenizer: %s: tokenizer.ggml.merges missing or not strings",
                g->path);
        goto fail;
    }
    uint64_t nv = kv_tok->value.arr.n, n_merges = kv_merges->value.arr.n;
    if (nv == 0 || nv > (1u << 30)) {
        cw_errf(err, CW_ERR_FORMAT, "tokenizer: %s: bad vocabulary size %llu", g->path,
                (unsigned long long)nv);
        goto fail;
    }
    if (kv_type && (kv_type->value.type != CW_GGUF_ARRAY || kv_type->value.arr.type != CW_GGUF_I32 ||
                    kv_type->value.arr.n < nv)) {
        cw_errf(err, CW_ERR_FORMAT, "tokenizer: %s: tokenizer.ggml.token_type is not i32[%llu]",
                g->path, (unsigned long long)nv);
        goto fail;
    }
    t->n_vocab = (int32_t)nv;
    t->attr = calloc(nv, 1);
    t->str_cap = 1024;
    while (t->str_cap < nv * 2 + 1024)
        t->str_cap *= 2;
    t->str_hash = calloc(t->str_cap, sizeof *t->str_hash);
    if (!t->attr || !t->str_hash)
        goto nomem;

    /* vocabulary: text and attributes (token_type -> attr as llama.cpp) */
    for (uint64_t i = 0; i < nv; i++) {
        struct cw_gguf_str w = kv_tok->value.arr.strs[i];
        char empty[32];
        const char *p = w.ptr;
        size_t n = w.len;
        if (n == 0) { /* llama.cpp renames empty tokens */
            n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
            p = empty;
        }
        if (add_string(&L, p, n) < 0)
            goto nomem;
        uint8_t a = CW_TOK_NORMAL;
        if (kv_type) {
            switch (cw_gguf_arr_i64(&kv_type->value, i)) {
            case 2: a = CW_TOK_UNKNOWN; break;
            case 5: a = CW_TOK_UNUSED; break;
            case 1: a = CW_TOK_NORMAL; break;
            case 3: a = CW_TOK_CONTROL; break;
            case 4: a = CW_TOK_USER_DEFINED; break;
            case 6: a = CW_TOK_BYTE; break;
            default: a = CW_TOK_UNDEFINED; break;
            }
        }
        t->attr[i] = a;
    }
    if (str_grow(t, t->str_cap) < 0)
        goto nomem;

    /* merges: "left right", ranked by position; parts and results get ids */
    t->merge_cap = 1024;
    while (t->merge_cap < n_merges * 2 + 1024)
        t->merge_cap *= 2;
    t->merge_key = calloc(t->merge_cap, sizeof *t->merge_key);
    t->merge_val = calloc(t->merge_cap, sizeof *t->merge_val);
    if (!t->merge_key || !t->merge_val)
        goto nomem;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (uint64_t i = 0; i < n_merges; i++) {
        struct cw_gguf_str w = kv_merges->value.arr.strs[i];
        const char *sp = w.len > 1 ? memchr(w.ptr + 1, ' ', w.len - 1) : NULL;
        if (!sp)
            continue; /* llama.cpp ranks ("", ""), which never matches */
        size_t la = (size_t)(sp - w.ptr), lb = w.len - la - 1;
        if (la + lb > cat_cap) {
            cat_cap = (la + lb) * 2;
            char *p = realloc(cat, cat_cap);
            if (!p) {
                free(cat);
                goto nomem;
            }
            cat = p;
        }
        memcpy(cat, w.ptr, la);
        memcpy(cat + la, sp + 1, lb);
        int32_t a = intern(&L, w.ptr, la);
        int32_t b = a < 0 ? -1 : intern(&L, sp + 1, lb);
        int32_t r = b < 0 ? -1 : intern(&L, cat, la + lb);
        if (r < 0) {
            free(cat);
            goto nomem;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        uint32_t mask = t->merge_cap - 1;
        uint32_t j = (uint32_t)hash_pair(key) & mask;
        while (t->merge_key[j] && t->merge_key[j] != key)
            j = (j + 1) & mask;
        if (!t->merge_key[j]) { /* the first rank of a duplicate wins */
            t->merge_key[j] = key;
            t->merge_val[j] = (uint64_t)i << 32 | (uint32_t)r;
        }
    }
    free(cat);

    uint32_t byte_cp[256];
    byte_to_cp_table(byte_cp);
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t n = cw_utf8_encode(byte_cp[b], u);
        if ((t->byte_id[b] = intern(&L, (const char *)u, n)) < 0)
            goto nomem;
    }

    /* special ids: gpt2 defaults, then the file's keys */
    t->bos = t->eos = 11 < t->n_vocab ? 11 : -1;
    t->eot = t->eom = t->unk = t->sep = t->pad = t->mask = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;
    struct {
        const char *key;
        int32_t *id;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},
        {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.eot_token_id", &t->eot},
        {"tokenizer.ggml.eom_token_id", &t->eom},
        {"tokenizer.ggml.unknown_token_id", &t->unk},
        {"tokenizer.ggml.seperator_token_id", &t->sep},
        {"tokenizer.ggml.padding_token_id", &t->pad},
        {"tokenizer.ggml.mask_token_id", &t->mask},
        {"tokenizer.ggml.fim_pre_token_id", &t->fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &t->fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &t->fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &t->fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &t->fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &t->fim_sep},
        {"tokenizer.ggml.prefix_token_id", &t->fim_pre},
        {"tokenizer.ggml.suffix_token_id", &t->fim_suf},
        {"tokenizer.ggml.middle_token_id", &t->fim_mid},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (get_id(g, keys[i].key, t->n_vocab, keys[i].id, err) < 0)
            goto fail;
    if (cw_gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", false, &t->add_bos, err) < 0 ||
        cw_gguf_get_bool_or(g, "tokenizer.ggml.add_eos_token", false, &t->add_eos, err) < 0)
        goto fail;

    /* text rules for ids the keys left unset (these also force CONTROL) */
    if (t->eot < 0)
        t->eot = detect(t, EOT_TEXTS);
    if (t->eom < 0)
        t->eom = detect(t, EOM_TEXTS);
    if (t->fim_pre < 0)
        t->fim_pre = detect(t, FIM_PRE_TEXTS);
    if (t->fim_suf < 0)
        t->fim_suf = detect(t, FIM_SUF_TEXTS);
    if (t->fim_mid < 0)
        t->fim_mid = detect(t, FIM_MID_TEXTS);
    if (t->fim_pad < 0)
        t->fim_pad = detect(t, FIM_PAD_TEXTS);
    if (t->fim_rep < 0)
        t->fim_rep = detect(t, FIM_REP_TEXTS);
    if (t->fim_sep < 0)
        t->fim_sep = detect(t, FIM_SEP_TEXTS);
    /* control tokens named "unused" are unused */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *z = tok_str(t, id, &n);
        if ((t->attr[id] & CW_TOK_CONTROL) && memmem(z, n, "unused", 6))
            t->attr[id] |= CW_TOK_UNUSED;
    }
    eog_add(t, t->fim_pad);
    eog_add(t, t->fim_rep);
    eog_add(t, t->fim_sep);
    for (const char *const *e = EOG_TEXTS; *e; e++) {
        int32_t id = find_text_id(t, *e);
        if (id >= 0) {
            t->attr[id] |= CW_TOK_CONTROL;
            eog_add(t, id);
        }
    }
    static const char *const ALWAYS_SHOWN[] = {"<|channel|>", "<|message|>", "<|start|>",
                                               "<|constrain|>", NULL};
    for (const char *const *e = ALWAYS_SHOWN; *e; e++) {
        int32_t id = find_text_id(t, *e);
        if (id >= 0)
            t->attr[id] = CW_TOK_USER_DEFINED;
    }
    eog_add(t, t->eos);
    eog_add(t, t->eot);
    eog_add(t, t->eom);
    qsort(t->eog, (size_t)t->n_eog, sizeof t->eog[0], cmp_i32);

    /* tokens matched in raw text: longest first */
    for (int pass = 0; pass < 2; pass++) {
        t->n_special = 0;
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->attr[id] & (CW_TOK_CONTROL | CW_TOK_USER_DEFINED | CW_TOK_UNKNOWN)) {
                if (pass)
                    t->special[t->n_special] = id;
                t->n_special++;
            }
        if (!pass && !(t->special = malloc(((size_t)t->n_special + 1) * sizeof *t->special)))
            goto nomem;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);

    if (build_pieces(t, byte_cp, err) < 0)
        goto fail;
    return 0;
nomem:
    cw_errf(err, CW_ERR_NOMEM, "tokenizer: %s: out of memory", g->path);
fail:
    cw_tokenizer_free(t);
    return -1;
}

void cw_tokenizer_free(struct cw_tokenizer *t)
{
    free(t->attr);
    free(t->text_off);
    free(t->text);
    free(t->piece_off);
    free(t->piece);
    free(t->str_hash);
    free(t->merge_key);
    free(t->merge_val);
    free(t->special);
    memset(t, 0, sizeof *t);
}

/* ---- lookup -------------------------------------------------------------- */

const char *cw_token_text(const struct cw_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    return tok_str(t, id, len);
}

const char *cw_token_piece(const struct cw_tokenizer *t, int32_t id, bool special, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    if (!special && (t->attr[id] & (CW_TOK_CONTROL | CW_TOK_UNKNOWN)))
        *len = 0;
    return t->piece + t->piece_off[id];
}

int32_t cw_token_id(const struct cw_tokenizer *t, const char *z)
{
    return find_text_id(t, z);
}

enum cw_tok_attr cw_token_attr(const struct cw_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? (enum cw_tok_attr)t->attr[id] : CW_TOK_UNDEFINED;
}

bool cw_token_is_eog(const struct cw_tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

/* ---- tokenizing ------------------------------------------------------------
 * text -> fragments (special tokens cut out, longest token first, leftmost
 * occurrence first) -> per text fragment: decode to code points (bad bytes
 * become U+FFFD and everything is re-encoded, as llama.cpp does) -> split
 * into words -> BPE each word over its bytes -> ids. */

struct frag {
    size_t off, len;
    int32_t id; /* -1: raw text */
};

struct bigram {
    uint32_t rank;
    int32_t left, right;
    int32_t lid, rid; /* ids when queued: a changed id means stale */
};

struct scratch {
    struct frag *fr[2];
    size_t fr_cap[2];
    uint32_t *cp;   /* code points of a fragment, [n_cp] */
    uint32_t *off;  /* byte offset of each code point in norm, [n_cp + 1] */
    uint8_t *cls;   /* class bits per code point */
    uint8_t *norm;  /* re-encoded fragment */
    size_t cp_cap, norm_cap;
    int32_t *sid, *sprev, *snext;
    uint32_t *slen;
    size_t sym_cap;
    struct bigram *heap;
    size_t heap_n, heap_cap;
};

static int push_id(struct cw_tokens *out, int32_t id)
{
    if (out->n == out->cap && cw_grow((void **)&out->ids, &out->cap, out->n + 1, sizeof *out->ids) < 0)
        return -1;
    out->ids[out->n++] = id;
    return 0;
}

enum { C_N = 1, C_L = 2, C_M = 4, C_WS = 8 };

static uint8_t cp_class(uint32_t c)
{
    if (c < 0x80) {
        if (c - '0' < 10)
            return C_N;
        if ((c | 32) - 'a' < 26)
            return C_L;
        return (c == ' ' || (c >= 9 && c <= 13)) ? C_WS : 0;
    }
    uint8_t f = 0;
    switch (cw_unicode_cat(c)) {
    case CW_UCAT_N: f = C_N; break;
    case CW_UCAT_L: f = C_L; break;
    case CW_UCAT_M: f = C_M; break;
    default: break;
    }
    return cw_unicode_is_space(c) ? (uint8_t)(f | C_WS) : f;
}

/* End of the word starting at pos (< end): the qwen2/qwen35 split regex
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?LM+ | \p{N} |
 *   ' '?[^\s LM \p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * with LM = \p{L} (qwen2) or [\p{L}\p{M}] (qwen35), evaluated the way
 * llama.cpp's matcher does. */
static size_t split_word(const struct scratch *s, size_t pos, size_t end, uint8_t lm)
{
    const uint32_t *cp = s->cp;
    const uint8_t *fl = s->cls;
#define FL(i) ((i) < end ? fl[i] : 0)
    uint32_t c = cp[pos];
    uint8_t f = fl[pos];
    if (c == '\'' && pos + 1 < end) {
        uint32_t n1 = cw_unicode_tolower_ascii(cp[pos + 1]);
        if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd')
            return pos + 2;
        if (pos + 2 < end) {
            uint32_t n2 = cw_unicode_tolower_ascii(cp[pos + 2]);
            if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l'))
                return pos + 3;
        }
    }
    if (!(c == '\r' || c == '\n' || (f & C_N)) && ((f & lm) || (FL(pos + 1) & lm))) {
        pos++;
        while (FL(pos) & lm)
            pos++;
        return pos;
    }
    if (f & C_N)
        return pos + 1;
    uint8_t stop = (uint8_t)(C_WS | C_N | lm);
    if (!((c == ' ' ? FL(pos + 1) : f) & stop)) {
        pos += (c == ' ');
        while (pos < end && !(fl[pos] & stop))
            pos++;
        while (pos < end && (cp[pos] == '\r' || cp[pos] == '\n'))
            pos++;
        return pos;
    }
    size_t n = 0, last_nl = 0;
    while (pos + n < end && (fl[pos + n] & C_WS)) {
        if (cp[pos + n] == '\r' || cp[pos + n] == '\n')
            last_nl = pos + n + 1;
        n++;
    }
    if (last_nl)
        return last_nl;
    if (n > 1 && pos + n < end)
        return pos + n - 1;
    return pos + (n ? n : 1);
#undef FL
}

static int heap_less(const struct bigram *a, const struct bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(struct scratch *s, const struct cw_tokenizer *t, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    struct bigram b = {0, l, r, s->sid[l], s->sid[r]};
    int32_t res;
    if (!merge_find(t, b.lid, b.rid, &b.rank, &res))
        return 0;
    if (cw_grow((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof *s->heap) < 0)
        return -1;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&b, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = b;
    return 0;
}

static struct bigram heap_pop(struct scratch *s)
{
    struct bigram top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!heap_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* Emits id, or for a merge string that is not a token, the tokens of its
 * single bytes where they exist (llama.cpp's fallback). */
static int emit(const struct cw_tokenizer *t, int32_t id, struct cw_tokens *out)
{
    if (id < t->n_vocab)
        return push_id(out, id);
    size_t n;
    const char *z = tok_str(t, id, &n);
    for (size_t i = 0; i < n; i++) {
        int32_t b = str_find(t, z + i, 1);
        if (b >= 0 && b < t->n_vocab && push_id(out, b) < 0)
            return -1;
    }
    return 0;
}

static int bpe_word(const struct cw_tokenizer *t, struct scratch *s, const uint8_t *w, size_t n,
                    struct cw_tokens *out)
{
    if (n == 1)
        return emit(t, t->byte_id[w[0]], out);
    size_t cap = s->sym_cap;
    if (n > cap) {
        if (cw_grow((void **)&s->sid, &cap, n, sizeof *s->sid) < 0)
            return -1;
        cap = s->sym_cap;
        if (cw_grow((void **)&s->sprev, &cap, n, sizeof *s->sprev) < 0)
            return -1;
        cap = s->sym_cap;
        if (cw_grow((void **)&s->snext, &cap, n, sizeof *s->snext) < 0)
            return -1;
        cap = s->sym_cap;
        if (cw_grow((void **)&s->slen, &cap, n, sizeof *s->slen) < 0)
            return -1;
        s->sym_cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        s->sid[i] = t->byte_id[w[i]];
        s->slen[i] = 1;
        s->sprev[i] = (int32_t)i - 1;
        s->snext[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (heap_push(s, t, (int32_t)i, (int32_t)i + 1) < 0)
            return -1;
    while (s->heap_n) {
        struct bigram b = heap_pop(s);
        int32_t l = b.left, r = b.right;
        if (!s->slen[l] || !s->slen[r] || s->sid[l] != b.lid || s->sid[r] != b.rid)
            continue; /* outdated */
        uint32_t rank;
        int32_t res = -1;
        merge_find(t, b.lid, b.rid, &rank, &res);
        s->sid[l] = res;
        s->slen[l] += s->slen[r];
        s->slen[r] = 0;
        s->snext[l] = s->snext[r];
        if (s->snext[r] >= 0)
            s->sprev[s->snext[r]] = l;
        if (heap_push(s, t, s->sprev[l], l) < 0 || heap_push(s, t, l, s->snext[l]) < 0)
            return -1;
    }
    for (int32_t i = 0; i >= 0; i = s->snext[i])
        if (emit(t, s->sid[i], out) < 0)
            return -1;
    return 0;
}

static int tokenize_text(const struct cw_tokenizer *t, struct scratch *s, const uint8_t *p,
                         size_t n, struct cw_tokens *out)
{
    size_t cap = s->cp_cap;
    if (n + 1 > cap) {
        if (cw_grow((void **)&s->cp, &cap, n + 1, sizeof *s->cp) < 0)
            return -1;
        cap = s->cp_cap;
        if (cw_grow((void **)&s->off, &cap, n + 1, sizeof *s->off) < 0)
            return -1;
        cap = s->cp_cap;
        if (cw_grow((void **)&s->cls, &cap, n + 1, sizeof *s->cls) < 0)
            return -1;
        s->cp_cap = cap;
    }
    if (cw_grow((void **)&s->norm, &s->norm_cap, 3 * n + 4, 1) < 0)
        return -1;
    size_t m = 0, o = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t c;
        if (p[i] < 0x80) { /* ASCII fast path */
            c = p[i];
            l = 1;
            s->norm[o] = p[i];
            s->off[m] = (uint32_t)o++;
        } else {
            c = cw_utf8_decode(p + i, n - i, &l);
            s->off[m] = (uint32_t)o;
            o += cw_utf8_encode(c, s->norm + o);
        }
        s->cp[m] = c;
        s->cls[m++] = cp_class(c);
        i += l;
    }
    s->off[m] = (uint32_t)o;
    uint8_t lm = t->pre == CW_TOK_PRE_QWEN35 ? (C_L | C_M) : C_L;
    for (size_t pos = 0; pos < m;) {
        size_t e = split_word(s, pos, m, lm);
        if (bpe_word(t, s, s->norm + s->off[pos], s->off[e] - s->off[pos], out) < 0)
            return -1;
        pos = e;
    }
    return 0;
}

void cw_tokens_free(struct cw_tokens *out)
{
    struct scratch *s = out->scratch;
    if (s) {
        free(s->fr[0]);
        free(s->fr[1]);
        free(s->cp);
        free(s->off);
        free(s->cls);
        free(s->norm);
        free(s->sid);
        free(s->sprev);
        free(s->snext);
        free(s->slen);
        free(s->heap);
        free(s);
    }
    free(out->ids);
    memset(out, 0, sizeof *out);
}

static int frag_push(struct scratch *s, int k, size_t *n, size_t off, size_t len, int32_t id)
{
    if (cw_grow((void **)&s->fr[k], &s->fr_cap[k], *n + 1, sizeof *s->fr[k]) < 0)
        return -1;
    s->fr[k][(*n)++] = (struct frag){off, len, id};
    return 0;
}

int cw_tokenize(const struct cw_tokenizer *t, const char *text, size_t len, bool parse_special,
                struct cw_tokens *out, struct cw_err *err)
{
    out->n = 0;
    if (!out->scratch && !(out->scratch = calloc(1, sizeof(struct scratch))))
        return cw_errf(err, CW_ERR_NOMEM, "tokenize: out of memory");
    struct scratch *s = out->scratch;
    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 4)
        return cw_errf(err, CW_ERR_INVALID, "tokenize: text of %zu bytes is too long", len);
    /* special tokens: each in turn splits the remaining raw fragments */
    size_t nf = 0;
    int cur = 0;
    if (frag_push(s, cur, &nf, 0, len, -1) < 0)
        goto nomem;
    for (int k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->attr[id] & (CW_TOK_CONTROL | CW_TOK_UNKNOWN)))
            continue;
        size_t sl;
        const char *sz = tok_str(t, id, &sl);
        size_t nn = 0;
        int nxt = !cur;
        for (size_t i = 0; i < nf; i++) {
            struct frag f = s->fr[cur][i];
            if (f.id >= 0) {
                if (frag_push(s, nxt, &nn, f.off, f.len, f.id) < 0)
                    goto nomem;
                continue;
            }
            size_t a = f.off, e = f.off + f.len;
            const char *hit;
            while (a < e && (hit = memmem(text + a, e - a, sz, sl))) {
                size_t h = (size_t)(hit - text);
                if ((h > a && frag_push(s, nxt, &nn, a, h - a, -1) < 0) ||
                    frag_push(s, nxt, &nn, h, sl, id) < 0)
                    goto nomem;
                a = h + sl;
            }
            if (a < e && frag_push(s, nxt, &nn, a, e - a, -1) < 0)
                goto nomem;
        }
        cur = nxt;
        nf = nn;
    }
    for (size_t i = 0; i < nf; i++) {
        struct frag f = s->fr[cur][i];
        int rc = f.id >= 0 ? push_id(out, f.id)
                           : tokenize_text(t, s, (const uint8_t *)text + f.off, f.len, out);
        if (rc < 0)
            goto nomem;
    }
    return 0;
nomem:
    return cw_errf(err, CW_ERR_NOMEM, "tokenize: out of memory");
}

/* ---- detokenizing --------------------------------------------------------- */

size_t cw_detokenize(const struct cw_tokenizer *t, const int32_t *ids, size_t n, bool special,
                     char *buf, size_t cap)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *p = cw_token_piece(t, ids[i], special, &l);
        if (!p)
            continue;
        if (total < cap)
            memcpy(buf + total, p, l < cap - total ? l : cap - total);
        total += l;
    }
    return total;
}

/* Length of the incomplete UTF-8 sequence at the end of b[0..n), 0 if none:
 * a lead byte followed by fewer continuation bytes than it announces. */
static size_t incomplete_tail(const uint8_t *b, size_t n)
{
    size_t k = 0;
    while (k < n && k < 3 && (b[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n)
        return 0;
    uint8_t lead = b[n - 1 - k];
    size_t need = lead >= 0xF0 && lead < 0xF8 ? 4 : lead >= 0xE0 && lead < 0xF0 ? 3
                  : lead >= 0xC0 && lead < 0xE0 ? 2 : 0;
    return need > k + 1 ? k + 1 : 0;
}

int cw_detok_push(struct cw_detok *d, const struct cw_tokenizer *t, int32_t id, char *buf,
                  size_t cap)
{
    size_t l;
    const char *p = cw_token_piece(t, id, d->special, &l);
    if (!p)
        return -1;
    /* the last bytes of held + piece decide what is held back */
    uint8_t tail[8];
    size_t nt = 0, total = d->n_held + l;
    for (size_t i = total > 7 ? total - 7 : 0; i < total; i++)
        tail[nt++] = i < d->n_held ? d->held[i] : (uint8_t)p[i - d->n_held];
    size_t hold = incomplete_tail(tail, nt);
    size_t emit_n = total - hold;
    if (emit_n > cap || emit_n > INT32_MAX)
        return -1;
    size_t from_held = emit_n < d->n_held ? emit_n : d->n_held;
    memcpy(buf, d->held, from_held);
    memcpy(buf + from_held, p, emit_n - from_held);
    uint8_t keep[4];
    for (size_t i = 0; i < hold; i++) {
        size_t j = emit_n + i;
        keep[i] = j < d->n_held ? d->held[j] : (uint8_t)p[j - d->n_held];
    }
    memcpy(d->held, keep, hold);
    d->n_held = (uint8_t)hold;
    return (int)emit_n;
}

int cw_detok_flush(struct cw_detok *d, char *buf, size_t cap)
{
    if (d->n_held > cap)
        return -1;
    int n = d->n_held;
    memcpy(buf, d->held, d->n_held);
    d->n_held = 0;
    return n;
}
