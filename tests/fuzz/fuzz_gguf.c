/* fuzz_gguf.c — libFuzzer harness for cw_gguf_parse.
 * Parses the input, then touches every key, value (nested arrays included)
 * and tensor byte range, so that any pointer the parser hands out is read
 * under ASan; lookups of every key and tensor name must find them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;

static void touch_value(const struct cw_gguf_value *v)
{
    if (v->type == CW_GGUF_STRING) {
        for (uint64_t i = 0; i < v->str.len; i++)
            sink += (uint8_t)v->str.ptr[i];
        return;
    }
    if (v->type != CW_GGUF_ARRAY) {
        sink += v->u64;
        return;
    }
    for (uint64_t i = 0; i < v->arr.n; i++) {
        if (v->arr.type == CW_GGUF_STRING) {
            const struct cw_gguf_str *s = &v->arr.strs[i];
            if (s->len)
                sink += (uint8_t)s->ptr[0] + (uint8_t)s->ptr[s->len - 1];
        } else if (v->arr.type == CW_GGUF_ARRAY) {
            touch_value(&v->arr.items[i]);
        } else {
            double f = cw_gguf_arr_f64(v, i);
            uint64_t bits;
            memcpy(&bits, &f, sizeof bits);
            sink += (uint64_t)cw_gguf_arr_i64(v, i) + bits;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    struct cw_gguf g;
    struct cw_err err = {0};
    if (cw_gguf_parse(&g, d, n, "fuzz.gguf", &err)) {
        if (!strstr(err.msg, "offset"))
            abort(); /* every refusal says where */
        return 0;
    }
    char key[256];
    for (uint64_t i = 0; i < g.n_kv; i++) {
        touch_value(&g.kv[i].value);
        if (g.kv[i].key.len < sizeof key && !memchr(g.kv[i].key.ptr, 0, g.kv[i].key.len)) {
            cw_gguf_str_copy(g.kv[i].key, key, sizeof key);
            if (cw_gguf_find_kv(&g, key) != &g.kv[i])
                abort();
            uint32_t u;
            float f;
            cw_gguf_get_u32(&g, key, &u, &err);
            cw_gguf_get_f32(&g, key, &f, &err);
        }
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const struct cw_gguf_tensor *t = &g.tensors[i];
        if (cw_gguf_find_tensor_index(&g, t->name) != (int64_t)i)
            abort();
        if (t->nbytes) {
            const uint8_t *p = t->data;
            sink += p[0] + p[t->nbytes - 1];
        }
    }
    cw_gguf_close(&g);
    return 0;
}
