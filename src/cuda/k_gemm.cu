/* k_gemm.cu — dequantisation (rows, embeddings) and the prefill matrix
 * product for many tokens (see kernels.h).
 *
 * Prefill: the weights are dequantised, a chunk of rows at a time, into the
 * caller's scratch (exactly quant_dequant.c's values), then cuBLAS
 * multiplies on the tensor cores with f32 accumulation:
 *  - the quantised types and F16 in f16: each weight is an f16 scale times a
 *    small integer (plus an f16 minimum), so its value rounds to f16 once
 *    (and must be finite there: true of the formats' scales times their
 *    integers). x is converted once per call to f16 scaled by one power of
 *    two 2^s that puts the largest |x| of the whole batch in [2^14, 2^15)
 *    (k_gemm.cuh: no overflow whatever the activations' range); the GEMM's
 *    alpha 2^-s, read from the device, undoes it exactly. Half the bytes of
 *    an f32 chunk and twice TF32's tensor rate.
 *  - F32, BF16, MXFP4, NVFP4 in TF32 (their values can leave f16's range):
 *    f32 chunks, x as it is.
 * Bound: each operand is rounded to 10 mantissa bits (f16: to nearest,
 * relative 2^-11; TF32: 2^-10 allowing truncation), then f32 accumulation in
 * cuBLAS's order:
 *   |y - Σ w x| <= (2^-9 + n_in 2^-24) Σ|w x|   (first order)
 * plus, in f16, the subnormal terms 2^-25 Σ|x| (weights below 2^-14) and
 * 2^-25·2^-s Σ|w| (x below 2^-14-s, i.e. under 2^-29 of the batch's max).
 * cuBLAS is deterministic for a given shape, but a token's bits may change
 * with n_tok here (tiling, and the batch's scale): batch invariance is the
 * GEMV regime's promise.
 *
 * The chunk (CHUNK_ELEMS weights) bounds the scratch for the LM head (248320
 * rows) while keeping each GEMM large enough to fill the GPU. */
#include "cuda/k_gemm.cuh"
#include "cuda/k_quant.cuh"
#include "cuda/kernels.h"

#define CHUNK_ELEMS ((int64_t)1 << 25)
#define DQ_THREADS 128

struct dq_args {
    const uint8_t *w; /* expert base */
    size_t rb;
    int64_t n_rows; /* rows the table has (bounds the ids) */
    int nb;
    int64_t r0;            /* rows r0 + i ... */
    const int32_t *ids;    /* ... or rows ids[i] (get_rows) */
    int64_t n;             /* rows to produce */
    void *y;               /* [n][n_in] f32 or f16 (O) */
    cw_k_tabs tabs;
};

/* One thread per unit of 32 weights, writing its 4 runs of 8 as 16-byte
 * stores (two for f32); neighbouring threads take neighbouring units of a
 * row. An id outside the table writes zeros (device ids cannot be checked
 * from the host). O: float, or __half (each value rounded once). */
template <class T, class O>
static __global__ void __launch_bounds__(DQ_THREADS) dequant_kernel(const dq_args a)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    int64_t nu = (int64_t)a.nb * T::UPB;
    int64_t idx = (int64_t)blockIdx.x * DQ_THREADS + threadIdx.x;
    if (idx >= a.n * nu)
        return;
    int64_t i = idx / nu, u = idx % nu;
    int64_t row = a.ids ? a.ids[i] : a.r0 + i;
    int blk = (int)(u / T::UPB), p = (int)(u % T::UPB);
    float w[32];
    if (row < 0 || row >= a.n_rows) {
#pragma unroll
        for (int j = 0; j < 32; j++)
            w[j] = 0.0f;
    } else {
        T::unit(a.w + (size_t)row * a.rb + (size_t)blk * T::BB, p, a.tabs, w);
    }
    O *yr = (O *)a.y + i * ((int64_t)a.nb * T::QK) + (int64_t)blk * T::QK;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float *v = w + 8 * q;
        if constexpr (sizeof(O) == 4) {
            float4 *o = (float4 *)(yr + T::run(p, q));
            o[0] = make_float4(v[0], v[1], v[2], v[3]);
            o[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
            __half2 h[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
            *(uint4 *)(yr + T::run(p, q)) = *(const uint4 *)h;
        }
    }
}

