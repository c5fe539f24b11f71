/* cuda_timer.h — device time of enqueued work (CUDA events on a context's
 * stream), for the benchmarks and the GPU tests' timing modes: a start/stop
 * pair around any stretch of the stream, and a median over queued reps. The
 * kernels never use it. */
#ifndef CW_CUDA_TIMER_H
#define CW_CUDA_TIMER_H

#include "base/err.h"
#include "cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cw_cuda_timer; /* two events on c's stream */

int cw_cuda_timer_open(struct cw_cuda *c, struct cw_cuda_timer **out, struct cw_err *err);
void cw_cuda_timer_close(struct cw_cuda_timer *t);
/* Records the start on the stream. */
int cw_cuda_timer_start(struct cw_cuda_timer *t, struct cw_err *err);
/* Records the stop, waits for it, and gives the device time since start. */
int cw_cuda_timer_stop(struct cw_cuda_timer *t, double *us /* OUT */, struct cw_err *err);

/* ---- median of reps ---- */

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
