/* cuda.h — the C interface of the CUDA backend; the only CUDA header C code
 * includes. Everything here returns 0 or -1 with a cw_err; no call aborts.
 * Built only when nvcc is found (CWEN_HAVE_CUDA). */
#ifndef CW_CUDA_H
#define CW_CUDA_H

#include <stddef.h>

#include "base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cw_cuda_device_info {
    char name[256];
    int major, minor;       /* compute capability */
    int n_sm;
    size_t total_mem;
    size_t l2_bytes;
};

/* Number of usable CUDA devices; 0 (and success) when the driver or a GPU
 * is absent, so that callers can fall back to the CPU with a message. */
int cw_cuda_device_count(int *out, struct cw_err *err);

int cw_cuda_device_info(int dev, struct cw_cuda_device_info *out, struct cw_err *err);

#ifdef __cplusplus
}
#endif
#endif