namespace {
struct dq_launch {
    cudaStream_t s;
    bool pdl, f16;
    dq_args a;
    cudaError_t e;
    template <class T>
    int go()
    {
        int64_t total = a.n * a.nb * T::UPB;
        dim3 grid((unsigned)((total + DQ_THREADS - 1) / DQ_THREADS));
        e = f16 ? cw_launch(s, pdl, dequant_kernel<T, __half>, grid, dim3(DQ_THREADS), 0, a)
                : cw_launch(s, pdl, dequant_kernel<T, float>, grid, dim3(DQ_THREADS), 0, a);
        return 0;
    }
};
} // namespace

/* Rows r0.. (or ids[i]) of expert e as f32, or f16 when f16. */
static int dequant(struct cw_cuda *c, const struct cw_k_mat *W, int64_t e, int64_t r0,
                   const int32_t *ids, int64_t n, void *d_y, bool f16, struct cw_err *err)
{
    dq_launch f;
    f.s = c->stream;
    f.pdl = c->pdl;
    f.f16 = f16;
    f.a = dq_args{(const uint8_t *)W->d_w + (size_t)e * W->expert_bytes, W->row_bytes, W->n_out,
                  (int)(W->n_in / cw_k_block_elems(W->type)), r0, ids, n, d_y, cw_k_tables()};
    f.e = cudaSuccess;
    cw_k_dispatch(W->type, f);
    CW_CUDA_TRY(err, f.e);
    return 0;
}

extern "C" int cw_k_dequant_rows(struct cw_cuda *c, const struct cw_k_mat *W, int64_t e,
                                 int64_t r0, int64_t n, float *d_y, struct cw_err *err)
{
    if (cw_k_check_mat(W, "dequant_rows", err))
        return -1;
    if (e < 0 || (e > 0 && W->expert_bytes == 0) || r0 < 0 || n < 0 || r0 + n > W->n_out ||
        (uintptr_t)d_y % 16)
        return cw_errf(err, CW_ERR_INVALID, "cuda dequant_rows: expert %lld rows [%lld, %lld) of %lld",
                       (long long)e, (long long)r0, (long long)(r0 + n), (long long)W->n_out);
    return n ? dequant(c, W, e, r0, NULL, n, d_y, false, err) : 0;
}

extern "C" int cw_k_get_rows(struct cw_cuda *c, const struct cw_k_mat *table,
                             const int32_t *d_tokens, int64_t n_tok, float *d_y,
                             struct cw_err *err)
{
    if (cw_k_check_mat(table, "get_rows", err))
        return -1;
    if (n_tok < 0 || (uintptr_t)d_y % 16)
        return cw_errf(err, CW_ERR_INVALID, "cuda get_rows: n_tok %lld", (long long)n_tok);
    return n_tok ? dequant(c, table, 0, 0, d_tokens, n_tok, d_y, false, err) : 0;
}

/* ---- prefill product ----------------------------------------------------- */

/* Whether W's values go through f16 (the header says which and why). */
static bool gemm_f16(enum cw_qtype t)
{
    return t != CW_TYPE_F32 && t != CW_TYPE_BF16 && t != CW_TYPE_MXFP4 && t != CW_TYPE_NVFP4;
}

/* Rows per chunk: a multiple of 256, so that every chunk's output column
 * (d_y + r0) stays 16-byte aligned and cuBLAS keeps its sm_90 kernels (the
 * 27B's widths gave 6553, 5461, 1927 rows: align1 cutlass sm_75 fallbacks
 * at 385 us a chunk on the H200). */
