/* fuzz_chat_output.c — libFuzzer target for the chat-output splitter and
 * parser: arbitrary bytes, fed in pieces chosen by the input's first bytes,
 * must give the one-shot result, keep the byte accounting exact, and never
 * crash. Aborts (a finding) when an invariant fails. */
#include <stdint.h>
#include <stdlib.h>

#include "../chat_output_check.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"b\":{\"type\":"
    "[\"boolean\",\"null\"]}}}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    bool in_reasoning = data[0] & 1;
    uint64_t seed = data[1] | 0x100u;
    const char *text = (const char *)data + 2;
    size_t len = size - 2, cuts[32], n_cuts = len ? (data[0] >> 1) % 32 : 0;
    for (size_t i = 0; i < n_cuts; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        cuts[i] = (size_t)(seed >> 33) % (len + 1);
    }
    for (size_t i = 1; i < n_cuts; i++)
        for (size_t k = i; k > 0 && cuts[k - 1] > cuts[k]; k--) {
            size_t t = cuts[k];
            cuts[k] = cuts[k - 1];
            cuts[k - 1] = t;
        }
    struct co_result a = co_run(text, len, in_reasoning, TOOLS, NULL, 0);
    struct co_result b = co_run(text, len, in_reasoning, TOOLS, cuts, n_cuts);
    if (!a.ok || !b.ok || !co_same(&a, &b) || !a.events_match || !b.events_match ||
        !a.bytes_account || !b.bytes_account)
        abort();
    co_free(&a);
    co_free(&b);
    return 0;
}
