/* gpu_persist.cu — a study, not part of cwen: what launch boundaries cost a
 * decode chain of products against a persistent kernel that keeps its
 * blocks and waits on a grid-wide counter instead (docs/perf/h200.md,
 * 2026-12-05d). Standalone; build and run on a GPU machine:
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o gpu_persist bench/gpu_persist.cu
 *   ./gpu_persist [layers [light]]
 *
 * The chain is the 27B's decode shapes per layer, eight steps:
 *   P1 16480 x 5120 (the mixer's inputs), Q (6144 of it), P2 5120 x 6144
 *   (out-projection), Q, P3 2 x 17408 x 5120 (gate/up, rows interleaved,
 *   SwiGLU in the row sums), Q, P4 5120 x 17408 (down), Q
 * where a product streams weights of 144 bytes per 256 (q4_K's bytes: 128
 * of nibbles, 8 f16 scales) against int8 x with one scale per 256 (dp4a),
 * in cwen's flat form: a block owns a range of rows, its 8 or 16 warps take
 * 32-unit chunks in turn through a two-stage cp.async ring (both stages
 * asked for before the wait; cwen's ask for the first), each lane one unit
 * into a slot, then the rows summed in order; Q quantises y to int8 (one
 * warp per 256), the scale normalised so that values stay finite over any
 * depth.
 *
 * Variants, each captured as one CUDA graph:
 *   launches   every step its own launch, PDL (griddepcontrol) between
 *   nopdl      the same without PDL
 *   ffn        P3, Q, P4 as one persistent launch, the rest as above
 *   layer      one persistent launch per layer
 *   whole      one persistent launch for every layer
 * Inside a persistent launch a step waits for a counter of the step
 * before to reach the grid size (thread 0 spins on an acquire load, the
 * block then syncs); its first two chunks are asked for before that wait,
 * as a launch asks for them before griddepcontrol.wait. Every variant
 * runs the same code on the same partition, so the outputs must agree bit
 * for bit: the program checks that before it reports a time. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
                    cudaGetErrorString(e_));                                         \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define UB 144 /* bytes per unit of 256 weights */
#define CH 32  /* units per chunk: one a lane */
#define NS 2   /* ring stages a warp */
#define KMAX 17408

enum { PRODUCT, QUANT };

struct step {
    int kind;
    /* PRODUCT: y = W x, W rows R of nb units; pair: y[i] = silu(row 2i)·row 2i+1 */
    const uint8_t *w;
    int R, nb, pair;
    const int8_t *xq; /* input, nb·256 */
    const float *xd;  /* nb scales */
    float *y;
    /* QUANT: nq 256-blocks of src into q, d */
    const float *src;
    int nq;
    int8_t *q;
    float *d;
};

