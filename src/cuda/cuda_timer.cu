/* cuda_timer.cu — GPU time of enqueued work (see cuda_timer.h). */
#include <stdlib.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_timer.h"

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