static int64_t chunk_rows(const struct cw_k_mat *W)
{
    int64_t ch = CHUNK_ELEMS / W->n_in / 256 * 256;
    if (ch < 256)
        ch = 256;
    return ch < W->n_out ? ch : W->n_out;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Scratch: x's f16 copy, the rows' maxima and alpha/beta first (the same
 * place for every matrix of one width, so that a call's matrices share
 * them, whatever their types), then the weight chunk and the scaled-by-σ
 * chunk result (d_scale_logit). */
struct gemm_layout {
    size_t xh, part, ab, w, tmp, total;
};

static gemm_layout gemm_lay(const struct cw_k_mat *W, int64_t n_tok)
{
    const size_t ch = (size_t)chunk_rows(W), n_in = (size_t)W->n_in, nt = (size_t)n_tok;
    gemm_layout L;
    size_t o = 0;
    L.xh = o, o += align256(nt * n_in * 2);
    L.part = o, o += align256(nt * 4);
    L.ab = o, o += 256;
    L.w = o, o += align256(ch * n_in * (gemm_f16(W->type) ? 2 : 4));
    L.tmp = o, o += align256(ch * nt * 4);
    L.total = o;
    return L;
}

size_t cw_k_gemm_scratch(const struct cw_k_mat *W, int64_t n_tok)
{
    return gemm_lay(W, n_tok).total;
}

/* part[t] = max |x_t| (one block per token). */
static __global__ void __launch_bounds__(256) absmax_kernel(const float *x, int64_t ldx, int n,
                                                            float *part)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const float m = cw_row_absmax<256>(x + blockIdx.x * ldx, n);
    if (threadIdx.x == 0)
        part[blockIdx.x] = m;
}

/* xh[t] = f16(x_t·2^s) with one s for the batch (from all n_rows maxima),
 * and ab = {2^-s, 0, 1}: the GEMM's alpha and its two betas. */
static __global__ void __launch_bounds__(256) xh_kernel(const float *x, int64_t ldx, int n,
                                                        const float *part, int n_rows, __half *xh,
                                                        float *ab)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    float m = 0.0f;
    for (int i = threadIdx.x; i < n_rows; i += 256)
        m = fmaxf(m, part[i]);
    const int s = cw_f16_shift(cw_block_max<256>(m));
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ab[0] = __int_as_float((127 - s) << 23);
        ab[1] = 0.0f;
        ab[2] = 1.0f;
    }
    cw_row_to_f16<256>(x + blockIdx.x * ldx, n, s, xh + (int64_t)blockIdx.x * n);
}

/* y[t][r] (+)= σ(s[t]) · tmp[t][r] for one chunk of nr rows (shared expert). */
static __global__ void scale_add_kernel(float *y, int64_t ldy, const float *tmp, int64_t nr,
                                        int64_t n_tok, const float *s, int add)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nr * n_tok)
        return;
    int64_t t = i / nr, r = i % nr;
    float v = __fmul_rn(tmp[i], cw_dev_sigmoid(s[t]));
    float *yp = y + t * ldy + r;
    *yp = add ? __fadd_rn(*yp, v) : v;
}

/* The row chunks: dequantise, multiply (alpha/beta from the host for TF32,
 * from ab on the device for f16), and scale-add when d_scale_logit. */