static __device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void cp16(void *dst, const void *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

/* the rows of step s that block b owns */
static __device__ __forceinline__ void rows_of(const step &s, int b, int G, int &r0, int &r1)
{
    if (s.pair) {
        const int P = s.R / 2;
        r0 = 2 * (int)((int64_t)b * P / G), r1 = 2 * (int)((int64_t)(b + 1) * P / G);
    } else {
        r0 = (int)((int64_t)b * s.R / G), r1 = (int)((int64_t)(b + 1) * s.R / G);
    }
}

/* warp w's chunk c (of the block's units from u0 on, nu of them) into buf */
static __device__ __forceinline__ void copy_chunk(const step &s, int64_t u0, int nu, int c,
                                                  uint8_t *buf, int lane)
{
    const int a = c * CH, n = min(CH, nu - a);
    if (n > 0) {
        const uint8_t *g = s.w + (u0 + a) * UB;
        for (int i = lane; i < n * (UB / 16); i += 32)
            cp16(buf + 16 * i, g + 16 * i);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int NW>
static __device__ void prefetch(const step &s, uint8_t *ring)
{
    if (s.kind != PRODUCT)
        return;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0, r1;
    rows_of(s, blockIdx.x, gridDim.x, r0, r1);
    const int64_t u0 = (int64_t)r0 * s.nb;
    const int nu = (r1 - r0) * s.nb;
    for (int i = 0; i < NS; i++)
        copy_chunk(s, u0, nu, w + i * NW, ring + ((size_t)w * NS + i) * CH * UB, lane);
}

/* one unit: 8 groups of 32 weights (16 bytes of nibbles: low nibbles the
 * first 16 values, high the next 16) against x's 256 int8 */
static __device__ __forceinline__ float unit_dot(const uint8_t *u, const int8_t *x)
{
    const __half *sc = (const __half *)(u + 128);
    const int *x4 = (const int *)x;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint4 v = *(const uint4 *)(u + 16 * j);
        const unsigned vv[4] = {v.x, v.y, v.z, v.w};
        int si = 0;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            si = __dp4a((int)(vv[q] & 0x0f0f0f0fu), x4[8 * j + q], si);
            si = __dp4a((int)((vv[q] >> 4) & 0x0f0f0f0fu), x4[8 * j + 4 + q], si);
        }
        acc = fmaf(__half2float(sc[j]), (float)si, acc);
    }
    return acc;
}

/* light: the unit's first 16 bytes only, so that the products stream at
 * the memory's rate and the boundaries are what is left */
static __device__ __forceinline__ float unit_light(const uint8_t *u, const int8_t *x)
{
    const uint4 v = *(const uint4 *)u;
    const int *x4 = (const int *)x;
    int si = __dp4a((int)(v.x & 0x0f0f0f0fu), x4[0], 0);
    si = __dp4a((int)(v.y & 0x0f0f0f0fu), x4[1], si);
    si = __dp4a((int)(v.z & 0x0f0f0f0fu), x4[2], si);
    si = __dp4a((int)(v.w & 0x0f0f0f0fu), x4[3], si);
    return (float)si;
}

template <int NW>
static __device__ void product(const step &s, uint8_t *ring, int8_t *xs, float *xds,
                               float *slot, int light)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0, r1;
    rows_of(s, blockIdx.x, gridDim.x, r0, r1);
    const int64_t u0 = (int64_t)r0 * s.nb;
    const int nu = (r1 - r0) * s.nb, nch = (nu + CH - 1) / CH;
    /* x (written by the step before) through L2 */
    const int K = s.nb * 256;
    for (int i = threadIdx.x; i < K / 16; i += blockDim.x)
        ((int4 *)xs)[i] = __ldcg((const int4 *)s.xq + i);
    for (int i = threadIdx.x; i < s.nb; i += blockDim.x)
        xds[i] = __ldcg(s.xd + i);
    __syncthreads();
    for (int i = 0;; i++) {
        const int c = w + i * NW;
        if (c >= nch)
            break;
        uint8_t *buf = ring + ((size_t)w * NS + i % NS) * CH * UB;
        asm volatile("cp.async.wait_group %0;" ::"n"(NS - 1) : "memory");
        __syncwarp();
        const int u = c * CH + lane;
        if (u < nu) {
            const int blk = u % s.nb;
            const float v = light ? unit_light(buf + lane * UB, xs + 256 * blk)
                                  : unit_dot(buf + lane * UB, xs + 256 * blk);
            slot[u] = v * xds[blk];
        }
        __syncwarp();
        copy_chunk(s, u0, nu, c + NS * NW, buf, lane);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    const int nr = r1 - r0;
    if (s.pair) {
        for (int p = threadIdx.x; p < nr / 2; p += blockDim.x) {
            float g = 0.0f, v = 0.0f;
            for (int b = 0; b < s.nb; b++)
                g += slot[(2 * p) * s.nb + b], v += slot[(2 * p + 1) * s.nb + b];
            s.y[r0 / 2 + p] = g / (1.0f + __expf(-g)) * v;
        }
    } else {
        for (int r = threadIdx.x; r < nr; r += blockDim.x) {
            float acc = 0.0f;
            for (int b = 0; b < s.nb; b++)
                acc += slot[r * s.nb + b];
            s.y[r0 + r] = acc;
        }
    }
    __syncthreads(); /* slots, x and the ring free for the next step */
}

template <int NW>
static __device__ void quant(const step &s)
{
    const int lane = threadIdx.x & 31;
    for (int it = blockIdx.x * NW + (threadIdx.x >> 5); it < s.nq; it += gridDim.x * NW) {
        float v[8], m = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            v[k] = __ldcg(s.src + 256 * it + 32 * k + lane);
            m = fmaxf(m, fabsf(v[k]));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float id = m > 0.0f ? 127.0f / m : 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++)
            s.q[256 * it + 32 * k + lane] = (int8_t)__float2int_rn(v[k] * id);
        if (lane == 0)
            s.d[it] = m > 0.0f ? 1.0f / 127.0f : 0.0f; /* a norm: bounded at any depth */
    }
}

