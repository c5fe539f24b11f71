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
 *   split      every step its own launch as in `launches`, but P3, Q, P4, Q
 *              as two steps with local dependencies (h200.md, 2026-12-05g):
 *              F runs P3; each 256-slice of its output is counted in by
 *              the blocks that wrote its rows, and the block that completes
 *              one quantises it and raises its flag; then the same launch
 *              runs P4 split by slices (P4's weights copied slice-major, the
 *              same bytes), each warp waiting only for the flag of the
 *              slice it multiplies, into partial sums part[slice][row]; R
 *              adds each row's partials in P4's order and quantises as Q
 *   (the output check covers split too: the same values in the same order)
 * Switches (environment): STUDY_SELF_Q=1 split's P4 warps wait for their
 * slice's count and quantise it themselves (no flag); STUDY_ROWMAJOR=1
 * split reads P4 in its own row-major layout (a unit a lane);
 * STUDY_SPLIT_ALL=1 split's warps wait for every slice's flag (one load
 * after another: a slow barrier); STUDY_NO_R=1 R does nothing (wrong
 * outputs: its cost); STUDY_L2NEXT=1 a product asks L2 for the next
 * product's first chunks once its own last are asked for; STUDY_OCC=1
 * prints the blocks a multiprocessor holds. After the two main grids
 * (8 warps in 2 blocks an SM, 16 in 1), launches and split also run with
 * blocks small enough for the next launch's to fit beside them.
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
/* a 256-byte block of x in shared memory, padded, so that lanes reading
 * the same word of consecutive blocks hit distinct banks (cwen turns its
 * copy instead, xq_rot); unpadded, a lane's 4-byte loads of x were 32-way
 * conflicts, which the 2026-12-05d numbers carry in every variant */
#define XP 260

enum { PRODUCT, QUANT, FFN, RQ };

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
    /* FFN: P3 as a PRODUCT into y, y's 256-slices quantised into q, d,
     * then P4 (w4: R4 rows of ns4 units, slice-major: unit (row, s) at
     * s·R4 + row) split by slices into part[s][row]; cnt, ready: ns4
     * counters of y's rows written and flags of q's slices, zero at start.
     * RQ: y[row] = Σ_s part[s][row] in order, then as QUANT (nq = R4/256). */
    const uint8_t *w4;
    int R4, ns4, all; /* all: P4's warps wait for every slice's flag (a study switch) */
    int selfq; /* each P4 warp waits for its slice's count and quantises it itself */
    int rowmajor; /* w4 in P4's own layout (unit (row, s) at row·ns4 + s) */
    unsigned *cnt, *ready;
    float *part;
};

static __device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Spins (one thread) until *p reaches v; false, and *bad set (the run is
 * void), once it has given up after `limit` loads. */
static __device__ bool wait_at_least(const unsigned *p, unsigned v, long limit, int *bad)
{
    for (long spins = 0; ld_acquire(p) < v;)
        if (++spins > limit) {
            atomicExch(bad, 1);
            return false;
        }
    return true;
}

static __device__ __forceinline__ void st_release(unsigned *p, unsigned v)
{
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned add_acq_rel(unsigned *p, unsigned v)
{
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v)
                 : "memory");
    return old;
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

/* n units from g into buf (none where n <= 0), as one commit group */
static __device__ __forceinline__ void copy_units(const uint8_t *g, int n, uint8_t *buf,
                                                  int lane)
{
    for (int i = lane; i < n * (UB / 16); i += 32)
        cp16(buf + 16 * i, g + 16 * i);
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* warp w's chunk c (of the block's units from u0 on, nu of them) into buf */
static __device__ __forceinline__ void copy_chunk(const step &s, int64_t u0, int nu, int c,
                                                  uint8_t *buf, int lane)
{
    const int a = c * CH;
    copy_units(s.w + (u0 + a) * UB, min(CH, nu - a), buf, lane);
}

