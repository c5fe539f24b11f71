/* STUB — replaced by the gguf work */
#include "gguf/gguf.h"
