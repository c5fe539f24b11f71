/* oracle.c — shared setup for parity tests (see oracle.h). */
#include "oracle.h"

#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

const char *oracle_dir(void)
{
    const char *d = getenv("CWEN_ORACLE_DIR");
    return d && *d ? d : ".";
}

const char *oracle_src_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/llama.cpp/%s", oracle_dir(), rel);
    return buf;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

void oracle_init(void)
{
    static int inited;
    if (inited)
        return;
    inited = 1;
    const char *v = getenv("CWEN_ORACLE_VERBOSE");
    if (!(v && *v == '1'))
        llama_log_set(quiet_log, NULL);
    llama_backend_init();
}
