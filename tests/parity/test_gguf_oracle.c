/* test_gguf_oracle.c — llama.cpp's GGUF reader (libggml-base) against ours.
 * (a) files from our writer (every metadata type, tensors of several types)
 *     read by gguf_init_from_file: same keys, types, values, tensors, shapes,
 *     types and offsets (ggml cannot read arrays of arrays: checked that it
 *     refuses them); (b) the oracle's qwen35 vocab file read by both: same
 *     keys, values and counts; (c) gguf_bad.h's malformed files: ours refuses
 *     every one, ggml's verdict is noted. */
#include <stdio.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"
#include "gguf/gguf.h"
#include "../gguf_bad.h"
#include "../gguf_sample.h"
#include "oracle.h"
#include "../test.h"

static char tmp_path[1024];

static const char *tmp(const char *name)
{
    snprintf(tmp_path, sizeof tmp_path, "%s/%s", test_env("CWEN_TMP", "/tmp"), name);
    return tmp_path;
}

static size_t elem_size(enum cw_gguf_type t)
{
    switch (t) {
    case CW_GGUF_U8: case CW_GGUF_I8: case CW_GGUF_BOOL: return 1;
    case CW_GGUF_U16: case CW_GGUF_I16: return 2;
    case CW_GGUF_U32: case CW_GGUF_I32: case CW_GGUF_F32: return 4;
    default: return 8;
    }
}

/* Compares one of our key/values with ggml's; returns 1 when identical. */
static int kv_same(const struct cw_gguf_kv *kv, const struct gguf_context *c, int64_t id)
{
    const struct cw_gguf_value *v = &kv->value;
    if ((int)gguf_get_kv_type(c, id) != (int)v->type)
        return 0;
    switch (v->type) {
    case CW_GGUF_U8: return gguf_get_val_u8(c, id) == v->u64;
    case CW_GGUF_I8: return gguf_get_val_i8(c, id) == v->i64;
    case CW_GGUF_U16: return gguf_get_val_u16(c, id) == v->u64;
    case CW_GGUF_I16: return gguf_get_val_i16(c, id) == v->i64;
    case CW_GGUF_U32: return gguf_get_val_u32(c, id) == v->u64;
    case CW_GGUF_I32: return gguf_get_val_i32(c, id) == v->i64;
    case CW_GGUF_F32: return (double)gguf_get_val_f32(c, id) == v->f64;
    case CW_GGUF_BOOL: return gguf_get_val_bool(c, id) == (v->u64 != 0);
    case CW_GGUF_U64: return gguf_get_val_u64(c, id) == v->u64;
    case CW_GGUF_I64: return gguf_get_val_i64(c, id) == v->i64;
    case CW_GGUF_F64: return gguf_get_val_f64(c, id) == v->f64;
    case CW_GGUF_STRING: {
        const char *s = gguf_get_val_str(c, id);
        return strlen(s) == v->str.len && !memcmp(s, v->str.ptr, v->str.len);
    }
    case CW_GGUF_ARRAY:
        if ((int)gguf_get_arr_type(c, id) != (int)v->arr.type || gguf_get_arr_n(c, id) != v->arr.n)
            return 0;
        if (v->arr.type == CW_GGUF_STRING) {
            for (uint64_t i = 0; i < v->arr.n; i++) {
                const char *s = gguf_get_arr_str(c, id, i);
                if (strlen(s) != v->arr.strs[i].len || memcmp(s, v->arr.strs[i].ptr, v->arr.strs[i].len))
                    return 0;
            }
            return 1;
        }
        if (v->arr.type == CW_GGUF_ARRAY)
            return 0;
        return v->arr.n == 0 || !memcmp(gguf_get_arr_data(c, id), v->arr.data, v->arr.n * elem_size(v->arr.type));
    default: return 0;
    }
}

