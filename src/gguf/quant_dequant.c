/* STUB — replaced by the quant work */
#include "gguf/quant.h"
void cw_dequant_row_f32(const void *src, float *dst, int64_t n);
void cw_dequant_row_f32(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_f16(const void *src, float *dst, int64_t n);
void cw_dequant_row_f16(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_bf16(const void *src, float *dst, int64_t n);
void cw_dequant_row_bf16(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q4_0(const void *src, float *dst, int64_t n);
void cw_dequant_row_q4_0(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q4_1(const void *src, float *dst, int64_t n);
void cw_dequant_row_q4_1(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q5_0(const void *src, float *dst, int64_t n);
void cw_dequant_row_q5_0(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q5_1(const void *src, float *dst, int64_t n);
void cw_dequant_row_q5_1(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q8_0(const void *src, float *dst, int64_t n);
void cw_dequant_row_q8_0(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q2_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q2_k(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q3_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q3_k(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q4_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q4_k(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q5_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q5_k(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q6_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q6_k(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_q8_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q8_k(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_iq4_nl(const void *src, float *dst, int64_t n);
void cw_dequant_row_iq4_nl(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_iq4_xs(const void *src, float *dst, int64_t n);
void cw_dequant_row_iq4_xs(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_mxfp4(const void *src, float *dst, int64_t n);
void cw_dequant_row_mxfp4(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_dequant_row_nvfp4(const void *src, float *dst, int64_t n);
void cw_dequant_row_nvfp4(const void *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; }