/* steps [s0, s1) of the chain; bar[s]: blocks done with step s (those
 * inside the launch); *bad set where a wait gave up */
template <int NW>
static __global__ void __launch_bounds__(NW * 32)
    run(const step *__restrict__ st, int s0, int s1, unsigned *bar, int *bad, int light)
{
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *ring = smem;
    int8_t *xs = (int8_t *)(ring + (size_t)NW * NS * CH * UB);
    float *xds = (float *)(xs + KMAX);
    float *slot = xds + KMAX / 256;
    const unsigned G = gridDim.x;
    for (int i = s0; i < s1; i++) {
        const step s = st[i];
        prefetch<NW>(s, ring);
        if (i == s0) {
            asm volatile("griddepcontrol.wait;" ::: "memory");
            asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        } else {
            __shared__ int gave_up;
            if (threadIdx.x == 0) {
                long spins = 0;
                gave_up = 0;
                while (ld_acquire(bar + i - 1) < G)
                    if (++spins > (1L << 22)) {
                        atomicExch(bad, 1);
                        gave_up = 1;
                        break;
                    }
            }
            __syncthreads();
            if (gave_up)
                return; /* not every block is resident: the run is void */
        }
        if (s.kind == PRODUCT)
            product<NW>(s, ring, xs, xds, slot, light);
        else
            quant<NW>(s);
        if (i + 1 < s1) {
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence();
                atomicAdd(bar + i, 1u);
            }
        }
    }
}

static size_t smem_bytes(int nw, int G)
{
    /* the largest block share of units: P3's rows */
    const size_t slots = (size_t)(2 * ((17408 + G - 1) / G) + 2) * 20;
    const size_t s4 = (size_t)((5120 + G - 1) / G + 1) * 68;
    return (size_t)nw * NS * CH * UB + KMAX + KMAX / 256 * 4 + 4 * std::max(slots, s4);
}

static __global__ void fill(uint8_t *w, int64_t units, uint64_t seed)
{
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < units;
         u += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = (uint64_t)u * 0x9E3779B97F4A7C15ull ^ seed;
        uint8_t *p = w + u * UB;
        for (int i = 0; i < 128; i += 8) {
            h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
            memcpy(p + i, &h, 8);
        }
        __half *sc = (__half *)(p + 128);
        for (int j = 0; j < 8; j++) {
            h ^= h >> 29, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 32;
            sc[j] = __float2half(((float)(h & 1023) - 511.5f) / 65536.0f);
        }
    }
}

struct chain {
    std::vector<step> steps;
    step *d_steps;
    unsigned *bar;
    int *bad;
    float *out; /* the last layer's y4 */
    int8_t *xin;
    int8_t *x0; /* the first x and its scales, restored before each run */
    float *xd, *d0;
    double bytes;
};

