/* gguf.h — reading and writing GGUF files.
 *
 * Owns the GGUF container: cw_gguf_parse() turns a byte buffer into a
 * validated directory of metadata and tensors without copying tensor data
 * (pure, fuzzable); cw_gguf_open() maps a file and parses it. Every size and
 * offset is overflow-checked, tensors must lie inside the file without
 * overlapping, types must be known and shapes whole blocks; a bad file is
 * refused with a message naming the file, the offset and the fault.
 * The writer (cw_gguf_writer_*) builds files for the generator and tests.
 * What the tensors mean is model/'s business, not this file's. */
#ifndef CW_GGUF_H
#define CW_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "gguf/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CW_GGUF_MAX_DIMS 4
#define CW_GGUF_MAX_NAME 64 /* tensor names are shorter than this (as ggml) */
#define CW_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types (GGUF numbering). */
enum cw_gguf_type {
    CW_GGUF_U8 = 0,
    CW_GGUF_I8 = 1,
    CW_GGUF_U16 = 2,
    CW_GGUF_I16 = 3,
    CW_GGUF_U32 = 4,
    CW_GGUF_I32 = 5,
    CW_GGUF_F32 = 6,
    CW_GGUF_BOOL = 7,
    CW_GGUF_STRING = 8,
    CW_GGUF_ARRAY = 9,
    CW_GGUF_U64 = 10,
    CW_GGUF_I64 = 11,
    CW_GGUF_F64 = 12,
    CW_GGUF_TYPE_COUNT = 13,
};

/* A string inside the mapped file: not NUL-terminated. */
struct cw_gguf_str {
    const char *ptr;
    uint64_t len;
};

/* A metadata value. Scalars are widened into u64/i64/f64 according to type
 * (bool -> u64 0/1). Arrays keep their element type; arrays of scalars point
 * at the raw little-endian elements in the file, arrays of strings and of
 * arrays have a parsed element table (owned by the cw_gguf). */
struct cw_gguf_value {
    enum cw_gguf_type type;
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        struct cw_gguf_str str;
        struct {
            enum cw_gguf_type type; /* element type */
            uint64_t n;
            const void *data;              /* scalar elements, in the file */
            const struct cw_gguf_str *strs; /* type == STRING: n entries */
            const struct cw_gguf_value *items; /* type == ARRAY: n entries */
        } arr;
    };
};

struct cw_gguf_kv {
    struct cw_gguf_str key;
    struct cw_gguf_value value;
};