template <int NW>
static __device__ void prefetch(const step &s, uint8_t *ring)
{
    if (s.kind != PRODUCT && s.kind != FFN)
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

/* L2 prefetch (the bulk copy engine) of the chunks that this block's warp
 * w will ask for first in the next product nx, so that DRAM streams them
 * through this step's tail and the boundary (a study switch) */
template <int NW>
static __device__ __forceinline__ void l2_next(const step &nx, int w, int lane)
{
    int r0, r1;
    rows_of(nx, blockIdx.x, gridDim.x, r0, r1);
    const int64_t u0 = (int64_t)r0 * nx.nb;
    const int nu = (r1 - r0) * nx.nb;
    for (int i = 0; i < NS && lane == 0; i++) {
        const int a = (w + i * NW) * CH, n = min(CH, nu - a);
        if (n > 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(nx.w + (u0 + a) * UB),
                         "r"(n * UB)
                         : "memory");
    }
}

template <int NW>
static __device__ void product(const step &s, uint8_t *ring, int8_t *xs, float *xds,
                               float *slot, int light, const step *nxt = NULL)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0, r1;
    rows_of(s, blockIdx.x, gridDim.x, r0, r1);
    const int64_t u0 = (int64_t)r0 * s.nb;
    const int nu = (r1 - r0) * s.nb, nch = (nu + CH - 1) / CH;
    /* x (written by the step before) through L2 */
    const int K = s.nb * 256;
    for (int i = threadIdx.x; i < K / 16; i += blockDim.x) {
        const int4 v = __ldcg((const int4 *)s.xq + i);
        int *d = (int *)(xs + XP * (i / 16)) + 4 * (i % 16);
        d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
    }
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
            const float v = light ? unit_light(buf + lane * UB, xs + XP * blk)
                                  : unit_dot(buf + lane * UB, xs + XP * blk);
            slot[u] = v * xds[blk];
        }
        __syncwarp();
        copy_chunk(s, u0, nu, c + NS * NW, buf, lane);
        if (nxt && c + NS * NW >= nch && c + NS * NW < nch + NW) /* the warp's last copy */
            l2_next<NW>(*nxt, w, lane);
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

