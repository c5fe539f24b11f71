/* oracle.h — llama.cpp (prebuilt CPU libraries from npm) as the reference.
 * Used by parity tests only; the cwen product never links llama.cpp.
 * Paths come from CWEN_ORACLE_DIR (set by CTest). */
#ifndef CW_ORACLE_H
#define CW_ORACLE_H

/* Root of the oracle cache ("$CWEN_ORACLE_DIR"). */
const char *oracle_dir(void);

/* Path of a file in the llama.cpp source tree (e.g. "models/ggml-vocab-qwen35.gguf"),
 * in a static buffer valid until the next call. */
const char *oracle_src_path(const char *rel);

/* Initialises the llama backend once and silences its logging
 * (CWEN_ORACLE_VERBOSE=1 keeps it). */
void oracle_init(void);

#endif
