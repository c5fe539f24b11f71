/* gguf_write.c — the GGUF writer (version 3, little-endian).
 *
 * Owns building GGUF files: metadata is serialised as it is set (keys in
 * insertion order, a second set replaces the value in place), tensors are
 * described first and laid out lazily (each at a multiple of the alignment
 * from the data section, padded like ggml does), so that the header can be
 * written once and tensor bytes pwritten afterwards from any thread.
 * Reading is gguf.c's business. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GGUF_VERSION 3
#define MAX_DEPTH 8 /* the reader refuses deeper nesting */

struct buf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
};

struct wkv {
    char *key;
    uint8_t *val; /* type id + encoded value */
    size_t len;
};

struct wtensor {
    char name[CW_GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[CW_GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t nbytes;
    uint64_t off; /* from the data section */
};

struct cw_gguf_writer {
    uint64_t alignment;
    struct wkv *kv;
    size_t n_kv, cap_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
    uint64_t hdr;       /* header bytes so far (before the alignment padding) */
    uint64_t data_size; /* the data section, each tensor padded to the alignment */
};

/* Lays the tensors out again (after the alignment changed). */
static void relayout(struct cw_gguf_writer *w);

/* The data section starts at the first multiple of the alignment after the header. */
static uint64_t data_offset(const struct cw_gguf_writer *w);

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_le(struct buf *b, uint64_t v, unsigned n)
{
    uint8_t x[8];
    for (unsigned i = 0; i < n; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, n);
}

static void put_str(struct buf *b, const char *s, uint64_t n)
{
    put_le(b, n, 8);
    put(b, s, (size_t)n);
}

static uint64_t pad(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

static unsigned scalar_bytes(uint32_t t)
{
    switch (t) {
    case CW_GGUF_U8: case CW_GGUF_I8: case CW_GGUF_BOOL: return 1;
    case CW_GGUF_U16: case CW_GGUF_I16: return 2;
    case CW_GGUF_U32: case CW_GGUF_I32: case CW_GGUF_F32: return 4;
    case CW_GGUF_U64: case CW_GGUF_I64: case CW_GGUF_F64: return 8;
    default: return 0;
    }
}

struct cw_gguf_writer *cw_gguf_writer_new(uint64_t alignment)
{
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > UINT32_MAX)
        return NULL;
    struct cw_gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->alignment = CW_GGUF_DEFAULT_ALIGNMENT;
    w->hdr = 4 + 4 + 8 + 8;
    if (alignment != CW_GGUF_DEFAULT_ALIGNMENT &&
        cw_gguf_writer_set_u32(w, "general.alignment", (uint32_t)alignment)) {
        cw_gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void cw_gguf_writer_free(struct cw_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

/* Stores an encoded value (b is taken over) under key. */
static int set_encoded(struct cw_gguf_writer *w, const char *key, struct buf *b)
{
    if (b->oom || !key || !*key) {
        free(b->p);
        return -1;
    }
    if (!strcmp(key, "general.alignment")) {
        /* the alignment is part of the layout: accept only what the reader accepts */
        uint64_t a = b->n == 8 ? (uint64_t)b->p[4] | (uint64_t)b->p[5] << 8 |
                                     (uint64_t)b->p[6] << 16 | (uint64_t)b->p[7] << 24 : 0;
        bool is_u32 = b->n == 8 && b->p[0] == CW_GGUF_U32 && !b->p[1] && !b->p[2] && !b->p[3];
        if (!is_u32 || a == 0 || (a & (a - 1))) {
            free(b->p);
            return -1;
        }
        w->alignment = a;
        relayout(w);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].val);
            w->hdr = w->hdr - w->kv[i].len + b->n;
            w->kv[i].val = b->p;
            w->kv[i].len = b->n;
            return 0;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        struct wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return -1;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b->p);
        return -1;
    }
    w->kv[w->n_kv++] = (struct wkv){k, b->p, b->n};
    w->hdr += 8 + strlen(key) + b->n;
    return 0;
}

static int set_scalar(struct cw_gguf_writer *w, const char *key, uint32_t t, uint64_t raw)
{
    struct buf b = {0};
    put_le(&b, t, 4);
    put_le(&b, raw, scalar_bytes(t));
    return set_encoded(w, key, &b);
}

int cw_gguf_writer_set_u8(struct cw_gguf_writer *w, const char *key, uint8_t v)
{
    return set_scalar(w, key, CW_GGUF_U8, v);
}

int cw_gguf_writer_set_u32(struct cw_gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, CW_GGUF_U32, v);
}

int cw_gguf_writer_set_i32(struct cw_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, CW_GGUF_I32, (uint32_t)v);
}

int cw_gguf_writer_set_u64(struct cw_gguf_writer *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, CW_GGUF_U64, v);
}

int cw_gguf_writer_set_f32(struct cw_gguf_writer *w, const char *key, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return set_scalar(w, key, CW_GGUF_F32, u);
}