/* the 256 values at src quantised into q[0..255] and *d, by one warp */
static __device__ __forceinline__ void quant_256(const float *src, int8_t *q, float *d)
{
    const int lane = threadIdx.x & 31;
    float v[8], m = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        v[k] = __ldcg(src + 32 * k + lane);
        m = fmaxf(m, fabsf(v[k]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float id = m > 0.0f ? 127.0f / m : 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++)
        q[32 * k + lane] = (int8_t)__float2int_rn(v[k] * id);
    *d = m > 0.0f ? 1.0f / 127.0f : 0.0f; /* a norm: bounded at any depth */
}

/* block it of src (256 values) into q, d, by one warp */
static __device__ __forceinline__ void quant_block(const float *src, int it, int8_t *q, float *d)
{
    float dd;
    quant_256(src + 256 * it, q + 256 * it, &dd);
    if ((threadIdx.x & 31) == 0)
        d[it] = dd;
}

template <int NW>
static __device__ void quant(const step &s)
{
    for (int it = blockIdx.x * NW + (threadIdx.x >> 5); it < s.nq; it += gridDim.x * NW)
        quant_block(s.src, it, s.q, s.d);
}

/* FFN (struct step): P3, the slices' counts and quantisation, P4 by slices */
template <int NW>
static __device__ void ffn(const step &s, uint8_t *ring, int8_t *xs, float *xds, float *slot,
                           int light, int *bad)
{
    __shared__ int done[8], n_done;
    product<NW>(s, ring, xs, xds, slot, light); /* ends with a barrier */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* P4 by slices: chunk c is rows 32(c % cps).. of slice c / cps */
    const int cps = s.R4 / CH, nch = s.ns4 * cps;
    const int c0 = (int)((int64_t)blockIdx.x * nch / gridDim.x);
    const int c1 = (int)((int64_t)(blockIdx.x + 1) * nch / gridDim.x);
    /* chunk c's first unit, and the stride of its units: slice-major, or
     * (rowmajor) P4's own layout, a unit a lane */
    auto units = [&](int c) {
        return s.rowmajor ? s.w4 + ((size_t)(c % cps) * CH * s.ns4 + c / cps) * UB
                          : s.w4 + ((size_t)(c / cps) * s.R4 + (c % cps) * CH) * UB;
    };
    auto fetch = [&](int c, uint8_t *buf) {
        if (!s.rowmajor || c >= c1)
            copy_units(c < c1 ? units(c) : s.w4, c < c1 ? CH : 0, buf, lane);
        else {
            const uint8_t *g = units(c) + (size_t)lane * s.ns4 * UB;
            for (int i = 0; i < UB / 16; i++)
                cp16(buf + lane * UB + 16 * i, g + 16 * i);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
    };
    uint8_t *wr = ring + (size_t)w * NS * CH * UB;
    for (int i = 0; i < NS; i++) {
        const int c = c0 + w + i * NW;
        fetch(c, wr + (size_t)i * CH * UB);
    }
    /* then this block's rows of y counted in, per slice */
    int r0, r1;
    rows_of(s, blockIdx.x, gridDim.x, r0, r1);
    const int a0 = r0 / 2, a1 = r1 / 2;
    if (threadIdx.x == 0) {
        n_done = 0;
        __threadfence(); /* the block's rows of y (the barrier above) before its counts */
        for (int sl = a0 / 256; a1 > a0 && sl <= (a1 - 1) / 256; sl++) {
            const int n = min(a1, 256 * sl + 256) - max(a0, 256 * sl);
            if (add_acq_rel(s.cnt + sl, (unsigned)n) + n == 256 && n_done < 8 && !s.selfq)
                done[n_done++] = sl;
        }
    }
    __syncthreads();
    if (w < n_done) { /* slices this block completed: quantised, then flagged */
        quant_block(s.y, done[w], s.q, s.d);
        __syncwarp();
        if (lane == 0) {
            __threadfence();
            st_release(s.ready + done[w], 1u);
        }
    }
    int8_t *xw = xs + 256 * w; /* this warp's slice of q */
    float dw = 0.0f;
    int cur = -1;
    for (int i = 0;; i++) {
        const int c = c0 + w + i * NW;
        if (c >= c1)
            break;
        uint8_t *buf = wr + (size_t)(i % NS) * CH * UB;
        const int sl = c / cps;
        if (sl != cur && s.selfq) { /* the slice's rows counted in: quantise it here */
            if (lane == 0)
                wait_at_least(s.cnt + sl, 256, 1L << 24, bad);
            __syncwarp();
            quant_256(s.y + 256 * sl, xw, &dw);
            __syncwarp();
            if (c % cps == 0) { /* one warp a slice leaves its copy, as Q does */
                ((int2 *)(s.q + 256 * sl))[lane] = ((const int2 *)xw)[lane];
                if (lane == 0)
                    s.d[sl] = dw;
            }
            cur = sl;
        }
        if (sl != cur) {
            if (lane == 0)
                for (int k = s.all ? 0 : sl; k < (s.all ? s.ns4 : sl + 1); k++)
                    wait_at_least(s.ready + k, 1, 1L << 24, bad);
            __syncwarp();
            ((int2 *)xw)[lane] = __ldcg((const int2 *)(s.q + 256 * sl) + lane);
            dw = __ldcg(s.d + sl);
            cur = sl;
        }
        asm volatile("cp.async.wait_group %0;" ::"n"(NS - 1) : "memory");
        __syncwarp();
        const float v = light ? unit_light(buf + lane * UB, xw) : unit_dot(buf + lane * UB, xw);
        s.part[(size_t)sl * s.R4 + (c % cps) * CH + lane] = v * dw;
        __syncwarp();
        const int cn = c + NS * NW;
        fetch(cn, buf);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

/* RQ (struct step): 256 rows a group of up to 256 threads (RPT rows a
 * thread below that), their partials added in P4's order, then the
 * group's block quantised as quant_block does */
template <int NW>
static __device__ void rq(const step &s)
{
    constexpr int T = NW * 32, GT = T < 256 ? T : 256; /* threads a group */
    constexpr int PER = T / GT, RPT = 256 / GT;         /* groups a pass, rows a thread */
    __shared__ float mx[PER][GT / 32];
    const int g = threadIdx.x / GT, t = threadIdx.x % GT, lane = threadIdx.x & 31;
    for (int p0 = blockIdx.x * PER; p0 < s.nq; p0 += gridDim.x * PER) {
        const int it = p0 + g;
        float acc[RPT], m = 0.0f;
#pragma unroll
        for (int k = 0; k < RPT; k++) {
            acc[k] = 0.0f;
            if (it >= s.nq)
                continue;
            const float *pp = s.part + 256 * it + t + GT * k;
            int b = 0;
            for (; b + 17 <= s.ns4; b += 17) {
                float v[17];
#pragma unroll
                for (int j = 0; j < 17; j++)
                    v[j] = __ldcg(pp + (size_t)(b + j) * s.R4);
#pragma unroll
                for (int j = 0; j < 17; j++)
                    acc[k] += v[j];
            }
            for (; b < s.ns4; b++)
                acc[k] += __ldcg(pp + (size_t)b * s.R4);
            s.y[256 * it + t + GT * k] = acc[k];
            m = fmaxf(m, fabsf(acc[k]));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0)
            mx[g][t / 32] = m;
        __syncthreads();
        m = 0.0f;
        for (int k = 0; k < GT / 32; k++)
            m = fmaxf(m, mx[g][k]);
        const float id = m > 0.0f ? 127.0f / m : 0.0f;
        if (it < s.nq) {
#pragma unroll
            for (int k = 0; k < RPT; k++)
                s.q[256 * it + t + GT * k] = (int8_t)__float2int_rn(acc[k] * id);
            if (t == 0)
                s.d[it] = m > 0.0f ? 1.0f / 127.0f : 0.0f;
        }
        __syncthreads();
    }
}

/* steps [s0, s1) of the chain; bar[s]: blocks done with step s (those
 * inside the launch); *bad set where a wait gave up */
template <int NW>
static __global__ void __launch_bounds__(NW * 32)
    run(const step *__restrict__ st, int s0, int s1, unsigned *bar, int *bad, int light,
        int n_steps, int l2next)
{
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *ring = smem;
    int8_t *xs = (int8_t *)(ring + (size_t)NW * NS * CH * UB);
    float *xds = (float *)(xs + KMAX / 256 * XP);
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
            if (threadIdx.x == 0)
                gave_up = !wait_at_least(bar + i - 1, G, 1L << 22, bad);
            __syncthreads();
            if (gave_up)
                return; /* not every block is resident: the run is void */
        }
        if (s.kind == PRODUCT)
            product<NW>(s, ring, xs, xds, slot, light,
                        l2next && i + 2 < n_steps && st[i + 2].kind == PRODUCT ? st + i + 2
                                                                               : NULL);
        else if (s.kind == FFN)
            ffn<NW>(s, ring, xs, xds, slot, light, bad);
        else if (s.kind == RQ)
            rq<NW>(s);
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
    return (size_t)nw * NS * CH * UB + KMAX / 256 * (XP + 4) + 4 * std::max(slots, s4);
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

/* rows, units a row, pair: P1, P2, P3, P4 */
static const int DIMS[4][3] = {{16480, 20, 0}, {5120, 24, 0}, {34816, 20, 1}, {5120, 68, 0}};

/* P4's units (row, s) copied slice-major: to s·R + row */
static __global__ void slice_major(const uint8_t *w, uint8_t *o, int R, int nb)
{
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < (int64_t)R * nb;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = u / nb, sl = u % nb;
        const uint4 *src = (const uint4 *)(w + u * UB);
        uint4 *dst = (uint4 *)(o + (sl * R + row) * UB);
        for (int i = 0; i < UB / 16; i++)
            dst[i] = src[i];
    }
}

struct chain {
    int per; /* steps a layer */
    uint8_t *w; /* the weights: per layer P1, P2, P3, P4 (row-major units) */
    unsigned *sync; /* split: the FFN steps' counters and flags */
    size_t sync_n;
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

/* a chain's outputs and its two x buffers (int8 and scales) */
struct bufs {
    float *y1, *y2, *act, *y4, *xd;
    int8_t *xq;
};

static bufs alloc_bufs()
{
    bufs b;
    CK(cudaMalloc(&b.y1, 16480 * 4));
    CK(cudaMalloc(&b.y2, 5120 * 4));
    CK(cudaMalloc(&b.act, 17408 * 4));
    CK(cudaMalloc(&b.y4, 5120 * 4));
    CK(cudaMalloc(&b.xq, 2 * KMAX));
    CK(cudaMalloc(&b.xd, 2 * (KMAX / 256) * 4));
    return b;
}

static chain build(int layers)
{
    chain c;
    c.per = 8, c.sync = NULL, c.sync_n = 0;
    int64_t units = 0;
    for (auto &d : DIMS)
        units += (int64_t)d[0] * d[1];
    uint8_t *w;
    CK(cudaMalloc(&w, (size_t)units * UB * layers));
    c.w = w;
    fill<<<1024, 256>>>(w, units * layers, 12345);
    CK(cudaGetLastError());
    c.bytes = (double)units * UB * layers;
    const bufs bb = alloc_bufs();
    float *y1 = bb.y1, *y2 = bb.y2, *act = bb.act, *y4 = bb.y4, *xd = bb.xd;
    int8_t *xq = bb.xq;
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
            s.R = DIMS[p][0], s.nb = DIMS[p][1], s.pair = DIMS[p][2];
            s.xq = xa, s.xd = da, s.y = outs[p];
            wl += (size_t)DIMS[p][0] * DIMS[p][1] * UB;
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

/* The split variant's chain over a's weights (P4's copied slice-major) and
 * its own buffers, laid out so that its outputs land where a's do: x in
 * buffer 0, the last act's int8 in buffer 1. Per layer: P1, Q, P2, Q, FFN,
 * RQ. */
static chain build_split(const chain &a, int layers)
{
    chain c;
    c.per = 6;
    c.w = a.w;
    c.bytes = a.bytes;
    c.sync_n = (size_t)layers * 2 * DIMS[3][1];
    CK(cudaMalloc(&c.sync, c.sync_n * 4));
    int64_t units = 0, u4 = (int64_t)DIMS[3][0] * DIMS[3][1];
    for (auto &d : DIMS)
        units += (int64_t)d[0] * d[1];
    uint8_t *w4s;
    CK(cudaMalloc(&w4s, (size_t)u4 * UB * layers));
    for (int l = 0; l < layers; l++) {
        slice_major<<<1024, 256>>>(a.w + ((size_t)l * units + units - u4) * UB,
                                   w4s + (size_t)l * u4 * UB, DIMS[3][0], DIMS[3][1]);
        CK(cudaGetLastError());
    }
    const bufs bb = alloc_bufs();
    float *y1 = bb.y1, *y2 = bb.y2, *act = bb.act, *y4 = bb.y4, *xd = bb.xd, *part;
    int8_t *xq = bb.xq;
    CK(cudaMalloc(&part, (size_t)u4 * 4));
    int8_t *b0 = xq, *b1 = xq + KMAX;
    float *d0 = xd, *d1 = xd + KMAX / 256;
    const uint8_t *wl = a.w;
    for (int l = 0; l < layers; l++) {
        step s[6] = {};
        const uint8_t *wp[4];
        for (int p = 0; p < 4; p++)
            wp[p] = wl, wl += (size_t)DIMS[p][0] * DIMS[p][1] * UB;
        float *ys[2] = {y1, y2};
        int8_t *xi[2] = {b0, b1}, *xo[2] = {b1, b0};
        float *di[2] = {d0, d1}, *dout[2] = {d1, d0};
        const int qn[2] = {6144 / 256, 5120 / 256};
        for (int p = 0; p < 2; p++) {
            s[2 * p].kind = PRODUCT;
            s[2 * p].w = wp[p];
            s[2 * p].R = DIMS[p][0], s[2 * p].nb = DIMS[p][1], s[2 * p].pair = DIMS[p][2];
            s[2 * p].xq = xi[p], s[2 * p].xd = di[p], s[2 * p].y = ys[p];
            s[2 * p + 1].kind = QUANT;
            s[2 * p + 1].src = ys[p], s[2 * p + 1].nq = qn[p];
            s[2 * p + 1].q = xo[p], s[2 * p + 1].d = dout[p];
        }
        step &f = s[4], &r = s[5];
        f.kind = FFN;
        f.w = wp[2], f.R = DIMS[2][0], f.nb = DIMS[2][1], f.pair = DIMS[2][2];
        f.xq = b0, f.xd = d0, f.y = act, f.q = b1, f.d = d1;
        f.w4 = w4s + (size_t)l * u4 * UB, f.R4 = DIMS[3][0], f.ns4 = DIMS[3][1];
        f.cnt = c.sync + (size_t)l * 2 * DIMS[3][1], f.ready = f.cnt + DIMS[3][1];
        f.part = part;
        r.kind = RQ;
        r.part = part, r.R4 = DIMS[3][0], r.ns4 = DIMS[3][1];
        r.y = y4, r.nq = DIMS[3][0] / 256, r.q = b0, r.d = d0;
        /* study switches: P4 after every slice; no R (wrong outputs) */
        f.all = getenv("STUDY_SPLIT_ALL") && atoi(getenv("STUDY_SPLIT_ALL"));
        f.selfq = getenv("STUDY_SELF_Q") && atoi(getenv("STUDY_SELF_Q"));
        f.rowmajor = getenv("STUDY_ROWMAJOR") && atoi(getenv("STUDY_ROWMAJOR"));
        if (f.rowmajor)
            f.w4 = wp[3];
        if (getenv("STUDY_NO_R") && atoi(getenv("STUDY_NO_R")))
            r.nq = 0;
        for (auto &x : s)
            c.steps.push_back(x);
    }
    CK(cudaMalloc(&c.d_steps, c.steps.size() * sizeof(step)));
    CK(cudaMemcpy(c.d_steps, c.steps.data(), c.steps.size() * sizeof(step),
                  cudaMemcpyHostToDevice));
    CK(cudaMalloc(&c.bar, c.steps.size() * 4));
    c.bad = a.bad;
    c.out = y4;
    c.xin = xq;
    c.xd = xd;
    c.x0 = a.x0, c.d0 = a.d0;
    return c;
}

/* the launches of a variant: [s0, s1) ranges */
static std::vector<std::pair<int, int>> plan(const char *v, int n, int per)
{
    std::vector<std::pair<int, int>> r;
    if (!strcmp(v, "whole"))
        r.push_back({0, n});
    else
        for (int l = 0; l < n / per; l++) {
            const int b = per * l;
            if (!strcmp(v, "layer"))
                r.push_back({b, b + per});
            else if (!strcmp(v, "ffn")) {
                for (int i = 0; i < 4; i++)
                    r.push_back({b + i, b + i + 1});
                r.push_back({b + 4, b + 7});
                r.push_back({b + 7, b + 8});
            } else
                for (int i = 0; i < per; i++)
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
    if (getenv("STUDY_OCC"))
        printf("occupancy NW %d: %d blocks a multiprocessor, %zu shared bytes\n", NW, per_sm, sm);
    if (per_sm * nsm < G) {
        printf("%-8s NW %2d G %3d: does not fit (%d a multiprocessor)\n", v, NW, G, per_sm);
        return;
    }
    const int n = (int)c.steps.size();
    auto launches = plan(v, n, c.per);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(c.bar, 0, n * 4, st));
    if (c.sync_n)
        CK(cudaMemsetAsync(c.sync, 0, c.sync_n * 4, st));
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
                              launches[i].second, c.bar, c.bad, light, n,
                              getenv("STUDY_L2NEXT") ? atoi(getenv("STUDY_L2NEXT")) : 0));
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
    const double t = ms[ms.size() / 2], layers = n / c.per;
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
    chain cs = build_split(c, (int)layers);
    CK(cudaDeviceSynchronize());
    printf("%ld layers, %.2f GB of weights, %d multiprocessors\n", layers, c.bytes / 1e9, nsm);
    const char *vs[] = {"launches", "split", "nopdl", "ffn", "layer", "whole", "launches", "split"};
    /* the outputs depend on neither the grid nor the warps (a row's slots
     * are summed in order wherever it lies): one reference for all */
    uint64_t ref = 0;
    for (const char *v : vs)
        measure<8>(strcmp(v, "split") ? c : cs, 2 * nsm, v, &ref, 5, light);
    for (const char *v : vs)
        measure<16>(strcmp(v, "split") ? c : cs, nsm, v, &ref, 5, light);
    /* blocks small enough that the next launch's fit beside them (its
     * first chunks asked for before the last blocks of this one end) */
    const char *vs2[] = {"launches", "split"};
    for (const char *v : vs2)
        measure<8>(strcmp(v, "split") ? c : cs, nsm, v, &ref, 5, light);
    for (const char *v : vs2)
        measure<4>(strcmp(v, "split") ? c : cs, 2 * nsm, v, &ref, 5, light);
    for (const char *v : vs2)
        measure<4>(strcmp(v, "split") ? c : cs, nsm, v, &ref, 5, light);
    return 0;
}
