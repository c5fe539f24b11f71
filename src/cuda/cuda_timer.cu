/* cuda_timer.cu — CUDA-event timing on a context's stream (see cuda_timer.h). */
#include <stdlib.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_timer.h"

struct cw_cuda_timer {
    struct cw_cuda *c;
    cudaEvent_t a, b;
};

int cw_cuda_timer_open(struct cw_cuda *c, struct cw_cuda_timer **out, struct cw_err *err)
{
    struct cw_cuda_timer *t = (struct cw_cuda_timer *)calloc(1, sizeof *t);
    *out = NULL;
    if (!t)
        return cw_errf(err, CW_ERR_NOMEM, "cuda timer: out of memory");
    t->c = c;
    if (cudaEventCreate(&t->a) != cudaSuccess || cudaEventCreate(&t->b) != cudaSuccess) {
        cw_cuda_timer_close(t);
        return cw_errf(err, CW_ERR_DEVICE, "cuda timer: %s", cudaGetErrorString(cudaGetLastError()));
    }
    *out = t;
    return 0;
}

void cw_cuda_timer_close(struct cw_cuda_timer *t)
{
    if (!t)
        return;
    if (t->a)
        cudaEventDestroy(t->a);
    if (t->b)
        cudaEventDestroy(t->b);
    free(t);
}

int cw_cuda_timer_start(struct cw_cuda_timer *t, struct cw_err *err)
{
    CW_CUDA_TRY(err, cudaEventRecord(t->a, t->c->stream));
    return 0;
}

int cw_cuda_timer_stop(struct cw_cuda_timer *t, double *us, struct cw_err *err)
{
    float ms = 0.0f;
    CW_CUDA_TRY(err, cudaEventRecord(t->b, t->c->stream));
    CW_CUDA_TRY(err, cudaEventSynchronize(t->b));
    CW_CUDA_TRY(err, cudaEventElapsedTime(&ms, t->a, t->b));
    *us = 1000.0 * ms;
    return 0;
}
