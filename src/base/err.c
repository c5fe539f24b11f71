/* err.c — formatting of struct cw_err (see err.h). */
#include "base/err.h"

#include <stdio.h>
#include <string.h>

int cw_verrf(struct cw_err *err, int code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return -1;
}

int cw_errf(struct cw_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cw_verrf(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

int cw_err_prefix(struct cw_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* shift the old message right by "prefix: " and drop what overflows */
    size_t np = strlen(prefix), cap = sizeof err->msg;
    if (np + 2 >= cap)
        np = cap - 3;
    size_t old = strnlen(err->msg, cap - 1);
    if (np + 2 + old >= cap)
        old = cap - 1 - np - 2;
    memmove(err->msg + np + 2, err->msg, old);
    err->msg[np + 2 + old] = '\0';
    memcpy(err->msg, prefix, np);
    err->msg[np] = ':';
    err->msg[np + 1] = ' ';
    return -1;
}

void cw_err_clear(struct cw_err *err)
{
    if (err) {
        err->code = CW_OK;
        err->msg[0] = '\0';
    }
}
