/* cuda_timer.h — GPU time of enqueued work, for the benchmarks in tests/gpu
 * (plain C; CUDA events recorded on the context's stream around each rep). */
#ifndef CW_CUDA_TIMER_H
#define CW_CUDA_TIMER_H

#include "base/err.h"
#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues one repetition (rep = 0, 1, ...) on c's stream; 0 or -1 with err. */
typedef int (*cw_cuda_work_fn)(void *ctx, int rep, struct cw_err *err);

/* Runs fn reps times (after 2 untimed warm-up calls, and behind a spin
 * kernel so that every rep is queued before the first starts: short kernels
 * would otherwise time the host's launches), each between two events, and
 * returns the median of the reps' GPU times in milliseconds. */
int cw_cuda_time(struct cw_cuda *c, cw_cuda_work_fn fn, void *ctx, int reps, double *median_ms,
                 struct cw_err *err);

#ifdef __cplusplus
}
#endif
#endif
