/* cuda_backend.cu — the CUDA backend's entry (see backend.h). Placeholder
 * until the forward pass lands: says so, and the engine falls back. */
#include "backend.h"

extern "C" int cw_backend_open_cuda(struct cw_backend **out, const struct cw_qwen35_weights *w,
                                    const struct cw_backend_opts *o, struct cw_err *err)
{
    (void)out, (void)w, (void)o;
    return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: the CUDA forward pass is not built yet");
}
