/* cuda_device.cu — device discovery for the CUDA backend (see cuda.h). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"

int cw_cuda_device_count(int *out, struct cw_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        *out = 0;
        return 0;
    }
    if (e != cudaSuccess)
        return cw_errf(err, CW_ERR_DEVICE, "cuda: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    *out = n;
    return 0;
}

int cw_cuda_device_info(int dev, struct cw_cuda_device_info *out, struct cw_err *err)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess)
        return cw_errf(err, CW_ERR_DEVICE, "cuda: device %d: %s", dev, cudaGetErrorString(e));
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->major = p.major;
    out->minor = p.minor;
    out->n_sm = p.multiProcessorCount;
    out->total_mem = p.totalGlobalMem;
    out->l2_bytes = (size_t)p.l2CacheSize;
    out->smem_optin = p.sharedMemPerBlockOptin;
    out->smem_sm = p.sharedMemPerMultiprocessor;
    return 0;
}

/* ---- one device's context ------------------------------------------------ */

int cw_cuda_open(struct cw_cuda **out, int dev, struct cw_err *err)
{
    int n = 0;
    *out = NULL;
    if (cw_cuda_device_count(&n, err))
        return -1;
    if (dev < 0 || dev >= n)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: no device %d (%d found)", dev, n);
    struct cw_cuda *c = (struct cw_cuda *)calloc(1, sizeof *c);
    if (!c)
        return cw_errf(err, CW_ERR_NOMEM, "cuda: out of memory");
    c->device = dev;
    if (cw_cuda_device_info(dev, &c->info, err))
        goto fail;
    if (cudaSetDevice(dev) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->fork_ev, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->join_ev, cudaEventDisableTiming) != cudaSuccess) {
        cw_errf(err, CW_ERR_DEVICE, "cuda: device %d: %s", dev,
                cudaGetErrorString(cudaGetLastError()));
        goto fail;
    }
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->cublas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        cw_errf(err, CW_ERR_DEVICE, "cuda: device %d: cuBLAS did not start", dev);
        goto fail;
    }
    c->pdl = c->info.major >= 9;
    c->fork = true;
    *out = c;
    return 0;
fail:
    cw_cuda_close(c);
    return -1;
}

void cw_cuda_close(struct cw_cuda *c)
{
    if (!c)
        return;
    if (c->cublas)
        cublasDestroy(c->cublas);
    if (c->join_ev)
        cudaEventDestroy(c->join_ev);
    if (c->fork_ev)
        cudaEventDestroy(c->fork_ev);
    if (c->side)
        cudaStreamDestroy(c->side);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

bool cw_cuda_set_pdl(struct cw_cuda *c, bool on)
{
    c->pdl = on && c->info.major >= 9;
    return c->pdl;
}

bool cw_cuda_set_fork(struct cw_cuda *c, bool on)
{
    c->fork = on;
    return c->fork;
}

const struct cw_cuda_device_info *cw_cuda_info(const struct cw_cuda *c)
{
    return &c->info;
}

int cw_cuda_alloc(struct cw_cuda *c, void **p, size_t bytes, struct cw_err *err)
{
    (void)c;
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return cw_errf(err, e == cudaErrorMemoryAllocation ? CW_ERR_NOMEM : CW_ERR_DEVICE,
                       "cuda: cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    return 0;
}

void cw_cuda_free(struct cw_cuda *c, void *p)
{
    (void)c;
    if (p)
        cudaFree(p);
}

int cw_cuda_upload(struct cw_cuda *c, void *dst, const void *src, size_t bytes, struct cw_err *err)
{
    CW_CUDA_TRY(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return 0;
}

int cw_cuda_download(struct cw_cuda *c, void *dst, const void *src, size_t bytes,
                     struct cw_err *err)
{
    CW_CUDA_TRY(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CW_CUDA_TRY(err, cudaStreamSynchronize(c->stream));
    return 0;
}

int cw_cuda_memset(struct cw_cuda *c, void *dst, int byte, size_t bytes, struct cw_err *err)
{
    CW_CUDA_TRY(err, cudaMemsetAsync(dst, byte, bytes, c->stream));
    return 0;
}

int cw_cuda_sync(struct cw_cuda *c, struct cw_err *err)
{
    CW_CUDA_TRY(err, cudaStreamSynchronize(c->stream));
    CW_CUDA_TRY(err, cudaGetLastError());
    return 0;
}

int cw_cuda_copy_bandwidth(struct cw_cuda *c, size_t bytes, double *gbps, struct cw_err *err)
{
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1;
    float ms = 0;
    const int reps = 20;
    if (cw_cuda_alloc(c, &a, bytes, err) || cw_cuda_alloc(c, &b, bytes, err))
        goto done;
    if (cudaMemsetAsync(a, 1, bytes, c->stream) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        goto dev_fail;
    /* one warm-up copy, then the timed ones */
    if (cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, c->stream) != cudaSuccess ||
        cudaEventRecord(e0, c->stream) != cudaSuccess)
        goto dev_fail;
    for (int i = 0; i < reps; i++)
        if (cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, bytes, cudaMemcpyDeviceToDevice,
                            c->stream) != cudaSuccess)
            goto dev_fail;
    if (cudaEventRecord(e1, c->stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
        goto dev_fail;
    *gbps = 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
    rc = 0;
    goto done;
dev_fail:
    cw_errf(err, CW_ERR_DEVICE, "cuda: copy bandwidth: %s", cudaGetErrorString(cudaGetLastError()));
done:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cw_cuda_free(c, a);
    cw_cuda_free(c, b);
    return rc;
}
