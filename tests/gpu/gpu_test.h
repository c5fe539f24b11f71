/* gpu_test.h — shared by tests/gpu/: open the device or skip, saying so. */
#ifndef CW_GPU_TEST_H
#define CW_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda.h"
#include "test.h"

/* Opens device 0; where no GPU answers, prints why and exits 0 (a skip). */
static inline struct cw_cuda *gpu_test_open(void)
{
    struct cw_err err = {0};
    int n = 0;
    if (cw_cuda_device_count(&n, &err) || n == 0) {
        skip("no CUDA device here (%s): GPU tests not run", err.msg[0] ? err.msg : "none found");
        exit(done());
    }
    struct cw_cuda *c = NULL;
    if (cw_cuda_open(&c, 0, &err)) {
        printf("not ok - cw_cuda_open: %s\n", err.msg);
        exit(1);
    }
    note("device: %s (sm_%d%d, %d SMs)", cw_cuda_info(c)->name, cw_cuda_info(c)->major,
         cw_cuda_info(c)->minor, cw_cuda_info(c)->n_sm);
    return c;
}

#endif