int cw_gguf_writer_set_bool(struct cw_gguf_writer *w, const char *key, bool v)
{
    return set_scalar(w, key, CW_GGUF_BOOL, v ? 1 : 0);
}

int cw_gguf_writer_set_str(struct cw_gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return -1;
    struct buf b = {0};
    put_le(&b, CW_GGUF_STRING, 4);
    put_str(&b, v, strlen(v));
    return set_encoded(w, key, &b);
}

int cw_gguf_writer_set_arr(struct cw_gguf_writer *w, const char *key, enum cw_gguf_type t,
                           const void *data, uint64_t n)
{
    unsigned sz = scalar_bytes(t);
    if (!sz || (n && !data) || n > SIZE_MAX / sz)
        return -1;
    struct buf b = {0};
    put_le(&b, CW_GGUF_ARRAY, 4);
    put_le(&b, t, 4);
    put_le(&b, n, 8);
    put(&b, data, (size_t)(n * sz));
    return set_encoded(w, key, &b);
}

int cw_gguf_writer_set_arr_str(struct cw_gguf_writer *w, const char *key,
                               const char *const *strs, uint64_t n)
{
    if (n && !strs)
        return -1;
    struct buf b = {0};
    put_le(&b, CW_GGUF_ARRAY, 4);
    put_le(&b, CW_GGUF_STRING, 4);
    put_le(&b, n, 8);
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(b.p);
            return -1;
        }
        put_str(&b, strs[i], strlen(strs[i]));
    }
    return set_encoded(w, key, &b);
}

/* Encodes the body of an array value (element type, count, elements). */
static int put_array(struct buf *b, const struct cw_gguf_value *v, int depth)
{
    uint32_t et = v->arr.type;
    uint64_t n = v->arr.n;
    if (depth >= MAX_DEPTH)
        return -1;
    put_le(b, et, 4);
    put_le(b, n, 8);
    if (et == CW_GGUF_STRING) {
        if (n && !v->arr.strs)
            return -1;
        for (uint64_t i = 0; i < n; i++)
            put_str(b, v->arr.strs[i].ptr, v->arr.strs[i].len);
    } else if (et == CW_GGUF_ARRAY) {
        if (n && !v->arr.items)
            return -1;
        for (uint64_t i = 0; i < n; i++)
            if (v->arr.items[i].type != CW_GGUF_ARRAY || put_array(b, &v->arr.items[i], depth + 1))
                return -1;
    } else {
        unsigned sz = scalar_bytes(et);
        if (!sz || (n && !v->arr.data) || n > SIZE_MAX / sz)
            return -1;
        put(b, v->arr.data, (size_t)(n * sz));
    }
    return 0;
}

int cw_gguf_writer_set_value(struct cw_gguf_writer *w, const char *key,
                             const struct cw_gguf_value *v)
{
    struct buf b = {0};
    uint32_t t = v->type;
    put_le(&b, t, 4);
    if (t == CW_GGUF_STRING) {
        put_str(&b, v->str.ptr, v->str.len);
    } else if (t == CW_GGUF_ARRAY) {
        if (put_array(&b, v, 0)) {
            free(b.p);
            return -1;
        }
    } else if (t == CW_GGUF_F32) {
        float f = (float)v->f64;
        uint32_t u;
        memcpy(&u, &f, 4);
        put_le(&b, u, 4);
    } else if (t == CW_GGUF_F64) {
        uint64_t u;
        memcpy(&u, &v->f64, 8);
        put_le(&b, u, 8);
    } else if (scalar_bytes(t)) {
        /* signed values are stored as i64: the low bytes are the two's complement */
        put_le(&b, v->u64, scalar_bytes(t));
    } else {
        free(b.p);
        return -1;
    }
    return set_encoded(w, key, &b);
}

