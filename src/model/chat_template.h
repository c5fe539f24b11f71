/* chat_template.h — conversations and their rendering into a Qwen3.5/3.6 prompt.
 *
 * Owns the plain-C conversation (struct cw_chat_conv: messages with roles,
 * content or content parts, reasoning_content, tool calls, tool results; tools
 * as JSON text), its construction from OpenAI-style JSON, and the rendering of
 * it into prompt text exactly as the `tokenizer.chat_template` embedded in a
 * Qwen3.5/3.6 GGUF renders it under Hugging Face's Jinja2 setup.
 *
 * Design: cwen does not interpret Jinja. It renders the Qwen3.5/3.6 format
 * natively and first *recognises* the embedded template: cw_chat_template_init
 * checks that the source contains every construct the native renderer
 * reproduces (the literal tool instructions, the XML tool-call layout, the
 * reasoning split, the last-query rule, the generation prompt, and optionally
 * Qwen3.6's `preserve_thinking` switch). A template without them is refused
 * with an error naming the missing construct, so a GGUF whose template cwen
 * cannot honour is told so instead of being rendered wrongly. A native renderer
 * is a few hundred lines; a faithful Jinja subset is thousands, and the
 * byte-for-byte test against Jinja2 (tests/test_chat_template.c) keeps the two
 * in step. Parsing the model's output lives in chat_output.h. */
#ifndef CW_CHAT_TEMPLATE_H
#define CW_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

enum cw_chat_role {
    CW_CHAT_SYSTEM,
    CW_CHAT_USER,
    CW_CHAT_ASSISTANT,
    CW_CHAT_TOOL, /* a tool result */
};

enum cw_chat_part_type {
    CW_CHAT_PART_TEXT,
    CW_CHAT_PART_IMAGE, /* rendered as a vision placeholder */
    CW_CHAT_PART_VIDEO,
};

struct cw_chat_part {
    enum cw_chat_part_type type;
    const char *text; /* CW_CHAT_PART_TEXT only */
};

struct cw_chat_tool_call {
    const char *id;        /* may be NULL; not rendered */
    const char *name;
    const char *arguments; /* JSON object text, or NULL for "no arguments" */
};

struct cw_chat_msg {
    enum cw_chat_role role;
    /* Content is either a string (content, NULL = none) or a list of parts
     * (parts non-NULL, content ignored). */
    const char *content;
    const struct cw_chat_part *parts;
    size_t n_parts;
    const char *reasoning_content; /* NULL = absent (then split out of content) */
    const struct cw_chat_tool_call *tool_calls;
    size_t n_tool_calls;
    const char *tool_call_id; /* tool results; not rendered by Qwen */
};

/* Template variables that may be left undefined, as Jinja distinguishes. */
enum cw_chat_flag { CW_CHAT_UNDEF = -1, CW_CHAT_FALSE = 0, CW_CHAT_TRUE = 1 };

struct cw_chat_conv {
    const struct cw_chat_msg *msgs;
    size_t n_msgs;
    const char *tools_json; /* JSON array of tool definitions, or NULL */
    bool add_generation_prompt;
    enum cw_chat_flag enable_thinking;   /* undefined renders as "on" */
    enum cw_chat_flag preserve_thinking; /* honoured only by templates that use it */
    bool add_vision_id;
};

/* What cw_chat_template_init learnt from the template source. */
struct cw_chat_template {
    bool has_preserve_thinking; /* the Qwen3.6 variant */
    const char *variant;        /* "qwen3.5", "qwen3.6"; static string */
    bool is_known;              /* source hash matches a template tested byte for byte */
};

/* Recognises a chat template source (the GGUF's tokenizer.chat_template).
 * Returns 0, or -1 with CW_ERR_UNSUPPORTED and a message naming the first
 * construct cwen cannot honour. */
int cw_chat_template_init(struct cw_chat_template *t, const char *src, struct cw_err *err);

/* Renders conv. On success returns 0 and sets *out to a NUL-terminated string
 * (caller frees) of *out_len bytes. Conversations the template itself rejects
 * (raise_exception: no messages, no user query, misplaced system message,
 * images in the system message, ...) fail with CW_ERR_INVALID and the
 * template's message; malformed tools/arguments JSON fails with CW_ERR_FORMAT. */
int cw_chat_render(const struct cw_chat_template *t, const struct cw_chat_conv *conv,
                   char **out, size_t *out_len, struct cw_err *err);

/* A conversation built from JSON, owning all its strings. */
struct cw_chat_conv_owned {
    struct cw_chat_conv conv;
    void *arena_; /* internal */
};

/* Builds a conversation from a JSON object {messages, tools,
 * add_generation_prompt, enable_thinking, preserve_thinking, add_vision_id}
 * in the OpenAI message shape: content as string/null/list of parts
 * ({"type":"text","text":..}, {"type":"image_url",..}, {"type":"video",..}),
 * tool_calls as [{"id", "function": {"name", "arguments"}}] with arguments an
 * object or a JSON string holding one. Returns 0 or -1 (CW_ERR_FORMAT). Free
 * with cw_chat_conv_free. */
int cw_chat_conv_from_json(struct cw_chat_conv_owned *c, const char *json, size_t len,
                           struct cw_err *err);
void cw_chat_conv_free(struct cw_chat_conv_owned *c);

/* Serialises JSON text the way Python's json.dumps(ensure_ascii=False) does
 * (", " and ": " separators, key order kept, shortest float repr) — the
 * template's `tojson`. Returns a malloc'd string or NULL with err set. */
char *cw_chat_json_pydumps(const char *json, size_t len, struct cw_err *err);

#endif
