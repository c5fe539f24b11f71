/* k_gemm.cu — dequantisation to f32 (rows, embeddings) and the prefill
 * matrix product for many tokens (see kernels.h).
 *
 * Prefill: the weights are dequantised, a chunk of rows at a time, to f32 in
 * the caller's scratch (exactly quant_dequant.c's values), then cuBLAS
 * multiplies on the tensor cores in TF32 with f32 accumulation. TF32 keeps
 * f32's exponent range (activations with large outliers would overflow f16)
 * and needs no conversion of x; the operands lose mantissa bits instead.
 * Bound: each operand is rounded (or truncated) to 10 mantissa bits,
 * relative error <= 2^-10 each, then f32 accumulation in cuBLAS's order:
 *   |y - Σ w x| <= (2^-9 + n_in 2^-24) Σ|w x|   (first order).
 * cuBLAS is deterministic for a given shape, but a token's bits may change
 * with n_tok here (tiling): batch invariance is the GEMV regime's promise.
 *
 * The chunk (CHUNK_ELEMS weights, 128 MiB of f32) bounds the scratch for the
 * LM head (248320 rows) while keeping each GEMM large enough to fill the GPU. */
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
    float *y;              /* [n][n_in] */
    cw_k_tabs tabs;
};

/* One thread per unit of 32 weights, writing its 4 runs of 8 as float4s;
 * neighbouring threads take neighbouring units of a row. An id outside the
 * table writes zeros (device ids cannot be checked from the host). */
template <class T>
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
    float *yr = a.y + i * ((int64_t)a.nb * T::QK) + (int64_t)blk * T::QK;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float4 *o = (float4 *)(yr + T::run(p, q));
        o[0] = make_float4(w[8 * q], w[8 * q + 1], w[8 * q + 2], w[8 * q + 3]);
        o[1] = make_float4(w[8 * q + 4], w[8 * q + 5], w[8 * q + 6], w[8 * q + 7]);
    }
}

namespace {
struct dq_launch {
    cudaStream_t s;
    bool pdl;
    dq_args a;
    cudaError_t e;
    template <class T>
    int go()
    {
        int64_t total = a.n * a.nb * T::UPB;
        e = cw_launch(s, pdl, dequant_kernel<T>, dim3((unsigned)((total + DQ_THREADS - 1) / DQ_THREADS)),
                      dim3(DQ_THREADS), 0, a);
        return 0;
    }
};
} // namespace

static int dequant(struct cw_cuda *c, const struct cw_k_mat *W, int64_t e, int64_t r0,
                   const int32_t *ids, int64_t n, float *d_y, struct cw_err *err)
{
    dq_launch f;
    f.s = c->stream;
    f.pdl = c->pdl;
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
    return n ? dequant(c, W, e, r0, NULL, n, d_y, err) : 0;
}

extern "C" int cw_k_get_rows(struct cw_cuda *c, const struct cw_k_mat *table,
                             const int32_t *d_tokens, int64_t n_tok, float *d_y,
                             struct cw_err *err)
{
    if (cw_k_check_mat(table, "get_rows", err))
        return -1;
    if (n_tok < 0 || (uintptr_t)d_y % 16)
        return cw_errf(err, CW_ERR_INVALID, "cuda get_rows: n_tok %lld", (long long)n_tok);
    return n_tok ? dequant(c, table, 0, 0, d_tokens, n_tok, d_y, err) : 0;
}

/* ---- prefill product ----------------------------------------------------- */

static int64_t chunk_rows(const struct cw_k_mat *W)
{
    int64_t ch = CHUNK_ELEMS / W->n_in;
    if (ch < 64)
        ch = 64;
    return ch < W->n_out ? ch : W->n_out;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

size_t cw_k_gemm_scratch(const struct cw_k_mat *W, int64_t n_tok)
{
    size_t ch = (size_t)chunk_rows(W);
    return align256(ch * (size_t)W->n_in * 4) + align256(ch * (size_t)n_tok * 4);
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

int cw_k_gemm(struct cw_cuda *c, const struct cw_k_mat *W, const float *d_x, int64_t ldx,
              int64_t n_tok, float *d_y, int64_t ldy, bool add, const float *d_scale_logit,
              void *d_scratch, struct cw_err *err)
{
    if (!d_scratch || (uintptr_t)d_scratch % 256)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda matmul: %lld tokens need %zu bytes of 256-byte aligned scratch",
                       (long long)n_tok, cw_k_gemm_scratch(W, n_tok));
    int64_t ch = chunk_rows(W);
    float *wf = (float *)d_scratch;
    float *tmp = (float *)((char *)d_scratch + align256((size_t)ch * W->n_in * 4));
    for (int64_t r0 = 0; r0 < W->n_out; r0 += ch) {
        int64_t nr = W->n_out - r0 < ch ? W->n_out - r0 : ch;
        if (dequant(c, W, 0, r0, NULL, nr, wf, err))
            return -1;
        /* column-major view: Y (nr x n_tok) = Wc^T (wf is n_in x nr) · X (n_in x n_tok) */
        const float one = 1.0f, beta = add && !d_scale_logit ? 1.0f : 0.0f;
        float *out = d_scale_logit ? tmp : d_y + r0;
        int64_t ldo = d_scale_logit ? nr : ldy;
        CW_CUBLAS_TRY(err, cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_tok,
                                        (int)W->n_in, &one, wf, CUDA_R_32F, (int)W->n_in, d_x,
                                        CUDA_R_32F, (int)ldx, &beta, out, CUDA_R_32F, (int)ldo,
                                        CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
        if (d_scale_logit) {
            int64_t n = nr * n_tok;
            scale_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(
                d_y + r0, ldy, tmp, nr, n_tok, d_scale_logit, add);
            CW_CUDA_LAUNCHED(err);
        }
    }
    return 0;
}
