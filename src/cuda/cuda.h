/* cuda.h — the C interface of the CUDA backend; the only CUDA header C code
 * includes. Everything here returns 0 or -1 with a cw_err; no call aborts.
 * Built only when nvcc is found (CWEN_HAVE_CUDA).
 *
 * struct cw_cuda is one device's context (STYLE §8): its stream, cuBLAS
 * handle, properties and a scratch arena; every launcher takes it first.
 * Device pointers are plain void * / float * in C. */
#ifndef CW_CUDA_H
#define CW_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    size_t smem_optin;      /* shared memory one block may opt in to (64 KB on sm_75, 99 KB
                             * on sm_86/89, 227 KB on sm_90): kernels size their tiles by it */
    size_t smem_sm;         /* shared memory of one SM (blocks resident together share it) */
};

/* Number of usable CUDA devices; 0 (and success) when the driver or a GPU
 * is absent, so that callers can fall back to the CPU with a message. */
int cw_cuda_device_count(int *out, struct cw_err *err);

int cw_cuda_device_info(int dev, struct cw_cuda_device_info *out, struct cw_err *err);

/* ---- one device's context ----------------------------------------------- */

struct cw_cuda; /* opaque in C; defined in cuda_common.cuh */

/* Opens device dev: selects it, creates a non-blocking stream and a cuBLAS
 * handle bound to it. CW_ERR_UNSUPPORTED when there is no such device. */
int cw_cuda_open(struct cw_cuda **out, int dev, struct cw_err *err);
void cw_cuda_close(struct cw_cuda *c);
const struct cw_cuda_device_info *cw_cuda_info(const struct cw_cuda *c);
/* Programmatic dependent launch (each kernel's start overlapping the previous
 * kernel's end; cuda_common.cuh): on by default from sm_90; returns whether
 * it is on after the call. Results do not depend on it. */
bool cw_cuda_set_pdl(struct cw_cuda *c, bool on);
/* Two decode products that read one Q8_K x in two layouts on two streams
 * at once (cuda_common.cuh's side stream): on by default; returns whether
 * it is on after the call. Results do not depend on it. */
bool cw_cuda_set_fork(struct cw_cuda *c, bool on);

/* Plain device memory (cudaMalloc), and copies ordered on c's stream. */
int cw_cuda_alloc(struct cw_cuda *c, void **p, size_t bytes, struct cw_err *err);
void cw_cuda_free(struct cw_cuda *c, void *p);
int cw_cuda_upload(struct cw_cuda *c, void *dst, const void *src, size_t bytes, struct cw_err *err);
int cw_cuda_download(struct cw_cuda *c, void *dst, const void *src, size_t bytes,
                     struct cw_err *err);
int cw_cuda_memset(struct cw_cuda *c, void *dst, int byte, size_t bytes, struct cw_err *err);
/* Waits for everything queued on c's stream; reports an asynchronous kernel fault. */
int cw_cuda_sync(struct cw_cuda *c, struct cw_err *err);

/* Device-to-device copy bandwidth, GB/s counting bytes read + written, over
 * a buffer of `bytes` (the benchmark's ceiling). */
int cw_cuda_copy_bandwidth(struct cw_cuda *c, size_t bytes, double *gbps, struct cw_err *err);

#ifdef __cplusplus
}
#endif
#endif
