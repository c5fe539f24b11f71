/* cpu_ops.c — element-wise and per-row operators (see cpu_ops.h). */
#include "cpu/cpu_ops.h"

#include <math.h>
#include <stddef.h>

void cw_rms_norm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]); // square in f32, add in double (as ggml)
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * scale;
    }
}

void cw_rms_norm_rows(float *y, const float *x, const float *w, int64_t n, int64_t n_rows,
                      float eps)
{
    for (int64_t r = 0; r < n_rows; r++)
        cw_rms_norm(y + r * n, x + r * n, w, n, eps);
}

void cw_l2_norm(float *y, const float *x, int64_t n, float eps)
{
    // llama.cpp: rms_norm(x, eps/n) then scale by 1/sqrt(n); same value as
    // x/sqrt(sum + eps), and this order reproduces its rounding.
    const float fn = (float)n;
    cw_rms_norm(y, x, NULL, n, eps / fn);
    const float s = 1.0f / sqrtf(fn);
    for (int64_t i = 0; i < n; i++)
        y[i] *= s;
}

float cw_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

float cw_silu(float x)
{
    return x / (1.0f + expf(-x));
}

float cw_softplus(float x)
{
    return x > 20.0f ? x : logf(1.0f + expf(x));
}

void cw_softmax(float *y, const float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += (double)y[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        y[i] *= inv;
}

void cw_swiglu(float *y, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = cw_silu(gate[i]) * up[i];
}

void cw_add(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void cw_rope_text_pos(int32_t pos4[4], int64_t p)
{
    pos4[0] = pos4[1] = pos4[2] = (int32_t)p;
    pos4[3] = 0;
}

int cw_rope_cache(float *cs, const struct cw_rope *r, const int32_t pos4[4])
{
    const int *sec = r->sections;
    const int sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
    if (r->n_rot <= 0 || r->n_rot % 2 || sect_dims <= 0)
        return -1;
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_rot);
    // One running angle per position component, advanced together in f32:
    // this recurrence (not exact angles) is what llama.cpp's CPU RoPE uses.
    float th[4];
    for (int c = 0; c < 4; c++)
        th[c] = (float)pos4[c];
    for (int i = 0; i < r->n_rot / 2; i++) {
        const int sector = i % sect_dims;
        int c = 3;
        if (sector % 3 == 1 && sector < 3 * sec[1])
            c = 1;
        else if (sector % 3 == 2 && sector < 3 * sec[2])
            c = 2;
        else if (sector % 3 == 0 && sector < 3 * sec[0])
            c = 0;
        cs[2 * i] = cosf(th[c]);
        cs[2 * i + 1] = sinf(th[c]);
        for (int k = 0; k < 4; k++)
            th[k] *= theta_scale;
    }
    return 0;
}

void cw_rope_apply(float *x, const float *cs, int n_rot, int64_t head_dim, int64_t n_head)
{
    const int half = n_rot / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *v = x + h * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = a * s + b * c;
        }
    }
}
