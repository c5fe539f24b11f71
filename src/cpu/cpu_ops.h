/* cpu_ops.h — the element-wise and per-row operators of the Qwen3.6 forward
 * pass on the CPU, as plain functions over f32 arrays with explicit sizes.
 *
 * Owns: RMSNorm, the DeltaNet L2 norm, sigmoid / SiLU / softplus, softmax,
 * SwiGLU, residual add, and partial NeoX RoPE with the IMROPE section rule.
 * These are the readable reference the GPU kernels are checked against; each
 * follows llama.cpp's CPU numerics where the brief asks for it (sums of squares
 * in double, RoPE angles by an f32 recurrence) and says so at the definition.
 * Matrix products live elsewhere (cpu_gemv); nothing here allocates. */
#ifndef CW_CPU_OPS_H
#define CW_CPU_OPS_H

#include <stdint.h>

/* y[i] = x[i] * s * w[i], s = 1/sqrt(mean(x^2) + eps); the sum of squares is
 * accumulated in double and the mean rounded to f32 (as ggml's CPU rms_norm).
 * w may be NULL (no weight). y may alias x. */
void cw_rms_norm(float *y, const float *x, const float *w, int64_t n, float eps);

/* The same over n_rows consecutive rows of n, one shared weight vector. */
void cw_rms_norm_rows(float *y, const float *x, const float *w, int64_t n, int64_t n_rows,
                      float eps);

/* L2 norm x / sqrt(sum x^2 + eps), formed the way llama.cpp's GDN graph does:
 * an RMSNorm with eps/n followed by a scale of 1/sqrt(n) (equal algebraically,
 * and equal in rounding to llama.cpp's output). y may alias x. */
void cw_l2_norm(float *y, const float *x, int64_t n, float eps);

/* Scalar activations, f32 like ggml: sigmoid 1/(1+e^-x), silu x/(1+e^-x),
 * softplus ln(1+e^x) switching to the identity above 20. */
float cw_sigmoid(float x);
float cw_silu(float x);
float cw_softplus(float x);

/* Softmax over n values: e^(x-max) in f32, the sum in double, then scaled
 * by the f32 reciprocal (ggml's soft_max). y may alias x. */
void cw_softmax(float *y, const float *x, int64_t n);

/* y[i] = silu(gate[i]) * up[i]. y may alias either input. */
void cw_swiglu(float *y, const float *gate, const float *up, int64_t n);

/* y[i] = a[i] + b[i] (the residual add). y may alias a or b. */
void cw_add(float *y, const float *a, const float *b, int64_t n);

/* ---- RoPE ----------------------------------------------------------------
 * Partial NeoX rotation as llama.cpp's IMROPE (rope type 40): only the first
 * n_rot dims of each head rotate, pair i = (i, i + n_rot/2). Pair i takes its
 * position from section (i mod sum(sections)) by the interleaved rule
 * (mod 3 -> t, h, w while within 3*sections[k], else the 4th component). For
 * text, pos = {p, p, p, 0}, and this is plain partial NeoX RoPE. */
struct cw_rope {
    int n_rot;        /* rotated dims per head (even), 64 for Qwen3.6 */
    float freq_base;  /* theta base, 1e7 */
    int sections[4];  /* {11, 11, 10, 0} */
};

/* Text positions: all three sections at p, the extra one at 0. */
void cw_rope_text_pos(int32_t pos4[4], int64_t p);

/* Fills cs[2*i] = cos, cs[2*i+1] = sin of pair i (n_rot/2 pairs, n_rot
 * floats). Angles follow llama.cpp's CPU path, not exact maths: theta_0 is the
 * position as f32, each next pair multiplies by base^(-2/n_rot) (powf) in
 * f32, then f32 cosf/sinf. Returns -1 if the sections are empty or the
 * rotation is malformed (odd n_rot). */
int cw_rope_cache(float *cs, const struct cw_rope *r, const int32_t pos4[4]);

/* Rotates the first n_rot dims of each of n_head heads of head_dim in place
 * using a cache from cw_rope_cache. */
void cw_rope_apply(float *x, const float *cs, int n_rot, int64_t head_dim, int64_t n_head);

#endif
