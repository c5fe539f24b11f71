/* gguf.c — the GGUF reader: parse, open, lookup and typed getters.
 *
 * Owns turning GGUF bytes into a validated struct cw_gguf (see gguf.h). The
 * parse reads each section twice: a first pass validates every length, count,
 * type and nesting depth against the bytes actually present and counts what
 * the directory needs; only then is one block allocated (so a forged count can
 * never make us allocate more than the file could hold) and a second pass
 * fills it. Tensor data is never copied. Writing lives in gguf_write.c. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define MAX_DEPTH 8            /* arrays nested deeper than this are refused */

/* Private memory of a parsed file: one block holding the directory. */
struct mem {
    uint32_t *kv_hash; /* open addressing: index + 1, 0 = empty */
    uint64_t kv_mask;
    uint32_t *t_hash;
    uint64_t t_mask;
};

/* Reader state shared by both passes. */
struct rd {
    const uint8_t *b;
    uint64_t size, pos;
    const char *name;
    struct cw_err *err;
    bool fill;                  /* second pass: write into the tables below */
    uint64_t n_strs, n_items;   /* first pass: what the tables need */
    struct cw_gguf_str *strs;   /* second pass: next free entries */
    struct cw_gguf_value *items;
};

static const uint8_t scalar_size[CW_GGUF_TYPE_COUNT] = {
    [CW_GGUF_U8] = 1,  [CW_GGUF_I8] = 1,  [CW_GGUF_U16] = 2, [CW_GGUF_I16] = 2,
    [CW_GGUF_U32] = 4, [CW_GGUF_I32] = 4, [CW_GGUF_F32] = 4, [CW_GGUF_BOOL] = 1,
    [CW_GGUF_U64] = 8, [CW_GGUF_I64] = 8, [CW_GGUF_F64] = 8,
};

