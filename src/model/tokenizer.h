/* tokenizer.h — the byte-level BPE tokenizer of Qwen GGUF files.
 *
 * Owns the vocabulary read from GGUF (tokenizer.ggml.tokens, token_type,
 * merges, special ids), the pre-tokenizer split (`qwen35`, `qwen2`), BPE
 * merging, special-token partitioning, token -> bytes pieces and streaming
 * detokenisation. It follows llama.cpp's behaviour (llama-vocab.cpp) so ids
 * match the oracle. Templates, sampling and stop strings are elsewhere.
 *
 * Ownership: cw_tokenizer_load() copies everything it needs; the cw_gguf may
 * be closed afterwards. A loaded tokenizer is read-only, so several threads
 * may tokenize at once, each with its own struct cw_tokens.
 *
 *   struct cw_tokenizer t; struct cw_tokens out = {0};
 *   cw_tokenizer_load(&t, &g, &err);
 *   cw_tokenize(&t, text, len, parse_special, &out, &err);  // out.ids[0..out.n)
 *   cw_tokens_free(&out); cw_tokenizer_free(&t);
 */
#ifndef CW_TOKENIZER_H
#define CW_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

/* Token attributes (llama.cpp's llama_token_attr bits, from token_type). */
enum cw_tok_attr {
    CW_TOK_UNDEFINED = 0,
    CW_TOK_UNKNOWN = 1 << 0,
    CW_TOK_UNUSED = 1 << 1,
    CW_TOK_NORMAL = 1 << 2,
    CW_TOK_CONTROL = 1 << 3,
    CW_TOK_USER_DEFINED = 1 << 4,
    CW_TOK_BYTE = 1 << 5,
};

enum cw_tok_pre { CW_TOK_PRE_QWEN2, CW_TOK_PRE_QWEN35 };

#define CW_TOK_MAX_EOG 16

struct cw_tokenizer {
    int32_t n_vocab;     /* real tokens in the file */
    enum cw_tok_pre pre;
    /* special ids, -1 when absent (GGUF keys, then llama.cpp's text rules) */
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos;
    int32_t eog[CW_TOK_MAX_EOG]; /* end-of-generation set, ascending */
    int n_eog;
    /* private */
    uint8_t *attr;         /* [n_vocab] enum cw_tok_attr bits */
    uint32_t *text_off;    /* [n_ids + 1] into text (virtual ids follow real ones) */
    char *text;            /* token strings (byte-encoded form), concatenated */
    uint32_t *piece_off;   /* [n_vocab + 1] into piece */
    char *piece;           /* decoded bytes of each token */
    int32_t n_ids;         /* n_vocab + virtual ids for merge strings not in the vocab */
    uint32_t *str_hash;    /* open addressing: id + 1, 0 empty; [str_cap] */
    uint32_t str_cap;
    uint64_t *merge_key;   /* (left << 32 | right) + 1, 0 empty; [merge_cap] */
    uint64_t *merge_val;   /* rank << 32 | result id */
    uint32_t merge_cap;
    int32_t byte_id[256];  /* id of the byte-encoded form of each byte */
    int32_t *special;      /* ids matched in raw text, longest first */
    int n_special;
};

/* A reusable output buffer: ids[0..n). Holds scratch space too, so reuse one
 * per thread to tokenize without allocating. Zero-initialise; free with
 * cw_tokens_free. */
struct cw_tokens {
    int32_t *ids;
    size_t n, cap;
    void *scratch; /* private */
};
void cw_tokens_free(struct cw_tokens *out);

/* Reads the tokenizer from g (tokenizer.ggml.model must be "gpt2" and
 * tokenizer.ggml.pre one of qwen35, qwen2 and its aliases). 0 or -1. */
int cw_tokenizer_load(struct cw_tokenizer *t, const struct cw_gguf *g, struct cw_err *err);
void cw_tokenizer_free(struct cw_tokenizer *t); /* safe on a zeroed struct */

/* Tokenizes text[0..len) into out (replacing its contents). Special tokens
 * (CONTROL) are recognised in the text only when parse_special is set;
 * USER_DEFINED tokens always are (as llama.cpp). Nothing is prepended or
 * appended (add_bos is the caller's business). Invalid UTF-8 bytes are
 * tokenized as U+FFFD each, as llama.cpp does. 0, or -1 on allocation failure. */
int cw_tokenize(const struct cw_tokenizer *t, const char *text, size_t len, bool parse_special,
                struct cw_tokens *out, struct cw_err *err);

/* The vocabulary string of id (byte-encoded form, not NUL-terminated);
 * NULL when id is out of range. Borrowed from t. */
const char *cw_token_text(const struct cw_tokenizer *t, int32_t id, size_t *len);
/* The bytes id decodes to (llama_token_to_piece): CONTROL and UNKNOWN
 * tokens give their text only when special is set, else nothing; UNUSED
 * tokens give nothing. Borrowed from t; NULL for an invalid id. */
const char *cw_token_piece(const struct cw_tokenizer *t, int32_t id, bool special, size_t *len);
/* Id of the token whose vocabulary string is exactly z, or -1. */
int32_t cw_token_id(const struct cw_tokenizer *t, const char *z);
enum cw_tok_attr cw_token_attr(const struct cw_tokenizer *t, int32_t id);
bool cw_token_is_eog(const struct cw_tokenizer *t, int32_t id);

/* Appends the pieces of ids[0..n) to buf[0..cap) (llama_detokenize with
 * remove_special=false, unparse_special=special). Returns the total length;
 * if that exceeds cap, only cap bytes were written. */
size_t cw_detokenize(const struct cw_tokenizer *t, const int32_t *ids, size_t n, bool special,
                     char *buf, size_t cap);

/* Streaming detokenisation: feed ids one at a time, get back only whole
 * UTF-8 sequences. An incomplete sequence at the end of a piece is held
 * (at most 3 bytes) until the next piece completes it. Bytes that can never
 * form a valid sequence are passed through unchanged (as llama.cpp's pieces
 * would be), never replaced, so concatenating every output plus
 * cw_detok_flush() equals cw_detokenize() of the same ids. */
struct cw_detok {
    uint8_t held[4];
    uint8_t n_held;
    bool special; /* render CONTROL tokens (set before use) */
};
/* Appends the completed bytes for id to buf[0..cap) (cap >= the piece
 * length + 4 always suffices); returns the bytes written, or -1 if cap is too
 * small (nothing consumed) or id is invalid. */
int cw_detok_push(struct cw_detok *d, const struct cw_tokenizer *t, int32_t id, char *buf,
                  size_t cap);
/* Emits whatever is still held (an incomplete sequence at end of stream). */
int cw_detok_flush(struct cw_detok *d, char *buf, size_t cap);

#endif