static int gemm_chunks(struct cw_cuda *c, const struct cw_k_mat *W, const float *d_x, int64_t ldx,
                       int64_t n_tok, float *d_y, int64_t ldy, bool add,
                       const float *d_scale_logit, uint8_t *scr, const gemm_layout &L,
                       struct cw_err *err)
{
    const bool h = gemm_f16(W->type);
    const int64_t ch = chunk_rows(W);
    float *tmp = (float *)(scr + L.tmp);
    const float *ab = (const float *)(scr + L.ab);
    const bool beta1 = add && !d_scale_logit;
    const float one = 1.0f, beta = beta1 ? 1.0f : 0.0f;
    for (int64_t r0 = 0; r0 < W->n_out; r0 += ch) {
        int64_t nr = W->n_out - r0 < ch ? W->n_out - r0 : ch;
        if (dequant(c, W, 0, r0, NULL, nr, scr + L.w, h, err))
            return -1;
        /* column-major view: Y (nr x n_tok) = Wc^T (the chunk is n_in x nr) · X (n_in x n_tok) */
        float *out = d_scale_logit ? tmp : d_y + r0;
        int64_t ldo = d_scale_logit ? nr : ldy;
        if (h)
            CW_CUBLAS_TRY(err, cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_tok,
                                            (int)W->n_in, ab, scr + L.w, CUDA_R_16F, (int)W->n_in,
                                            scr + L.xh, CUDA_R_16F, (int)W->n_in,
                                            ab + (beta1 ? 2 : 1), out, CUDA_R_32F, (int)ldo,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        else
            CW_CUBLAS_TRY(err, cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_tok,
                                            (int)W->n_in, &one, scr + L.w, CUDA_R_32F, (int)W->n_in,
                                            d_x, CUDA_R_32F, (int)ldx, &beta, out, CUDA_R_32F,
                                            (int)ldo, CUBLAS_COMPUTE_32F_FAST_TF32,
                                            CUBLAS_GEMM_DEFAULT));
        if (d_scale_logit) {
            int64_t n = nr * n_tok;
            scale_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(
                d_y + r0, ldy, tmp, nr, n_tok, d_scale_logit, add);
            CW_CUDA_LAUNCHED(err);
        }
    }
    return 0;
}

int cw_k_gemm(struct cw_cuda *c, int n, const struct cw_k_mat *const *W, const float *d_x,
              int64_t ldx, int64_t n_tok, float *const *d_y, const int64_t *ldy, bool add,
              const float *d_scale_logit, void *d_scratch, struct cw_err *err)
{
    size_t need = 0;
    bool any_f16 = false;
    for (int i = 0; i < n; i++) {
        const size_t b = cw_k_gemm_scratch(W[i], n_tok);
        need = b > need ? b : need;
        any_f16 |= gemm_f16(W[i]->type);
        if (W[i]->n_in != W[0]->n_in)
            return cw_errf(err, CW_ERR_INVALID, "cuda matmul: matrices of %lld and %lld columns "
                           "share x", (long long)W[0]->n_in, (long long)W[i]->n_in);
    }
    if (!d_scratch || (uintptr_t)d_scratch % 256)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda matmul: %lld tokens need %zu bytes of 256-byte aligned scratch",
                       (long long)n_tok, need);
    if (n_tok > INT32_MAX || W[0]->n_in > INT32_MAX)
        return cw_errf(err, CW_ERR_INVALID, "cuda matmul: %lld tokens of %lld", (long long)n_tok,
                       (long long)W[0]->n_in);
    uint8_t *scr = (uint8_t *)d_scratch;
    if (any_f16) { /* x to f16 once for all the f16 matrices */
        const gemm_layout L = gemm_lay(W[0], n_tok);
        const int ni = (int)W[0]->n_in;
        float *part = (float *)(scr + L.part);
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, absmax_kernel, dim3((unsigned)n_tok),
                                   dim3(256), 0, d_x, ldx, ni, part));
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, xh_kernel, dim3((unsigned)n_tok), dim3(256),
                                   0, d_x, ldx, ni, (const float *)part, (int)n_tok,
                                   (__half *)(scr + L.xh), (float *)(scr + L.ab)));
    }
    for (int i = 0; i < n; i++) {
        const gemm_layout L = gemm_lay(W[i], n_tok);
        const bool h = gemm_f16(W[i]->type);
        /* alpha and beta live on the device only for the f16 products */
        if (h)
            CW_CUBLAS_TRY(err, cublasSetPointerMode(c->cublas, CUBLAS_POINTER_MODE_DEVICE));
        int rc = gemm_chunks(c, W[i], d_x, ldx, n_tok, d_y[i], ldy[i], add, d_scale_logit, scr,
                             L, err);
        if (h)
            CW_CUBLAS_TRY(err, cublasSetPointerMode(c->cublas, CUBLAS_POINTER_MODE_HOST));
        if (rc)
            return -1;
    }
    return 0;
}
