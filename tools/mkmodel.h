/* mkmodel.h — the synthetic model generator behind `cwen mkmodel`.
 *
 * Writes a qwen35moe / qwen35 GGUF with llama.cpp's tensor names, shapes,
 * metadata keys and per-tensor quant types (llama-quant.cpp's rules for the
 * chosen mix), random weights, and a real tokenizer copied from a vocabulary
 * GGUF. The tensor list comes from model/qwen35 (cw_qwen35_tensors); this
 * module owns weight initialisation, the mix rules and parallel writing.
 * Output is a function of (hparams, mix, seed, std, logit_std, hot_tokens,
 * hot_scale, vocab, template, name) only:
 * each chunk of rows is seeded from seed + tensor name + chunk index, so the
 * thread count never changes a byte. */
#ifndef CW_MKMODEL_H
#define CW_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/quant.h"
#include "model/qwen35.h"

enum cw_mix { CW_MIX_Q4_K_M, CW_MIX_Q8_0, CW_MIX_Q6_K, CW_MIX_BF16, CW_MIX_F32 };

/* "q4_k_m", "q8_0", "q6_k", "bf16", "f32" (any case); -1 if unknown. */
int cw_mix_from_name(const char *name);
const char *cw_mix_name(enum cw_mix mix);

/* The type llama-quantize would give tensor t of a file with hp in this mix
 * (qwen36-model.md §2): F32 for what is never quantised, use_more_bits for
 * attn_v-like and ffn_down*, Q6_K output, block-size fallbacks. */
enum cw_qtype cw_mkmodel_tensor_type(const struct cw_qwen35_hparams *hp, const struct cw_qwen35_tensor *t,
                                     enum cw_mix mix);

struct cw_mkmodel_opts {
    const char *out_path;      /* file to write (ignored by dry_run) */
    struct cw_qwen35_hparams hp; /* shape; hp.n_vocab = rows of token_embd/output */
    enum cw_mix mix;
    uint64_t seed;
    float std;                 /* weight standard deviation (0: default 0.1) */
    float logit_std;           /* output.weight std × √n_embd, i.e. the logits' std for a
                                  unit-RMS hidden state (0: default CW_MKMODEL_DEFAULT_LOGIT_STD) */
    uint32_t hot_tokens;       /* output.weight rows scaled by hot_scale, spread evenly over the
                                  vocabulary (0: none, the default): a few tokens then dominate
                                  the logits, so the top-2 margin is wide at most positions */
    float hot_scale;           /* factor for those rows (0: default CW_MKMODEL_DEFAULT_HOT_SCALE) */
    int n_threads;             /* 0: number of online CPUs */
    const char *vocab_path;    /* tokenizer source GGUF (NULL: the oracle's qwen35 vocab) */
    const char *template_path; /* chat template (NULL: the oracle's Qwen3.5-4B.jinja) */
    const char *name;          /* general.name (NULL: derived from the shape) */
    bool dry_run;              /* plan only: count tensors and bytes */
};

struct cw_mkmodel_result {
    uint64_t n_tensors;
    uint64_t file_size;   /* bytes */
    uint64_t n_params;    /* elements over all tensors */
    uint64_t decode_bytes; /* weight bytes read per token by the main pass (cw_qwen35_decode_bytes) */
    double seconds;       /* wall time of the data phase */
    /* ids the special tokens got (-1 if absent) */
    int32_t id_think, id_think_end, id_tool_call, id_tool_call_end, id_tool_resp, id_tool_resp_end;
};

#define CW_MKMODEL_DEFAULT_STD 0.1f
#define CW_MKMODEL_DEFAULT_LOGIT_STD 6.0f
#define CW_MKMODEL_DEFAULT_HOT_SCALE 8.0f

/* Whether output row `row` of an n_vocab-row head is one of n_hot hot rows:
 * the middle row of each of n_hot equal strides (ordinary tokens of Qwen's
 * vocabulary, far from the special ids at the end). */
bool cw_mkmodel_is_hot_row(uint32_t n_vocab, uint32_t n_hot, int64_t row);

/* Default paths under $CWEN_ORACLE_DIR (default ~/.cache/cwen-oracle); buf
 * receives the path. */
const char *cw_mkmodel_default_vocab(char *buf, size_t cap);
const char *cw_mkmodel_default_template(char *buf, size_t cap);

/* Generates (or with dry_run only plans) the file. Returns 0 or -1. */
int cw_mkmodel(const struct cw_mkmodel_opts *o, struct cw_mkmodel_result *res, struct cw_err *err);

#endif
