/* STUB — replaced by the quant work */
#include "gguf/quant.h"
void cw_quant_row_f32(const float *src, void *dst, int64_t n);
void cw_quant_row_f32(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_f16(const float *src, void *dst, int64_t n);
void cw_quant_row_f16(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_bf16(const float *src, void *dst, int64_t n);
void cw_quant_row_bf16(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q4_0(const float *src, void *dst, int64_t n);
void cw_quant_row_q4_0(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q4_1(const float *src, void *dst, int64_t n);
void cw_quant_row_q4_1(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q5_0(const float *src, void *dst, int64_t n);
void cw_quant_row_q5_0(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q5_1(const float *src, void *dst, int64_t n);
void cw_quant_row_q5_1(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q8_0(const float *src, void *dst, int64_t n);
void cw_quant_row_q8_0(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q2_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q2_k(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q3_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q3_k(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q4_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q4_k(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q5_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q5_k(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q6_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q6_k(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_q8_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q8_k(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_iq4_nl(const float *src, void *dst, int64_t n);
void cw_quant_row_iq4_nl(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_iq4_xs(const float *src, void *dst, int64_t n);
void cw_quant_row_iq4_xs(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_mxfp4(const float *src, void *dst, int64_t n);
void cw_quant_row_mxfp4(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
void cw_quant_row_nvfp4(const float *src, void *dst, int64_t n);
void cw_quant_row_nvfp4(const float *src, void *dst, int64_t n) { (void)src; (void)dst; (void)n; }