/* Every key and tensor of g is in c with the same value/shape/offset. */
static void compare(const struct cw_gguf *g, const struct gguf_context *c, const char *what)
{
    ok(gguf_get_n_kv(c) == (int64_t)g->n_kv, "%s: n_kv %lld vs %llu", what, (long long)gguf_get_n_kv(c),
       (unsigned long long)g->n_kv);
    ok(gguf_get_n_tensors(c) == (int64_t)g->n_tensors, "%s: n_tensors", what);
    ok(gguf_get_version(c) == g->version && gguf_get_alignment(c) == g->alignment, "%s: version/alignment", what);
    if (g->n_tensors)
        ok(gguf_get_data_offset(c) == g->data_offset, "%s: data offset %zu vs %llu", what,
           gguf_get_data_offset(c), (unsigned long long)g->data_offset);
    int bad = 0;
    char key[512];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        cw_gguf_str_copy(g->kv[i].key, key, sizeof key);
        int64_t id = gguf_find_key(c, key);
        if (id != (int64_t)i || !kv_same(&g->kv[i], c, id)) {
            if (bad++ < 5)
                ok(0, "%s: key '%s' differs (ggml id %lld)", what, key, (long long)id);
        }
    }
    ok(bad == 0, "%s: all %llu keys identical, in order", what, (unsigned long long)g->n_kv);
    bad = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct cw_gguf_tensor *t = &g->tensors[i];
        int64_t id = gguf_find_tensor(c, t->name);
        const int64_t *ne = id >= 0 ? gguf_get_tensor_ne(c, id) : NULL;
        if (id != (int64_t)i || strcmp(gguf_get_tensor_name(c, id), t->name) ||
            (int)gguf_get_tensor_type(c, id) != (int)t->type || gguf_get_tensor_offset(c, id) != t->offset ||
            gguf_get_tensor_size(c, id) != t->nbytes || memcmp(ne, t->ne, sizeof t->ne)) {
            if (bad++ < 5)
                ok(0, "%s: tensor '%s' differs", what, t->name);
        }
    }
    ok(bad == 0, "%s: all %llu tensors identical", what, (unsigned long long)g->n_tensors);
}

static void test_our_files(void)
{
    for (int nested = 0; nested < 2; nested++) {
        struct cw_err err = {0};
        struct cw_gguf_writer *w = cw_gguf_writer_new(nested ? 32 : 64);
        ok(sample_fill(w, nested, &err) == 0, "fill: %s", err.msg);
        void **d = sample_data(w);
        const char *path = tmp(nested ? "oracle_nested.gguf" : "oracle_sample.gguf");
        ok(cw_gguf_writer_write_file(w, path, (const void *const *)d, &err) == 0, "write: %s", err.msg);
        sample_free(d);
        cw_gguf_writer_free(w);
        struct cw_gguf g;
        ok(cw_gguf_open(&g, path, &err) == 0, "ours opens %s: %s", path, err.msg);
        struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
        struct gguf_context *c = gguf_init_from_file(path, p);
        if (nested) {
            /* ggml has no arrays of arrays: it refuses the file, ours reads it */
            ok(c == NULL, "ggml refuses arrays of arrays");
            note("arrays of arrays: ggml refuses, cwen reads them");
        } else {
            ok(c != NULL, "ggml opens our file");
            if (c)
                compare(&g, c, "writer file");
        }
        if (c)
            gguf_free(c);
        cw_gguf_close(&g);
    }
}

static void test_vocab(void)
{
    const char *path = oracle_src_path("models/ggml-vocab-qwen35.gguf");
    struct cw_err err = {0};
    struct cw_gguf g;
    if (cw_gguf_open(&g, path, &err)) {
        ok(0, "ours opens the qwen35 vocab: %s", err.msg);
        return;
    }
    struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *c = gguf_init_from_file(path, p);
    ok(c != NULL, "ggml opens the qwen35 vocab");
    if (c) {
        compare(&g, c, "qwen35 vocab");
        const struct cw_gguf_kv *tok = cw_gguf_find_kv(&g, "tokenizer.ggml.tokens");
        ok(tok && tok->value.arr.n > 100000, "vocab has %llu tokens",
           tok ? (unsigned long long)tok->value.arr.n : 0ull);
        gguf_free(c);
    }
    cw_gguf_close(&g);
}

static void test_malformed(void)
{
    struct gb b;
    int agree = 0, n = 0;
    for (int i = 1;; i++) {
        const char *name = gb_case(i, &b);
        if (!name)
            break;
        n++;
        struct cw_err err = {0};
        struct cw_gguf g;
        int rc = cw_gguf_parse(&g, b.p, b.n, "bad.gguf", &err);
        ok(rc < 0, "ours refuses %s", name);
        if (rc == 0)
            cw_gguf_close(&g);
        struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
        struct gguf_context *c = gguf_init_from_buffer(b.p, b.n, p);
        if (c) {
            note("ggml accepts '%s' (cwen refuses: %s)", name, err.msg);
            gguf_free(c);
        } else {
            agree++;
        }
    }
    note("ggml refuses %d of the %d malformed files", agree, n);
    gb_case(GB_OK, &b);
    struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *c = gguf_init_from_buffer(b.p, b.n, p);
    ok(c != NULL, "ggml accepts the valid control");
    if (c)
        gguf_free(c);
}

int main(void)
{
    oracle_init();
    test_our_files();
    test_vocab();
    test_malformed();
    return done();
}