static chain build(int layers)
{
    chain c;
    const int dims[4][3] = {{16480, 20, 0}, {5120, 24, 0}, {34816, 20, 1}, {5120, 68, 0}};
    int64_t units = 0;
    for (auto &d : dims)
        units += (int64_t)d[0] * d[1];
    uint8_t *w;
    CK(cudaMalloc(&w, (size_t)units * UB * layers));
    fill<<<1024, 256>>>(w, units * layers, 12345);
    CK(cudaGetLastError());
    c.bytes = (double)units * UB * layers;
    float *y1, *y2, *act, *y4, *xd;
    int8_t *xq;
    CK(cudaMalloc(&y1, 16480 * 4));
    CK(cudaMalloc(&y2, 5120 * 4));
    CK(cudaMalloc(&act, 17408 * 4));
    CK(cudaMalloc(&y4, 5120 * 4));
    CK(cudaMalloc(&xq, 2 * KMAX));
    CK(cudaMalloc(&xd, 2 * (KMAX / 256) * 4));
    /* x alternates between two buffers, so that a step never writes what
     * the step before it reads */
    int8_t *xa = xq, *xb = xq + KMAX;
    float *da = xd, *db = xd + KMAX / 256;
    {
        std::vector<int8_t> h(KMAX);
        std::vector<float> hd(KMAX / 256, 1.0f / 127.0f);
        for (int i = 0; i < KMAX; i++)
            h[i] = (int8_t)((i * 37 + 11) % 255 - 127);
        CK(cudaMemcpy(xa, h.data(), KMAX, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(da, hd.data(), hd.size() * 4, cudaMemcpyHostToDevice));
    }
    const uint8_t *wl = w;
    float *outs[4] = {y1, y2, act, y4};
    const int qn[4] = {6144 / 256, 5120 / 256, 17408 / 256, 5120 / 256};
    for (int l = 0; l < layers; l++)
        for (int p = 0; p < 4; p++) {
            step s = {};
            s.kind = PRODUCT;
            s.w = wl;
            s.R = dims[p][0], s.nb = dims[p][1], s.pair = dims[p][2];
            s.xq = xa, s.xd = da, s.y = outs[p];
            wl += (size_t)dims[p][0] * dims[p][1] * UB;
            c.steps.push_back(s);
            step q = {};
            q.kind = QUANT;
            q.src = outs[p], q.nq = qn[p], q.q = xb, q.d = db;
            c.steps.push_back(q);
            std::swap(xa, xb), std::swap(da, db);
        }
    CK(cudaMalloc(&c.d_steps, c.steps.size() * sizeof(step)));
    CK(cudaMemcpy(c.d_steps, c.steps.data(), c.steps.size() * sizeof(step),
                  cudaMemcpyHostToDevice));
    CK(cudaMalloc(&c.bar, c.steps.size() * 4));
    CK(cudaMalloc(&c.bad, 4));
    CK(cudaMemset(c.bad, 0, 4));
    c.out = y4;
    c.xin = xq;
    c.xd = xd;
    CK(cudaMalloc(&c.x0, 2 * KMAX));
    CK(cudaMalloc(&c.d0, 2 * (KMAX / 256) * 4));
    CK(cudaMemcpy(c.x0, xq, 2 * KMAX, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(c.d0, xd, 2 * (KMAX / 256) * 4, cudaMemcpyDeviceToDevice));
    return c;
}

/* the launches of a variant: [s0, s1) ranges */
static std::vector<std::pair<int, int>> plan(const char *v, int n)
{
    std::vector<std::pair<int, int>> r;
    if (!strcmp(v, "whole"))
        r.push_back({0, n});
    else
        for (int l = 0; l < n / 8; l++) {
            const int b = 8 * l;
            if (!strcmp(v, "layer"))
                r.push_back({b, b + 8});
            else if (!strcmp(v, "ffn")) {
                for (int i = 0; i < 4; i++)
                    r.push_back({b + i, b + i + 1});
                r.push_back({b + 4, b + 7});
                r.push_back({b + 7, b + 8});
            } else
                for (int i = 0; i < 8; i++)
                    r.push_back({b + i, b + i + 1});
        }
    return r;
}

template <int NW>
static void measure(chain &c, int G, const char *v, uint64_t *ref, int reps, int light)
{
    const size_t sm = smem_bytes(NW, G);
    CK(cudaFuncSetAttribute(run<NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    int per_sm = 0, nsm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, run<NW>, NW * 32, sm));
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    if (per_sm * nsm < G) {
        printf("%-8s NW %2d G %3d: does not fit (%d a multiprocessor)\n", v, NW, G, per_sm);
        return;
    }
    const int n = (int)c.steps.size();
    auto launches = plan(v, n);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(c.bar, 0, n * 4, st));
    CK(cudaMemcpyAsync(c.xin, c.x0, 2 * KMAX, cudaMemcpyDeviceToDevice, st));
    CK(cudaMemcpyAsync(c.xd, c.d0, 2 * (KMAX / 256) * 4, cudaMemcpyDeviceToDevice, st));
    for (size_t i = 0; i < launches.size(); i++) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = dim3(G);
        cfg.blockDim = dim3(NW * 32);
        cfg.dynamicSmemBytes = sm;
        cfg.stream = st;
        cfg.attrs = at;
        cfg.numAttrs = i > 0 && strcmp(v, "nopdl") ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, run<NW>, (const step *)c.d_steps, launches[i].first,
                              launches[i].second, c.bar, c.bad, light));
    }
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<float> ms;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int r = 0; r < reps + 2; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaStreamSynchronize(st));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 2)
            ms.push_back(t);
    }
    int bad = 0;
    CK(cudaMemcpy(&bad, c.bad, 4, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> h(5120 + KMAX / 2);
    CK(cudaMemcpy(h.data(), c.out, 5120 * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.data() + 5120, c.xin, 2 * KMAX, cudaMemcpyDeviceToHost));
    uint64_t sum = 1469598103934665603ull;
    for (uint32_t x : h)
        sum = (sum ^ x) * 1099511628211ull;
    if (!*ref)
        *ref = sum;
    std::sort(ms.begin(), ms.end());
    const double t = ms[ms.size() / 2], layers = n / 8;
    printf("%s%-8s NW %2d G %3d: %zu launches, %.3f ms (%.3f-%.3f), %.2f us a layer, %.0f GB/s, "
           "out %016llx%s%s\n",
           light ? "light " : "", v, NW, G, launches.size(), t, ms.front(), ms.back(),
           1e3 * t / layers, c.bytes / (t * 1e-3) / 1e9, (unsigned long long)sum,
           sum != *ref ? " MISMATCH" : "", bad ? " GAVE-UP" : "");
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
}

/* a whole decimal argument, or -1 */
static long arg_int(const char *a)
{
    char *end;
    const long v = strtol(a, &end, 10);
    return end != a && !*end ? v : -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const long layers = argc > 1 ? arg_int(argv[1]) : 64;
    const long light = argc > 2 ? arg_int(argv[2]) : 0;
    if (argc > 3 || layers < 1 || layers > 256 || (light != 0 && light != 1)) {
        fprintf(stderr, "usage: %s [layers (1-256, default 64) [light (0 or 1)]]\n", argv[0]);
        return 2;
    }
    int nsm = 0;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    chain c = build((int)layers);
    CK(cudaDeviceSynchronize());
    printf("%ld layers, %.2f GB of weights, %d multiprocessors\n", layers, c.bytes / 1e9, nsm);
    const char *vs[] = {"launches", "nopdl", "ffn", "layer", "whole", "launches"};
    /* the outputs depend on neither the grid nor the warps (a row's slots
     * are summed in order wherever it lies): one reference for all */
    uint64_t ref = 0;
    for (const char *v : vs)
        measure<8>(c, 2 * nsm, v, &ref, 5, light);
    for (const char *v : vs)
        measure<16>(c, nsm, v, &ref, 5, light);
    return 0;
}