static const char *const type_names[CW_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *cw_gguf_type_name(uint32_t t)
{
    return t < CW_GGUF_TYPE_COUNT ? type_names[t] : "unknown";
}

static int fail(struct rd *r, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct rd *r, uint64_t off, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cw_errf(r->err, CW_ERR_FORMAT, "gguf: %s: offset %" PRIu64 ": %s", r->name, off, what);
}

/* A printable copy of a file string for messages. */
static const char *printable(const uint8_t *p, uint64_t len, char *buf, size_t cap)
{
    size_t n = len < cap - 1 ? (size_t)len : cap - 1;
    for (size_t i = 0; i < n; i++)
        buf[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
    buf[n] = '\0';
    return buf;
}

static int need(struct rd *r, uint64_t n, const char *what)
{
    if (n > r->size - r->pos)
        return fail(r, r->pos, "truncated: %s needs %" PRIu64 " bytes, %" PRIu64
                    " left (file size %" PRIu64 ")", what, n, r->size - r->pos, r->size);
    return 0;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cwen reads GGUF (little-endian) with plain loads: little-endian hosts only"
#endif

/* An unaligned little-endian load of n (1, 2, 4 or 8) bytes. */
static inline uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    memcpy(&v, p, n);
    return v;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
    if (need(r, 4, what))
        return -1;
    *v = (uint32_t)le(r->b + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
    if (need(r, 8, what))
        return -1;
    *v = le(r->b + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int rd_str(struct rd *r, struct cw_gguf_str *s, const char *what)
{
    uint64_t at = r->pos, len;
    if (rd_u64(r, &len, what))
        return -1;
    if (len > r->size - r->pos)
        return fail(r, at, "%s length %" PRIu64 " extends past end of file (%" PRIu64
                    " bytes left, file size %" PRIu64 ")", what, len, r->size - r->pos, r->size);
    s->ptr = (const char *)r->b + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

/* Smallest encoding of one element of type t (for bounding counts). */
static uint64_t min_elem_size(uint32_t t)
{
    if (t == CW_GGUF_STRING)
        return 8;
    if (t == CW_GGUF_ARRAY)
        return 12;
    return scalar_size[t];
}

static int check_bools(struct rd *r, uint64_t at, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (r->b[at + i] > 1)
            return fail(r, at + i, "bool value %u is neither 0 nor 1", r->b[at + i]);
    return 0;
}

/* The body of an array: element type, count, elements. */
static int rd_array(struct rd *r, struct cw_gguf_value *v, int depth)
{
    uint64_t at = r->pos, n;
    uint32_t et;
    if (depth >= MAX_DEPTH)
        return fail(r, at, "arrays nested deeper than %d", MAX_DEPTH);
    if (rd_u32(r, &et, "array element type") || rd_u64(r, &n, "array length"))
        return -1;
    if (et >= CW_GGUF_TYPE_COUNT)
        return fail(r, at, "array element type %" PRIu32 " is not a GGUF type", et);
    uint64_t left = r->size - r->pos;
    if (n > left / min_elem_size(et))
        return fail(r, at + 4, "array of %" PRIu64 " %s elements cannot fit in the %" PRIu64
                    " bytes left", n, type_names[et], left);
    if (v) {
        v->type = CW_GGUF_ARRAY;
        v->arr.type = (enum cw_gguf_type)et;
        v->arr.n = n;
        v->arr.data = NULL;
        v->arr.strs = NULL;
        v->arr.items = NULL;
    }
    if (et == CW_GGUF_STRING) {
        struct cw_gguf_str *out = NULL;
        if (r->fill) {
            out = r->strs;
            r->strs += n;
            if (v)
                v->arr.strs = out;
        } else {
            r->n_strs += n;
        }
        /* the tokenizer's 248k strings come through here: keep the loop tight */
        const uint8_t *b = r->b;
        uint64_t pos = r->pos, size = r->size;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len;
            if (size - pos < 8 || (len = le(b + pos, 8)) > size - pos - 8) {
                r->pos = pos;
                struct cw_gguf_str s;
                return rd_str(r, &s, "string"); /* fails with the right message */
            }
            if (out) {
                out[i].ptr = (const char *)b + pos + 8;
                out[i].len = len;
            }
            pos += 8 + len;
        }
        r->pos = pos;
    } else if (et == CW_GGUF_ARRAY) {
        struct cw_gguf_value *out = NULL;
        if (r->fill) {
            out = r->items;
            r->items += n;
            if (v)
                v->arr.items = out;
        } else {
            r->n_items += n;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (rd_array(r, out ? &out[i] : NULL, depth + 1))
                return -1;
        }
    } else {
        uint64_t nb = n * scalar_size[et]; /* fits: n <= left / size */
        if (et == CW_GGUF_BOOL && check_bools(r, r->pos, n))
            return -1;
        if (v)
            v->arr.data = r->b + r->pos;
        r->pos += nb;
    }
    return 0;
}

/* A typed value (type already read as t). */
static int rd_value(struct rd *r, uint32_t t, uint64_t type_at, struct cw_gguf_value *v)
{
    if (t >= CW_GGUF_TYPE_COUNT)
        return fail(r, type_at, "metadata type %" PRIu32 " is not a GGUF type", t);
    if (t == CW_GGUF_ARRAY)
        return rd_array(r, v, 0);
    if (t == CW_GGUF_STRING) {
        struct cw_gguf_str s;
        if (rd_str(r, &s, "string value"))
            return -1;
        if (v) {
            v->type = CW_GGUF_STRING;
            v->str = s;
        }
        return 0;
    }
    unsigned sz = scalar_size[t];
    if (need(r, sz, type_names[t]))
        return -1;
    uint64_t raw = le(r->b + r->pos, sz);
    if (t == CW_GGUF_BOOL && raw > 1)
        return fail(r, r->pos, "bool value %u is neither 0 nor 1", (unsigned)raw);
    r->pos += sz;
    if (!v)
        return 0;
    v->type = (enum cw_gguf_type)t;
    switch (t) {
    case CW_GGUF_I8: v->i64 = (int8_t)raw; break;
    case CW_GGUF_I16: v->i64 = (int16_t)raw; break;
    case CW_GGUF_I32: v->i64 = (int32_t)raw; break;
    case CW_GGUF_I64: v->i64 = (int64_t)raw; break;
    case CW_GGUF_F32: {
        float f;
        uint32_t u = (uint32_t)raw;
        memcpy(&f, &u, 4);
        v->f64 = f;
        break;
    }
    case CW_GGUF_F64: memcpy(&v->f64, &raw, 8); break;
    default: v->u64 = raw; break;
    }
    return 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t hash(const void *p, uint64_t n)
{
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static uint64_t table_size(uint64_t n)
{
    uint64_t m = 16;
    while (m < 2 * n)
        m <<= 1;
    return m;
}

/* Key/value section. Pass 1 (r->fill false, kv NULL) validates and counts. */
static int rd_kvs(struct rd *r, struct cw_gguf *g, struct mem *m)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        uint64_t at = r->pos;
        struct cw_gguf_str key;
        uint32_t t;
        if (rd_str(r, &key, "key"))
            return -1;
        if (key.len == 0)
            return fail(r, at, "key %" PRIu64 " is empty", i);
        uint64_t type_at = r->pos;
        if (rd_u32(r, &t, "metadata type"))
            return -1;
        struct cw_gguf_kv *kv = r->fill ? &g->kv[i] : NULL;
        if (rd_value(r, t, type_at, kv ? &kv->value : NULL))
            return -1;
        if (!kv)
            continue;
        kv->key = key;
        char kb[80];
        uint64_t h = hash(key.ptr, key.len) & m->kv_mask;
        for (;; h = (h + 1) & m->kv_mask) {
            uint32_t e = m->kv_hash[h];
            if (!e) {
                m->kv_hash[h] = (uint32_t)(i + 1);
                break;
            }
            const struct cw_gguf_str *o = &g->kv[e - 1].key;
            if (o->len == key.len && !memcmp(o->ptr, key.ptr, key.len))
                return fail(r, at, "duplicate key '%s'",
                            printable((const uint8_t *)key.ptr, key.len, kb, sizeof kb));
        }
        if (cw_gguf_str_eq(key, "general.alignment")) {
            if (t != CW_GGUF_U32)
                return fail(r, type_at, "general.alignment has type %s, expected u32",
                            cw_gguf_type_name(t));
            uint64_t a = kv->value.u64;
            if (a == 0 || (a & (a - 1)))
                return fail(r, type_at + 4, "general.alignment %" PRIu64 " is not a power of two", a);
            g->alignment = a;
        }
    }
    return 0;
}

/* Tensor-info section. Pass 1 validates each entry; pass 2 fills g->tensors,
 * checks names are unique and data lies, aligned, inside the file. */
static int rd_tensors(struct rd *r, struct cw_gguf *g, struct mem *m)
{
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t at = r->pos;
        struct cw_gguf_str name;
        char nb[CW_GGUF_MAX_NAME + 8];
        if (rd_str(r, &name, "tensor name"))
            return -1;
        printable((const uint8_t *)name.ptr, name.len, nb, sizeof nb);
        if (name.len >= CW_GGUF_MAX_NAME)
            return fail(r, at, "tensor %" PRIu64 " name '%s...' is %" PRIu64
                        " bytes, the limit is %d", i, nb, name.len, CW_GGUF_MAX_NAME - 1);
        if (memchr(name.ptr, 0, name.len))
            return fail(r, at, "tensor %" PRIu64 " name '%s' contains a NUL byte", i, nb);
        uint32_t n_dims, type;
        uint64_t dims_at = r->pos;
        if (rd_u32(r, &n_dims, "tensor n_dims"))
            return -1;
        if (n_dims < 1 || n_dims > CW_GGUF_MAX_DIMS)
            return fail(r, dims_at, "tensor '%s': n_dims %" PRIu32 " is not in 1..%d", nb, n_dims,
                        CW_GGUF_MAX_DIMS);
        int64_t ne[CW_GGUF_MAX_DIMS] = {1, 1, 1, 1};
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t u;
            if (rd_u64(r, &u, "tensor dimension"))
                return -1;
            if (u > (uint64_t)INT64_MAX)
                return fail(r, r->pos - 8, "tensor '%s': dimension %" PRIu32 " is negative (%" PRId64 ")",
                            nb, d, (int64_t)u);
            ne[d] = (int64_t)u;
        }
        uint64_t type_at = r->pos;
        if (rd_u32(r, &type, "tensor type"))
            return -1;
        const struct cw_qtype_traits *tr = cw_qtype_traits(type);
        if (!tr)
            return fail(r, type_at, "tensor '%s': unknown tensor type %" PRIu32, nb, type);
        if (ne[0] % tr->block_elems)
            return fail(r, dims_at + 4, "tensor '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64,
                        nb, ne[0], tr->name, tr->block_elems);
        /* bytes = (ne0 / block) * block_bytes * ne1 * ne2 * ne3, each step checked */
        uint64_t bytes = (uint64_t)(ne[0] / tr->block_elems);
        uint64_t f[4] = {tr->block_bytes, (uint64_t)ne[1], (uint64_t)ne[2], (uint64_t)ne[3]};
        bool zero = bytes == 0 || ne[1] == 0 || ne[2] == 0 || ne[3] == 0;
        for (int k = 0; k < 4 && !zero; k++) {
            if (bytes > (uint64_t)INT64_MAX / f[k])
                return fail(r, dims_at + 4, "tensor '%s': shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                            "] of %s overflows 63 bits", nb, ne[0], ne[1], ne[2], ne[3], tr->name);
            bytes *= f[k];
        }
        if (zero)
            bytes = 0;
        uint64_t off_at = r->pos, off;
        if (rd_u64(r, &off, "tensor offset"))
            return -1;
        if (!r->fill)
            continue;
        struct cw_gguf_tensor *t = &g->tensors[i];
        memcpy(t->name, name.ptr, name.len);
        t->name[name.len] = '\0';
        t->n_dims = n_dims;
        memcpy(t->ne, ne, sizeof ne);
        t->type = (enum cw_qtype)type;
        t->offset = off;
        t->nbytes = bytes;
        if (off % g->alignment)
            return fail(r, off_at, "tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                        nb, off, g->alignment);
        uint64_t room = g->size - g->data_offset; /* data_offset <= size checked by caller */
        if (off > room)
            return fail(r, off_at, "tensor '%s': data offset %" PRIu64 " is past end of file (data section "
                        "[%" PRIu64 ", %" PRIu64 "))", nb, off, g->data_offset, g->size);
        if (bytes > room - off)
            return fail(r, off_at, "tensor '%s': data [%" PRIu64 ", %" PRIu64 ") extends past end of file (size %"
                        PRIu64 ")", nb, sat_add(g->data_offset, off),
                        sat_add(sat_add(g->data_offset, off), bytes), g->size);
        t->data = g->base + g->data_offset + off;
        uint64_t h = hash(name.ptr, name.len) & m->t_mask;
        for (;; h = (h + 1) & m->t_mask) {
            uint32_t e = m->t_hash[h];
            if (!e) {
                m->t_hash[h] = (uint32_t)(i + 1);
                break;
            }
            if (!strcmp(g->tensors[e - 1].name, t->name))
                return fail(r, at, "duplicate tensor name '%s'", nb);
        }
    }
    return 0;
}

/* Sorts tensor indices by offset with a merge sort (no global state). */
static void sort_idx(uint32_t *a, uint32_t *tmp, uint64_t n, const struct cw_gguf_tensor *t)
{
    if (n < 2)
        return;
    uint64_t h = n / 2;
    sort_idx(a, tmp, h, t);
    sort_idx(a + h, tmp, n - h, t);
    uint64_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        const struct cw_gguf_tensor *x = &t[a[i]], *y = &t[a[j]];
        bool take_left = x->offset < y->offset || (x->offset == y->offset && x->nbytes <= y->nbytes);
        tmp[k++] = take_left ? a[i++] : a[j++];
    }
    while (i < h)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

static int check_overlap(struct rd *r, struct cw_gguf *g, uint32_t *idx, uint32_t *tmp)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        idx[i] = (uint32_t)i;
    sort_idx(idx, tmp, g->n_tensors, g->tensors);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const struct cw_gguf_tensor *a = &g->tensors[idx[i - 1]], *b = &g->tensors[idx[i]];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset)
            return fail(r, g->data_offset + b->offset, "tensor '%s': data [%" PRIu64 ", %" PRIu64
                        ") overlaps tensor '%s' [%" PRIu64 ", %" PRIu64 ")", b->name,
                        g->data_offset + b->offset, g->data_offset + b->offset + b->nbytes, a->name,
                        g->data_offset + a->offset, g->data_offset + a->offset + a->nbytes);
    }
    return 0;
}

static void *align_ptr(uint8_t **p, uint64_t n, uint64_t size)
{
    void *q = *p;
    *p += (n * size + 7) & ~(uint64_t)7;
    return q;
}

int cw_gguf_parse(struct cw_gguf *g, const void *buf, uint64_t len, const char *name,
                  struct cw_err *err)
{
    memset(g, 0, sizeof *g);
    snprintf(g->path, sizeof g->path, "%s", name ? name : "<memory>");
    struct rd r = {.b = buf, .size = len, .name = g->path, .err = err};
    g->base = buf;
    g->size = len;
    g->alignment = CW_GGUF_DEFAULT_ALIGNMENT;
    uint32_t magic;
    if (!buf && len)
        return cw_errf(err, CW_ERR_INVALID, "gguf: %s: no buffer", g->path);
    if (rd_u32(&r, &magic, "magic"))
        return -1;
    if (magic != GGUF_MAGIC)
        return fail(&r, 0, "bad magic 0x%08" PRIx32 " (not a GGUF file)", magic);
    if (rd_u32(&r, &g->version, "version"))
        return -1;
    if ((g->version & 0xffff) == 0 && g->version)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "gguf: %s: offset 4: version 0x%08" PRIx32
                       " looks big-endian; big-endian GGUF files are not supported", g->path, g->version);
    if (g->version == 1)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "gguf: %s: offset 4: GGUF version 1 is not supported "
                       "(only versions 2 and 3)", g->path);
    if (g->version != 2 && g->version != 3)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "gguf: %s: offset 4: unsupported GGUF version %" PRIu32
                       " (only versions 2 and 3)", g->path, g->version);
    uint64_t nt_at = r.pos;
    if (rd_u64(&r, &g->n_tensors, "tensor count"))
        return -1;
    uint64_t nkv_at = r.pos;
    if (rd_u64(&r, &g->n_kv, "metadata count"))
        return -1;
    /* each tensor info takes >= 32 bytes, each key/value >= 13 */
    if (g->n_tensors > (r.size - r.pos) / 32)
        return fail(&r, nt_at, "tensor count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                    g->n_tensors, r.size - r.pos);
    if (g->n_kv > (r.size - r.pos) / 13)
        return fail(&r, nkv_at, "metadata count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                    g->n_kv, r.size - r.pos);

    /* pass 1: validate and count */
    uint64_t kv_at = r.pos;
    if (rd_kvs(&r, g, NULL))
        return -1;
    uint64_t ti_at = r.pos;
    if (rd_tensors(&r, g, NULL))
        return -1;
    uint64_t end = r.pos;

    /* one block for the whole directory; every count is bounded by len */
    struct mem m = {.kv_mask = table_size(g->n_kv) - 1, .t_mask = table_size(g->n_tensors) - 1};
    uint64_t bytes = 8 * 9 + sizeof(struct mem) + g->n_kv * sizeof(struct cw_gguf_kv) +
                     r.n_strs * sizeof(struct cw_gguf_str) + r.n_items * sizeof(struct cw_gguf_value) +
                     g->n_tensors * sizeof(struct cw_gguf_tensor) +
                     (m.kv_mask + 1 + m.t_mask + 1 + 2 * g->n_tensors) * sizeof(uint32_t);
    uint8_t *blk = bytes <= SIZE_MAX ? calloc(1, (size_t)bytes) : NULL;
    if (!blk)
        return cw_errf(err, CW_ERR_NOMEM, "gguf: %s: out of memory for a %" PRIu64 "-byte directory",
                       g->path, bytes);
    uint8_t *p = blk;
    struct mem *mp = align_ptr(&p, 1, sizeof(struct mem));
    g->kv = align_ptr(&p, g->n_kv, sizeof(struct cw_gguf_kv));
    r.strs = align_ptr(&p, r.n_strs, sizeof(struct cw_gguf_str));
    r.items = align_ptr(&p, r.n_items, sizeof(struct cw_gguf_value));
    g->tensors = align_ptr(&p, g->n_tensors, sizeof(struct cw_gguf_tensor));
    m.kv_hash = align_ptr(&p, m.kv_mask + 1, sizeof(uint32_t));
    m.t_hash = align_ptr(&p, m.t_mask + 1, sizeof(uint32_t));
    uint32_t *idx = align_ptr(&p, g->n_tensors, sizeof(uint32_t));
    uint32_t *tmp = align_ptr(&p, g->n_tensors, sizeof(uint32_t));
    *mp = m;
    g->arena = blk;

    /* pass 2: fill and check what needs the whole picture */
    r.fill = true;
    r.pos = kv_at;
    if (rd_kvs(&r, g, mp))
        goto fail;
    /* the data section starts at the next multiple of the alignment */
    g->data_offset = end + (g->alignment - end % g->alignment) % g->alignment;
    if (g->data_offset > len || g->data_offset < end) {
        if (g->n_tensors) {
            fail(&r, end, "data section at %" PRIu64 " starts past end of file (size %" PRIu64 ")",
                 g->data_offset, len);
            goto fail;
        }
        g->data_offset = len;
    }
    r.pos = ti_at;
    if (rd_tensors(&r, g, mp) || check_overlap(&r, g, idx, tmp))
        goto fail;
    return 0;
fail:
    free(blk);
    g->arena = NULL;
    g->kv = NULL;
    g->tensors = NULL;
    return -1;
}

int cw_gguf_open(struct cw_gguf *g, const char *path, struct cw_err *err)
{
    memset(g, 0, sizeof *g);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cw_errf(err, CW_ERR_IO, "gguf: %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        cw_errf(err, CW_ERR_IO, "gguf: %s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
        close(fd);
        return cw_errf(err, CW_ERR_FORMAT, "gguf: %s: offset 0: %s", path,
                       S_ISREG(st.st_mode) ? "empty file" : "not a regular file");
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return cw_errf(err, CW_ERR_IO, "gguf: %s: cannot map: %s", path, strerror(errno));
    if (cw_gguf_parse(g, map, (uint64_t)st.st_size, path, err)) {
        munmap(map, (size_t)st.st_size);
        memset(g, 0, sizeof *g);
        return -1;
    }
    g->map = map;
    return 0;
}

void cw_gguf_close(struct cw_gguf *g)
{
    if (!g)
        return;
    free(g->arena);
    if (g->map)
        munmap(g->map, (size_t)g->size);
    memset(g, 0, sizeof *g);
}

/* ---- lookup ---------------------------------------------------------------- */

const struct cw_gguf_kv *cw_gguf_find_kv(const struct cw_gguf *g, const char *key)
{
    if (!g->arena || !key)
        return NULL;
    const struct mem *m = g->arena;
    size_t n = strlen(key);
    for (uint64_t h = hash(key, n) & m->kv_mask;; h = (h + 1) & m->kv_mask) {
        uint32_t e = m->kv_hash[h];
        if (!e)
            return NULL;
        const struct cw_gguf_kv *kv = &g->kv[e - 1];
        if (kv->key.len == n && !memcmp(kv->key.ptr, key, n))
            return kv;
    }
}

int64_t cw_gguf_find_tensor_index(const struct cw_gguf *g, const char *name)
{
    if (!g->arena || !name)
        return -1;
    const struct mem *m = g->arena;
    size_t n = strlen(name);
    if (n >= CW_GGUF_MAX_NAME)
        return -1;
    for (uint64_t h = hash(name, n) & m->t_mask;; h = (h + 1) & m->t_mask) {
        uint32_t e = m->t_hash[h];
        if (!e)
            return -1;
        if (!strcmp(g->tensors[e - 1].name, name))
            return e - 1;
    }
}

const struct cw_gguf_tensor *cw_gguf_find_tensor(const struct cw_gguf *g, const char *name)
{
    int64_t i = cw_gguf_find_tensor_index(g, name);
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- getters --------------------------------------------------------------- */

static bool is_uint(enum cw_gguf_type t)
{
    return t == CW_GGUF_U8 || t == CW_GGUF_U16 || t == CW_GGUF_U32 || t == CW_GGUF_U64;
}

static bool is_sint(enum cw_gguf_type t)
{
    return t == CW_GGUF_I8 || t == CW_GGUF_I16 || t == CW_GGUF_I32 || t == CW_GGUF_I64;
}

static const char *describe(const struct cw_gguf_value *v, char *buf, size_t cap)
{
    if (v->type == CW_GGUF_ARRAY)
        snprintf(buf, cap, "array of %s", cw_gguf_type_name(v->arr.type));
    else
        snprintf(buf, cap, "%s", cw_gguf_type_name(v->type));
    return buf;
}

/* Finds key; -1 with err set if absent (unless absent_ok, which returns 1). */
static int lookup(const struct cw_gguf *g, const char *key, const struct cw_gguf_kv **kv,
                  bool absent_ok, struct cw_err *err)
{
    *kv = cw_gguf_find_kv(g, key);
    if (*kv)
        return 0;
    if (absent_ok)
        return 1;
    return cw_errf(err, CW_ERR_NOTFOUND, "gguf: %s: key '%s' is missing", g->path, key);
}

static int wrong(const struct cw_gguf *g, const char *key, const struct cw_gguf_value *v,
                 const char *want, struct cw_err *err)
{
    char d[64];
    return cw_errf(err, CW_ERR_FORMAT, "gguf: %s: key '%s' is %s, expected %s", g->path, key,
                   describe(v, d, sizeof d), want);
}

/* An integer value as [lo..hi] range check; *neg says it is below zero. */
static int get_int(const struct cw_gguf *g, const char *key, const struct cw_gguf_value *v,
                   bool *neg, uint64_t *mag, struct cw_err *err)
{
    if (is_uint(v->type)) {
        *neg = false;
        *mag = v->u64;
    } else if (is_sint(v->type)) {
        *neg = v->i64 < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)v->i64 : (uint64_t)v->i64;
    } else {
        return wrong(g, key, v, "an integer", err);
    }
    return 0;
}

static int out_of_range(const struct cw_gguf *g, const char *key, const char *want,
                        struct cw_err *err)
{
    return cw_errf(err, CW_ERR_FORMAT, "gguf: %s: key '%s' does not fit in %s", g->path, key, want);
}

static int u32_of(const struct cw_gguf *g, const char *key, const struct cw_gguf_kv *kv,
                  uint32_t *out, struct cw_err *err)
{
    bool neg = false;
    uint64_t mag = 0;
    if (get_int(g, key, &kv->value, &neg, &mag, err))
        return -1;
    if (neg || mag > UINT32_MAX)
        return out_of_range(g, key, "u32", err);
    *out = (uint32_t)mag;
    return 0;
}

int cw_gguf_get_u32(const struct cw_gguf *g, const char *key, uint32_t *out, struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    if (lookup(g, key, &kv, false, err))
        return -1;
    return u32_of(g, key, kv, out, err);
}

int cw_gguf_get_u32_or(const struct cw_gguf *g, const char *key, uint32_t def, uint32_t *out,
                       struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    int rc = lookup(g, key, &kv, true, err);
    if (rc) {
        *out = def;
        return 0;
    }
    return u32_of(g, key, kv, out, err);
}

int cw_gguf_get_u64(const struct cw_gguf *g, const char *key, uint64_t *out, struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    bool neg = false;
    uint64_t mag = 0;
    if (lookup(g, key, &kv, false, err) || get_int(g, key, &kv->value, &neg, &mag, err))
        return -1;
    if (neg)
        return out_of_range(g, key, "u64", err);
    *out = mag;
    return 0;
}

int cw_gguf_get_i64(const struct cw_gguf *g, const char *key, int64_t *out, struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    bool neg = false;
    uint64_t mag = 0;
    if (lookup(g, key, &kv, false, err) || get_int(g, key, &kv->value, &neg, &mag, err))
        return -1;
    if (is_uint(kv->value.type) && mag > (uint64_t)INT64_MAX)
        return out_of_range(g, key, "i64", err);
    *out = is_uint(kv->value.type) ? (int64_t)mag : kv->value.i64;
    return 0;
}

static int f32_of(const struct cw_gguf *g, const char *key, const struct cw_gguf_kv *kv,
                  float *out, struct cw_err *err)
{
    const struct cw_gguf_value *v = &kv->value;
    if (v->type == CW_GGUF_F32 || v->type == CW_GGUF_F64)
        *out = (float)v->f64;
    else if (is_uint(v->type))
        *out = (float)v->u64;
    else if (is_sint(v->type))
        *out = (float)v->i64;
    else
        return wrong(g, key, v, "a number", err);
    return 0;
}

int cw_gguf_get_f32(const struct cw_gguf *g, const char *key, float *out, struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    if (lookup(g, key, &kv, false, err))
        return -1;
    return f32_of(g, key, kv, out, err);
}

int cw_gguf_get_f32_or(const struct cw_gguf *g, const char *key, float def, float *out,
                       struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    if (lookup(g, key, &kv, true, err)) {
        *out = def;
        return 0;
    }
    return f32_of(g, key, kv, out, err);
}

static int bool_of(const struct cw_gguf *g, const char *key, const struct cw_gguf_kv *kv,
                   bool *out, struct cw_err *err)
{
    if (kv->value.type != CW_GGUF_BOOL)
        return wrong(g, key, &kv->value, "bool", err);
    *out = kv->value.u64 != 0;
    return 0;
}

int cw_gguf_get_bool(const struct cw_gguf *g, const char *key, bool *out, struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    if (lookup(g, key, &kv, false, err))
        return -1;
    return bool_of(g, key, kv, out, err);
}

int cw_gguf_get_bool_or(const struct cw_gguf *g, const char *key, bool def, bool *out,
                        struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    if (lookup(g, key, &kv, true, err)) {
        *out = def;
        return 0;
    }
    return bool_of(g, key, kv, out, err);
}

int cw_gguf_get_str(const struct cw_gguf *g, const char *key, struct cw_gguf_str *out,
                    struct cw_err *err)
{
    const struct cw_gguf_kv *kv;
    if (lookup(g, key, &kv, false, err))
        return -1;
    if (kv->value.type != CW_GGUF_STRING)
        return wrong(g, key, &kv->value, "string", err);
    *out = kv->value.str;
    return 0;
}

int64_t cw_gguf_arr_i64(const struct cw_gguf_value *v, uint64_t i)
{
    const uint8_t *p = v->arr.data;
    switch (v->arr.type) {
    case CW_GGUF_U8:
    case CW_GGUF_BOOL: return p[i];
    case CW_GGUF_I8: return (int8_t)p[i];
    case CW_GGUF_U16: return (uint16_t)le(p + 2 * i, 2);
    case CW_GGUF_I16: return (int16_t)le(p + 2 * i, 2);
    case CW_GGUF_U32: return (uint32_t)le(p + 4 * i, 4);
    case CW_GGUF_I32: return (int32_t)le(p + 4 * i, 4);
    case CW_GGUF_U64:
    case CW_GGUF_I64: return (int64_t)le(p + 8 * i, 8);
    case CW_GGUF_F32:
    case CW_GGUF_F64: {
        /* truncated toward zero and clamped: converting an out-of-range double is undefined */
        double d = cw_gguf_arr_f64(v, i);
        if (!(d == d))
            return 0;
        if (d >= 9223372036854775807.0)
            return INT64_MAX;
        if (d <= -9223372036854775808.0)
            return INT64_MIN;
        return (int64_t)d;
    }
    default: return 0;
    }
}

double cw_gguf_arr_f64(const struct cw_gguf_value *v, uint64_t i)
{
    const uint8_t *p = v->arr.data;
    if (v->arr.type == CW_GGUF_F32) {
        uint32_t u = (uint32_t)le(p + 4 * i, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (v->arr.type == CW_GGUF_F64) {
        uint64_t u = le(p + 8 * i, 8);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    if (v->arr.type == CW_GGUF_U64)
        return (double)le(p + 8 * i, 8);
    if (v->arr.type == CW_GGUF_STRING || v->arr.type == CW_GGUF_ARRAY)
        return 0;
    return (double)cw_gguf_arr_i64(v, i);
}

char *cw_gguf_str_copy(struct cw_gguf_str s, char *dst, size_t cap)
{
    if (!cap)
        return dst;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n)
        memcpy(dst, s.ptr, n);
    dst[n] = '\0';
    return dst;
}

bool cw_gguf_str_eq(struct cw_gguf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && (n == 0 || !memcmp(s.ptr, z, n));
}
