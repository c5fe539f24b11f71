/* err.h — errors as values.
 *
 * Owns struct cw_err, the one way every cwen function reports failure: it
 * returns -1 (or NULL) and fills a caller-provided cw_err with a code and a
 * message that carries context ("gguf: model.gguf: offset 120: ..."). Asserts
 * are kept for cwen's own invariants, never for bad input. */
#ifndef CW_ERR_H
#define CW_ERR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum cw_err_code {
    CW_OK = 0,
    CW_ERR_IO,        /* open/read/write/mmap failed */
    CW_ERR_FORMAT,    /* a file or request is malformed */
    CW_ERR_UNSUPPORTED, /* well-formed but not something cwen handles */
    CW_ERR_NOMEM,
    CW_ERR_INVALID,   /* bad argument from the caller */
    CW_ERR_NOTFOUND,
    CW_ERR_DEVICE,    /* GPU runtime errors */
};

struct cw_err {
    int code;
    char msg[512];
};

/* Sets err (if non-NULL) to code and the formatted message; returns -1 so
 * that callers can write `return cw_errf(err, ...)`. */
int cw_errf(struct cw_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cw_verrf(struct cw_err *err, int code, const char *fmt, va_list ap);

/* Prepends "prefix: " to an error already set (adds context on the way up). */
int cw_err_prefix(struct cw_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void cw_err_clear(struct cw_err *err);

#ifdef __cplusplus
}
#endif

#endif
