/* cuda_device.cu — device discovery for the CUDA backend (see cuda.h). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda.h"

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
    return 0;
}