struct cw_gguf_tensor {
    char name[CW_GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[CW_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    enum cw_qtype type;
    uint64_t offset; /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* borrowed: inside the mapping (or parse buffer) */
};

struct cw_gguf {
    char path[256]; /* for messages ("<memory>" when parsed from a buffer) */
    uint32_t version;
    uint64_t n_kv;
    struct cw_gguf_kv *kv;
    uint64_t n_tensors;
    struct cw_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* file offset of the data section */
    const uint8_t *base;  /* the whole file */
    uint64_t size;
    /* private */
    void *map;      /* non-NULL when cw_gguf_open mapped the file */
    void *arena;    /* allocations made while parsing */
};

/* Parses buf[0..len) (which must outlive g). name is used in messages.
 * Returns 0, or -1 with err set; on failure g holds nothing to free. */
int cw_gguf_parse(struct cw_gguf *g, const void *buf, uint64_t len,
                  const char *name, struct cw_err *err);

/* Maps path read-only and parses it. */
int cw_gguf_open(struct cw_gguf *g, const char *path, struct cw_err *err);

/* Frees what parse/open allocated and unmaps. Safe on a zeroed struct. */
void cw_gguf_close(struct cw_gguf *g);

/* Lookup. Return NULL / -1 when absent. */
const struct cw_gguf_kv *cw_gguf_find_kv(const struct cw_gguf *g, const char *key);
const struct cw_gguf_tensor *cw_gguf_find_tensor(const struct cw_gguf *g, const char *name);
int64_t cw_gguf_find_tensor_index(const struct cw_gguf *g, const char *name);

/* Typed getters. Each returns 0 and sets *out; -1 with err set (naming the
 * file and key) when the key is missing or of an incompatible type. Integer
 * getters accept any integer type whose value fits; cw_gguf_get_f32 accepts
 * f32/f64 and integers. *_or variants return def when the key is absent (but
 * still fail on a wrong type). */
int cw_gguf_get_u32(const struct cw_gguf *g, const char *key, uint32_t *out, struct cw_err *err);
int cw_gguf_get_u64(const struct cw_gguf *g, const char *key, uint64_t *out, struct cw_err *err);
int cw_gguf_get_i64(const struct cw_gguf *g, const char *key, int64_t *out, struct cw_err *err);
int cw_gguf_get_f32(const struct cw_gguf *g, const char *key, float *out, struct cw_err *err);
int cw_gguf_get_bool(const struct cw_gguf *g, const char *key, bool *out, struct cw_err *err);
int cw_gguf_get_str(const struct cw_gguf *g, const char *key, struct cw_gguf_str *out, struct cw_err *err);
int cw_gguf_get_u32_or(const struct cw_gguf *g, const char *key, uint32_t def, uint32_t *out, struct cw_err *err);
int cw_gguf_get_f32_or(const struct cw_gguf *g, const char *key, float def, float *out, struct cw_err *err);
int cw_gguf_get_bool_or(const struct cw_gguf *g, const char *key, bool def, bool *out, struct cw_err *err);

/* Element i of an array of integers / bools as i64 (any integer element
 * type); of floats as double. Caller checks i < arr.n. */
int64_t cw_gguf_arr_i64(const struct cw_gguf_value *v, uint64_t i);
double cw_gguf_arr_f64(const struct cw_gguf_value *v, uint64_t i);

/* Copies a file string into a NUL-terminated buffer (truncating); returns dst. */
char *cw_gguf_str_copy(struct cw_gguf_str s, char *dst, size_t cap);
bool cw_gguf_str_eq(struct cw_gguf_str s, const char *z);

/* Name of a metadata type ("u32", "string", "array", ...). */
const char *cw_gguf_type_name(uint32_t t);

/* ---- writer ---------------------------------------------------------------
 * Collect metadata and tensor descriptions, then cw_gguf_writer_write_header()
 * writes everything up to the data section; tensor bytes are then written at
 * cw_gguf_writer_tensor_offset() (pwrite from several threads is fine), and
 * cw_gguf_writer_finish() pads the file to its full size.
 *   w = cw_gguf_writer_new(32);  set_*(...);  add_tensor(...);
 *   write_header(w, fd);  pwrite(fd, data, nbytes, tensor_offset(w, i));
 *   finish(w, fd);  cw_gguf_writer_free(w);
 * Keys are kept in insertion order; setting a key twice replaces it. */
struct cw_gguf_writer;

struct cw_gguf_writer *cw_gguf_writer_new(uint64_t alignment);
void cw_gguf_writer_free(struct cw_gguf_writer *w);

int cw_gguf_writer_set_u8(struct cw_gguf_writer *w, const char *key, uint8_t v);
int cw_gguf_writer_set_u32(struct cw_gguf_writer *w, const char *key, uint32_t v);
int cw_gguf_writer_set_i32(struct cw_gguf_writer *w, const char *key, int32_t v);
int cw_gguf_writer_set_u64(struct cw_gguf_writer *w, const char *key, uint64_t v);
int cw_gguf_writer_set_f32(struct cw_gguf_writer *w, const char *key, float v);
int cw_gguf_writer_set_bool(struct cw_gguf_writer *w, const char *key, bool v);
int cw_gguf_writer_set_str(struct cw_gguf_writer *w, const char *key, const char *v);
/* An array of n scalars of element type t, elements given as raw
 * little-endian values of that type. */
int cw_gguf_writer_set_arr(struct cw_gguf_writer *w, const char *key, enum cw_gguf_type t,
                           const void *data, uint64_t n);
int cw_gguf_writer_set_arr_str(struct cw_gguf_writer *w, const char *key,
                               const char *const *strs, uint64_t n);
/* Copies any parsed value (nested arrays included) from a read file. */
int cw_gguf_writer_set_value(struct cw_gguf_writer *w, const char *key,
                             const struct cw_gguf_value *v);

/* Adds a tensor description; returns its index or -1 (bad name/shape/type). */
int64_t cw_gguf_writer_add_tensor(struct cw_gguf_writer *w, const char *name, uint32_t n_dims,
                                  const int64_t *ne, enum cw_qtype type, struct cw_err *err);
uint64_t cw_gguf_writer_tensor_offset(const struct cw_gguf_writer *w, int64_t i); /* absolute */
uint64_t cw_gguf_writer_tensor_nbytes(const struct cw_gguf_writer *w, int64_t i);
uint64_t cw_gguf_writer_total_size(const struct cw_gguf_writer *w);

int cw_gguf_writer_write_header(struct cw_gguf_writer *w, int fd, struct cw_err *err);
int cw_gguf_writer_finish(struct cw_gguf_writer *w, int fd, struct cw_err *err);

/* Convenience for small files (tests): header + every tensor from data[i]. */
int cw_gguf_writer_write_file(struct cw_gguf_writer *w, const char *path,
                              const void *const *data, struct cw_err *err);

#ifdef __cplusplus
}
#endif

#endif
