/* gpu_test.h — shared by tests/gpu/: open the device or skip, saying so. */
#ifndef CW_GPU_TEST_H
#define CW_GPU_TEST_H

#include <math.h>
#include <stdint.h>
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

/* ---- helpers of the kernel tests: a seeded generator (GPU_TEST_SEED, set
 * before the include), the device context C and its error E, and checked
 * allocation and copies that end the test on a failure. */
#ifdef GPU_TEST_SEED
static uint64_t rng = GPU_TEST_SEED;
static double unif(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void)
{
    return (float)(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()));
}

static struct cw_cuda *C;
static struct cw_err E;

#define CK(call)                                                       \
    do {                                                               \
        if ((call) != 0) {                                             \
            printf("not ok - %s:%d: %s\n", __FILE__, __LINE__, E.msg); \
            exit(1);                                                   \
        }                                                              \
    } while (0)

static void *dalloc(size_t n)
{
    void *p;
    CK(cw_cuda_alloc(C, &p, n, &E));
    return p;
}
static void up(void *d, const void *h, size_t n) { CK(cw_cuda_upload(C, d, h, n, &E)); }
static void down(void *h, const void *d, size_t n) { CK(cw_cuda_download(C, h, d, n, &E)); }
#endif

#endif
