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

/* ---- median of reps ------------------------------------------------------- */

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Holds the stream for ns nanoseconds, so that the timed reps are all queued
 * before the first one runs (else short kernels time the host's launches). */
static __global__ void spin_kernel(long long ns)
{
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

extern "C" int cw_cuda_time(struct cw_cuda *c, cw_cuda_work_fn fn, void *ctx, int reps,
                            double *median_ms, struct cw_err *err)
{
    if (reps < 1 || reps > 4096)
        return cw_errf(err, CW_ERR_INVALID, "cuda timer: %d reps", reps);
    cudaEvent_t ev[2 * 4096 + 2];
    float ms[4096];
    int n_ev = 0, rc = -1;
    for (int i = 0; i < 2; i++)
        if (fn(ctx, i, err))
            return -1;
    for (; n_ev < 2 * reps; n_ev++)
        if (cudaEventCreate(&ev[n_ev]) != cudaSuccess) {
            cw_errf(err, CW_ERR_DEVICE, "cuda timer: cudaEventCreate failed");
            goto out;
        }
    spin_kernel<<<1, 1, 0, c->stream>>>(20000000LL + 100000LL * reps);
    for (int i = 0; i < reps; i++) {
        if (cudaEventRecord(ev[2 * i], c->stream) != cudaSuccess || fn(ctx, i, err) ||
            cudaEventRecord(ev[2 * i + 1], c->stream) != cudaSuccess) {
            if (!err->msg[0])
                cw_errf(err, CW_ERR_DEVICE, "cuda timer: cudaEventRecord failed");
            goto out;
        }
    }
    if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
        cw_errf(err, CW_ERR_DEVICE, "cuda timer: %s", cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    for (int i = 0; i < reps; i++)
        cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_f);
    *median_ms = ms[reps / 2];
    rc = 0;
out:
    for (int i = 0; i < n_ev; i++)
        cudaEventDestroy(ev[i]);
    return rc;
}