int64_t cw_gguf_writer_add_tensor(struct cw_gguf_writer *w, const char *name, uint32_t n_dims,
                                  const int64_t *ne, enum cw_qtype type, struct cw_err *err)
{
    size_t len = name ? strlen(name) : 0;
    if (!name || len == 0 || len >= CW_GGUF_MAX_NAME)
        return cw_errf(err, CW_ERR_INVALID, "gguf: writer: tensor name '%s' must be 1..%d bytes",
                       name ? name : "(null)", CW_GGUF_MAX_NAME - 1);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return cw_errf(err, CW_ERR_INVALID, "gguf: writer: duplicate tensor '%s'", name);
    if (n_dims < 1 || n_dims > CW_GGUF_MAX_DIMS)
        return cw_errf(err, CW_ERR_INVALID, "gguf: writer: tensor '%s': n_dims %" PRIu32
                       " is not in 1..%d", name, n_dims, CW_GGUF_MAX_DIMS);
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    if (!tr)
        return cw_errf(err, CW_ERR_INVALID, "gguf: writer: tensor '%s': unknown type %d", name, (int)type);
    struct wtensor t = {.n_dims = n_dims, .ne = {1, 1, 1, 1}, .type = type};
    memcpy(t.name, name, len + 1);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0)
            return cw_errf(err, CW_ERR_INVALID, "gguf: writer: tensor '%s': ne[%" PRIu32 "] < 0", name, d);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % tr->block_elems)
        return cw_errf(err, CW_ERR_INVALID, "gguf: writer: tensor '%s': ne[0] = %" PRId64
                       " is not a multiple of the %s block size %" PRId64, name, t.ne[0], tr->name,
                       tr->block_elems);
    uint64_t bytes = (uint64_t)(t.ne[0] / tr->block_elems);
    uint64_t f[4] = {tr->block_bytes, (uint64_t)t.ne[1], (uint64_t)t.ne[2], (uint64_t)t.ne[3]};
    for (int k = 0; k < 4; k++) {
        if (f[k] && bytes > ((uint64_t)INT64_MAX >> 1) / f[k])
            return cw_errf(err, CW_ERR_INVALID, "gguf: writer: tensor '%s': size overflows", name);
        bytes *= f[k];
    }
    t.nbytes = bytes;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        struct wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p)
            return cw_errf(err, CW_ERR_NOMEM, "gguf: writer: out of memory");
        w->t = p;
        w->cap_t = cap;
    }
    t.off = w->data_size;
    w->data_size += pad(t.nbytes, w->alignment);
    w->hdr += 8 + len + 4 + 8 * n_dims + 4 + 8;
    w->t[w->n_t] = t;
    return (int64_t)w->n_t++;
}

static void relayout(struct cw_gguf_writer *w)
{
    w->data_size = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].off = w->data_size;
        w->data_size += pad(w->t[i].nbytes, w->alignment);
    }
}

static uint64_t data_offset(const struct cw_gguf_writer *w)
{
    return pad(w->hdr, w->alignment);
}

uint64_t cw_gguf_writer_tensor_offset(const struct cw_gguf_writer *w, int64_t i)
{
    return i >= 0 && (size_t)i < w->n_t ? data_offset(w) + w->t[i].off : 0;
}

uint64_t cw_gguf_writer_tensor_nbytes(const struct cw_gguf_writer *w, int64_t i)
{
    return i >= 0 && (size_t)i < w->n_t ? w->t[i].nbytes : 0;
}

uint64_t cw_gguf_writer_total_size(const struct cw_gguf_writer *w)
{
    return data_offset(w) + w->data_size;
}

static int pwrite_all(int fd, const uint8_t *p, uint64_t n, uint64_t off, struct cw_err *err)
{
    while (n) {
        ssize_t k = pwrite(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return cw_errf(err, CW_ERR_IO, "gguf: writer: write at %" PRIu64 " failed: %s", off,
                           k < 0 ? strerror(errno) : "short write");
        p += k;
        n -= (uint64_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int cw_gguf_writer_write_header(struct cw_gguf_writer *w, int fd, struct cw_err *err)
{
    struct buf b = {0};
    put_le(&b, 0x46554747u, 4); /* "GGUF" */
    put_le(&b, GGUF_VERSION, 4);
    put_le(&b, w->n_t, 8);
    put_le(&b, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&b, w->kv[i].key, strlen(w->kv[i].key));
        put(&b, w->kv[i].val, w->kv[i].len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        put_str(&b, t->name, strlen(t->name));
        put_le(&b, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_le(&b, (uint64_t)t->ne[d], 8);
        put_le(&b, t->type, 4);
        put_le(&b, t->off, 8);
    }
    while (!b.oom && b.n < data_offset(w))
        put_le(&b, 0, 1);
    int rc = b.oom ? cw_errf(err, CW_ERR_NOMEM, "gguf: writer: out of memory")
                   : pwrite_all(fd, b.p, b.n, 0, err);
    free(b.p);
    return rc;
}

int cw_gguf_writer_finish(struct cw_gguf_writer *w, int fd, struct cw_err *err)
{
    uint64_t total = cw_gguf_writer_total_size(w);
    /* padding between and after tensors reads as zeros once the file has its size */
    if (ftruncate(fd, (off_t)total) != 0)
        return cw_errf(err, CW_ERR_IO, "gguf: writer: cannot set file size to %" PRIu64 ": %s", total,
                       strerror(errno));
    return 0;
}

int cw_gguf_writer_write_file(struct cw_gguf_writer *w, const char *path,
                              const void *const *data, struct cw_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return cw_errf(err, CW_ERR_IO, "gguf: %s: cannot create: %s", path, strerror(errno));
    int rc = cw_gguf_writer_write_header(w, fd, err);
    for (size_t i = 0; rc == 0 && data && i < w->n_t; i++)
        if (data[i])
            rc = pwrite_all(fd, data[i], w->t[i].nbytes, data_offset(w) + w->t[i].off, err);
    if (rc == 0)
        rc = cw_gguf_writer_finish(w, fd, err);
    if (close(fd) != 0 && rc == 0)
        rc = cw_errf(err, CW_ERR_IO, "gguf: %s: close failed: %s", path, strerror(errno));
    if (rc)
        cw_err_prefix(err, "gguf: %s", path);
    return rc;
}
