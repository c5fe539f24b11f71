/* cuda_timer.h — elapsed device time between two points of a context's
 * stream (CUDA events), for the benchmarks and the GPU tests' timing modes.
 * The kernels never use it. */
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

#ifdef __cplusplus
}
#endif
#endif
