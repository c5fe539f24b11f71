/* backend_open.c — choosing a backend by name (see backend.h). */
#include <string.h>

#include "backend.h"

#ifndef CWEN_HAVE_CUDA
int cw_backend_open_cuda(struct cw_backend **out, const struct cw_qwen35_weights *w,
                         const struct cw_backend_opts *o, struct cw_err *err)
{
    (void)out, (void)w, (void)o;
    return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: this build of cwen has no CUDA backend "
                   "(nvcc was not found, or -DCWEN_CUDA=OFF)");
}
#endif

int cw_backend_open(struct cw_backend **out, const char *name, const struct cw_qwen35_weights *w,
                    const struct cw_backend_opts *o, struct cw_err *err)
{
    if (!name || !strcmp(name, "auto")) {
        /* the GPU when one answers; otherwise the CPU, which always can */
        if (cw_backend_open_cuda(out, w, o, err) == 0)
            return 0;
        if (err->code != CW_ERR_UNSUPPORTED)
            return -1;
        return cw_backend_open_cpu(out, w, o, err);
    }
    if (!strcmp(name, "cpu"))
        return cw_backend_open_cpu(out, w, o, err);
    if (!strcmp(name, "cuda"))
        return cw_backend_open_cuda(out, w, o, err);
    return cw_errf(err, CW_ERR_INVALID, "unknown backend \"%s\" (expected cpu, cuda or auto)",
                   name);
}
