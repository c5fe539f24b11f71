/* test_cuda_device.c — the CUDA backend is linked and can enumerate devices;
 * skips (saying why) where cwen was built without CUDA or no GPU is present. */
#include "test.h"

#ifdef CWEN_HAVE_CUDA
#include "cuda/cuda.h"
#endif

int main(void)
{
#ifndef CWEN_HAVE_CUDA
    skip("cwen was built without the CUDA backend (no nvcc, or -DCWEN_CUDA=OFF)");
#else
    struct cw_err err = {0};
    int n = -1;
    ok(cw_cuda_device_count(&n, &err) == 0, "device count: %s", err.msg);
    if (n == 0) {
        skip("no CUDA GPU on this machine");
    } else {
        for (int i = 0; i < n; i++) {
            struct cw_cuda_device_info info;
            ok(cw_cuda_device_info(i, &info, &err) == 0, "device %d: %s", i, err.msg);
            note("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB", i, info.name, info.major, info.minor, info.n_sm,
                 (double)info.total_mem / (1u << 30));
            ok(info.major >= 7, "compute capability %d.%d >= 7.5 expected", info.major, info.minor);
        }
        ok(cw_cuda_device_info(n, &(struct cw_cuda_device_info){0}, &err) == -1, "out-of-range device refused");
    }
#endif
    return done();
}
