/* chat_template.c — recognition of the Qwen3.5/3.6 chat template and native
 * rendering of conversations in its format (see chat_template.h for why
 * native). Every rule below mirrors a line of the Jinja template
 * (models/templates/Qwen3.5-4B.jinja in llama.cpp, plus Qwen3.6's
 * preserve_thinking switch); Python semantics that leak through Jinja2 —
 * str.strip() on Unicode whitespace, str() of True/None/floats, json.dumps
 * separators — are reproduced on purpose, since Hugging Face's rendering is
 * what the model was trained on. JSON goes through jansson. */
#include "model/chat_template.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable string ---------------------------------------------------- */

struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- Python semantics ---------------------------------------------------- */

/* Python's str.isspace() for one code point (what str.strip() removes). */
static bool py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decodes the UTF-8 sequence at s[0..n) (input is valid UTF-8: it came
 * through jansson or the caller); returns its length. */
static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
    if (len > n)
        len = n;
    uint32_t c = len == 1 ? s[0] : s[0] & (0x3f >> (len - 1));
    for (size_t i = 1; i < len; i++)
        c = (c << 6) | (s[i] & 0x3f);
    *cp = c;
    return len;
}

/* str.strip(): narrows [*s, *s+*n) in place. */
static void py_strip(const char **s, size_t *n)
{
    const unsigned char *p = (const unsigned char *)*s;
    size_t a = 0, e = *n;
    while (a < e) {
        uint32_t c;
        size_t l = utf8_dec(p + a, e - a, &c);
        if (!py_isspace(c))
            break;
        a += l;
    }
    while (e > a) {
        size_t st = e - 1;
        while (st > a && (p[st] & 0xc0) == 0x80)
            st--;
        uint32_t c;
        utf8_dec(p + st, e - st, &c);
        if (!py_isspace(c))
            break;
        e = st;
    }
    *s += a;
    *n = e - a;
}

/* repr(float): shortest round-trip digits, exponent form when the decimal
 * point would sit beyond 16 digits or before 4 zeros (CPython's 'r' rule). */
static void py_float(struct sbuf *b, double d)
{
    if (isnan(d) || isinf(d)) {
        sb_puts(b, isnan(d) ? "NaN" : d < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (d == 0) {
        sb_puts(b, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    char digits[24];
    size_t nd = 0;
    const char *q = tmp;
    if (*q == '-') {
        sb_put(b, "-", 1);
        q++;
    }
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    int decpt = atoi(q + 1) + 1;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            sb_puts(b, "0.");
            for (int i = 0; i < -decpt; i++)
                sb_put(b, "0", 1);
            sb_put(b, digits, nd);
        } else if ((size_t)decpt >= nd) {
            sb_put(b, digits, nd);
            for (size_t i = nd; i < (size_t)decpt; i++)
                sb_put(b, "0", 1);
            sb_puts(b, ".0");
        } else {
            sb_put(b, digits, (size_t)decpt);
            sb_put(b, ".", 1);
            sb_put(b, digits + decpt, nd - (size_t)decpt);
        }
    } else {
        sb_put(b, digits, 1);
        if (nd > 1) {
            sb_put(b, ".", 1);
            sb_put(b, digits + 1, nd - 1);
        }
        int e = decpt - 1;
        snprintf(tmp, sizeof tmp, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
        sb_puts(b, tmp);
    }
}

static void py_json_str(struct sbuf *b, const char *s, size_t n)
{
    sb_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            sb_put(b, s + run, i - run);
            sb_puts(b, esc);
            run = i + 1;
        }
    }
    sb_put(b, s + run, n - run);
    sb_put(b, "\"", 1);
}

/* json.dumps(v, ensure_ascii=False) with default separators. */
static void py_dumps(struct sbuf *b, const json_t *v)
{
    char tmp[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        bool first = true;
        sb_put(b, "{", 1);
        json_object_foreach((json_t *)v, k, x) {
            if (!first)
                sb_put(b, ", ", 2);
            first = false;
            py_json_str(b, k, strlen(k));
            sb_put(b, ": ", 2);
            py_dumps(b, x);
        }
        sb_put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        sb_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                sb_put(b, ", ", 2);
            py_dumps(b, json_array_get(v, i));
        }
        sb_put(b, "]", 1);
        break;
    case JSON_STRING:
        py_json_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_puts(b, tmp);
        break;
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_TRUE: sb_puts(b, "true"); break;
    case JSON_FALSE: sb_puts(b, "false"); break;
    case JSON_NULL: sb_puts(b, "null"); break;
    }
}

/* Jinja's `value | string` for a scalar: Python's str(). */
static void py_str(struct sbuf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING: sb_put(b, json_string_value(v), json_string_length(v)); break;
    case JSON_TRUE: sb_puts(b, "True"); break;
    case JSON_FALSE: sb_puts(b, "False"); break;
    case JSON_NULL: sb_puts(b, "None"); break;
    default: py_dumps(b, v); break;
    }
}

char *cw_chat_json_pydumps(const char *json, size_t len, struct cw_err *err)
{
    json_error_t je;
    json_t *v = json_loadb(json, len, JSON_DECODE_ANY, &je);
    if (!v) {
        cw_errf(err, CW_ERR_FORMAT, "json: line %d: %s", je.line, je.text);
        return NULL;
    }
    struct sbuf b = {0};
    py_dumps(&b, v);
    json_decref(v);
    if (b.oom || !b.p) {
        free(b.p);
        cw_errf(err, CW_ERR_NOMEM, "json: out of memory");
        return NULL;
    }
    return b.p;
}

/* ---- template recognition ---------------------------------------------- */

/* Fixed text the template emits; the recogniser checks each appears in the
 * source (with "\n" written as the two-character Jinja escape). */
static const char TOOLS_HEAD[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char TOOLS_INSTR[] =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is no "
    "function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n</IMPORTANT>";

struct marker {
    const char *src;  /* substring of the whitespace-normalised source */
    const char *what; /* the construct, for the error message */
};

static const struct marker MARKERS[] = {
    {"'<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n'", "ChatML user turns"},
    {"tool | tojson", "one tojson line per tool"},
    {"'<tool_call>\\n<function=' + tool_call.name + '>\\n'", "the XML tool-call opener"},
    {"'<parameter=' + args_name + '>\\n'", "the XML tool-call parameters"},
    {"args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value "
     "is not string) else args_value | string",
     "the tool-argument value rule"},
    {"'\\n</parameter>\\n'", "the parameter close"},
    {"'</function>\\n</tool_call>'", "the tool-call close"},
    {"'\\n<tool_response>\\n'", "tool results wrapped in <tool_response>"},
    {"loop.previtem and loop.previtem.role != \"tool\"", "merging of consecutive tool results"},
    {"content.startswith('<tool_response>') and content.endswith('</tool_response>')",
     "the last-user-query rule"},
    {"content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n')",
     "the split of reasoning out of content"},
    {"'\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content", "the reasoning block layout"},
    {"loop.index0 > ns.last_query_index", "reasoning kept only after the last user query"},
    {"enable_thinking is defined and enable_thinking is false", "the enable_thinking switch"},
    {"'<think>\\n\\n</think>\\n\\n'", "the empty think block of enable_thinking=false"},
    {"'<|vision_start|><|image_pad|><|vision_end|>'", "the image placeholder"},
    {"'<|vision_start|><|video_pad|><|vision_end|>'", "the video placeholder"},
};

/* The one form of Qwen3.6's switch that is understood. */
static const char PRESERVE_FORM[] =
    "(preserve_thinking is defined and preserve_thinking is true) or loop.index0 > "
    "ns.last_query_index";

/* Collapses every whitespace run to one space, so that indentation and line
 * breaks in the template do not matter to the markers. */
static char *normalise(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(n + 1), *w = o;
    if (!o)
        return NULL;
    bool sp = false;
    for (; *s; s++) {
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
            sp = true;
            continue;
        }
        if (sp && w != o)
            *w++ = ' ';
        sp = false;
        *w++ = *s;
    }
    *w = 0;
    return o;
}

/* Writes s with newlines as the Jinja escape "\n". */
static char *jinja_escaped(const char *s)
{
    struct sbuf b = {0};
    for (; *s; s++)
        if (*s == '\n')
            sb_put(&b, "\\n", 2);
        else
            sb_put(&b, s, 1);
    return b.oom ? (free(b.p), NULL) : b.p;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Normalised-source hashes of the templates tests/test_chat_template.c renders
 * byte for byte against Jinja2: llama.cpp's Qwen3.5-4B.jinja, and that file
 * with the Qwen3.6 preserve_thinking condition substituted. */
static const uint64_t KNOWN_QWEN35 = 0x85410c29c6b5f94eull;
static const uint64_t KNOWN_QWEN36 = 0xcccdb13091f04610ull;

int cw_chat_template_init(struct cw_chat_template *t, const char *src, struct cw_err *err)
{
    memset(t, 0, sizeof *t);
    if (!src || !*src)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "chat template: the GGUF has no chat template");
    int rc = -1;
    char *norm = normalise(src), *head = jinja_escaped(TOOLS_HEAD), *instr = jinja_escaped(TOOLS_INSTR);
    if (!norm || !head || !instr) {
        cw_errf(err, CW_ERR_NOMEM, "chat template: out of memory");
        goto done;
    }
    if (!strstr(src, head) || !strstr(src, instr)) {
        cw_errf(err, CW_ERR_UNSUPPORTED,
                "chat template: unsupported template: the Qwen3.5/3.6 tool instructions text "
                "is missing or differs (cwen renders only the Qwen3.5/3.6 format natively)");
        goto done;
    }
    for (size_t i = 0; i < sizeof MARKERS / sizeof MARKERS[0]; i++) {
        if (!strstr(norm, MARKERS[i].src)) {
            cw_errf(err, CW_ERR_UNSUPPORTED,
                    "chat template: unsupported template: %s (`%s`) not found (cwen renders only "
                    "the Qwen3.5/3.6 format natively)",
                    MARKERS[i].what, MARKERS[i].src);
            goto done;
        }
    }
    if (strstr(norm, "preserve_thinking")) {
        /* the understood form names the variable twice; any other use is unknown */
        int uses = 0;
        for (const char *q = norm; (q = strstr(q, "preserve_thinking")); q++)
            uses++;
        if (!strstr(norm, PRESERVE_FORM) || uses != 2) {
            cw_errf(err, CW_ERR_UNSUPPORTED,
                    "chat template: unsupported template: preserve_thinking is used in a form "
                    "other than `%s`",
                    PRESERVE_FORM);
            goto done;
        }
        t->has_preserve_thinking = true;
    }
    uint64_t h = fnv1a(norm);
    t->variant = t->has_preserve_thinking ? "qwen3.6" : "qwen3.5";
    t->is_known = h == (t->has_preserve_thinking ? KNOWN_QWEN36 : KNOWN_QWEN35);
    rc = 0;
done:
    free(norm);
    free(head);
    free(instr);
    return rc;
}

/* ---- rendering ---------------------------------------------------------- */

struct render {
    const struct cw_chat_template *t;
    const struct cw_chat_conv *conv;
    struct sbuf out;
    int image_count, video_count;
    struct cw_err *err;
};

/* The template's raise_exception(): same message, as an error. */
static int raise(struct render *r, const char *msg)
{
    return cw_errf(r->err, CW_ERR_INVALID, "chat template: %s", msg);
}

/* render_content(content, do_vision_count, is_system_content) into b. */
static int render_content(struct render *r, const struct cw_chat_msg *m, bool count, bool is_system,
                          struct sbuf *b)
{
    if (!m->parts) {
        if (m->content)
            sb_puts(b, m->content);
        return 0;
    }
    char tmp[32];
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cw_chat_part *p = &m->parts[i];
        if (p->type == CW_CHAT_PART_TEXT) {
            sb_puts(b, p->text ? p->text : "");
            continue;
        }
        bool img = p->type == CW_CHAT_PART_IMAGE;
        if (is_system)
            return raise(r, img ? "System message cannot contain images."
                                : "System message cannot contain videos.");
        int *cnt = img ? &r->image_count : &r->video_count;
        if (count)
            ++*cnt;
        if (r->conv->add_vision_id) {
            snprintf(tmp, sizeof tmp, "%s %d: ", img ? "Picture" : "Video", *cnt);
            sb_puts(b, tmp);
        }
        sb_puts(b, img ? "<|vision_start|><|image_pad|><|vision_end|>"
                       : "<|vision_start|><|video_pad|><|vision_end|>");
    }
    return 0;
}

/* render_content(...)|trim into a fresh buffer; s and n point into it. */
static int content_trimmed(struct render *r, const struct cw_chat_msg *m, bool count, bool is_system,
                           struct sbuf *b, const char **s, size_t *n)
{
    b->n = 0;
    if (render_content(r, m, count, is_system, b))
        return -1;
    *s = b->p ? b->p : "";
    *n = b->n;
    py_strip(s, n);
    return 0;
}

static const char *memfind(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, needle, nn))
            return h + i;
    return NULL;
}

static const char *memfind_last(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    for (size_t i = hn >= nn ? hn - nn + 1 : 0; i-- > 0;)
        if (!memcmp(h + i, needle, nn))
            return h + i;
    return NULL;
}

static int render_tool_calls(struct render *r, const struct cw_chat_msg *m, const char *content,
                             size_t content_n)
{
    struct sbuf *o = &r->out;
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        const struct cw_chat_tool_call *tc = &m->tool_calls[j];
        if (!tc->name)
            return cw_errf(r->err, CW_ERR_FORMAT, "chat template: tool call %zu has no name", j);
        if (j == 0) {
            const char *s = content;
            size_t n = content_n;
            py_strip(&s, &n);
            if (n)
                sb_puts(o, "\n\n");
        } else {
            sb_puts(o, "\n");
        }
        sb_puts(o, "<tool_call>\n<function=");
        sb_puts(o, tc->name);
        sb_puts(o, ">\n");
        if (tc->arguments) {
            json_error_t je;
            json_t *args = json_loads(tc->arguments, JSON_DECODE_ANY, &je);
            if (!args || !json_is_object(args)) {
                json_decref(args);
                return cw_errf(r->err, CW_ERR_FORMAT,
                               "chat template: tool call %s: arguments are not a JSON object", tc->name);
            }
            const char *k;
            json_t *v;
            json_object_foreach(args, k, v) {
                sb_puts(o, "<parameter=");
                sb_puts(o, k);
                sb_puts(o, ">\n");
                if (json_is_object(v) || json_is_array(v))
                    py_dumps(o, v);
                else
                    py_str(o, v);
                sb_puts(o, "\n</parameter>\n");
            }
            json_decref(args);
        }
        sb_puts(o, "</function>\n</tool_call>");
    }
    return 0;
}

static int render_assistant(struct render *r, size_t i, size_t last_query, const char *content,
                            size_t content_n)
{
    const struct cw_chat_msg *m = &r->conv->msgs[i];
    const char *rs = "";
    size_t rn = 0;
    if (m->reasoning_content) {
        rs = m->reasoning_content;
        rn = strlen(rs);
    } else {
        const char *end = memfind(content, content_n, "</think>");
        if (end) {
            /* reasoning: before the first </think>, after the last <think>, '\n'-trimmed */
            rs = content;
            rn = (size_t)(end - content);
            while (rn && rs[rn - 1] == '\n')
                rn--;
            const char *open = memfind_last(rs, rn, "<think>");
            if (open) {
                rn -= (size_t)(open + 7 - rs);
                rs = open + 7;
            }
            while (rn && *rs == '\n')
                rs++, rn--;
            /* content: after the last </think>, leading '\n' dropped */
            const char *last = memfind_last(content, content_n, "</think>") + 8;
            content_n -= (size_t)(last - content);
            content = last;
            while (content_n && *content == '\n')
                content++, content_n--;
        }
    }
    py_strip(&rs, &rn);
    bool keep = i > last_query || (r->t->has_preserve_thinking &&
                                   r->conv->preserve_thinking == CW_CHAT_TRUE);
    sb_puts(&r->out, "<|im_start|>assistant\n");
    if (keep) {
        sb_puts(&r->out, "<think>\n");
        sb_put(&r->out, rs, rn);
        sb_puts(&r->out, "\n</think>\n\n");
    }
    sb_put(&r->out, content, content_n);
    if (render_tool_calls(r, m, content, content_n))
        return -1;
    sb_puts(&r->out, "<|im_end|>\n");
    return 0;
}

static int render_system(struct render *r, json_t *tools, struct sbuf *tmp)
{
    const struct cw_chat_conv *c = r->conv;
    const struct cw_chat_msg *sys = c->msgs[0].role == CW_CHAT_SYSTEM ? &c->msgs[0] : NULL;
    const char *s = "";
    size_t n = 0;
    if (tools) {
        sb_puts(&r->out, "<|im_start|>system\n");
        sb_puts(&r->out, TOOLS_HEAD);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            sb_puts(&r->out, "\n");
            py_dumps(&r->out, json_array_get(tools, i));
        }
        sb_puts(&r->out, "\n</tools>");
        sb_puts(&r->out, TOOLS_INSTR);
        if (sys) {
            if (content_trimmed(r, sys, false, true, tmp, &s, &n))
                return -1;
            if (n) {
                sb_puts(&r->out, "\n\n");
                sb_put(&r->out, s, n);
            }
        }
        sb_puts(&r->out, "<|im_end|>\n");
    } else if (sys) {
        if (content_trimmed(r, sys, false, true, tmp, &s, &n))
            return -1;
        sb_puts(&r->out, "<|im_start|>system\n");
        sb_put(&r->out, s, n);
        sb_puts(&r->out, "<|im_end|>\n");
    }
    return 0;
}

/* The index of the last user message that is not just tool responses. */
static int find_last_query(struct render *r, struct sbuf *tmp, size_t *out)
{
    const struct cw_chat_conv *c = r->conv;
    for (size_t k = c->n_msgs; k-- > 0;) {
        if (c->msgs[k].role != CW_CHAT_USER)
            continue;
        const char *s;
        size_t n;
        if (content_trimmed(r, &c->msgs[k], false, false, tmp, &s, &n))
            return -1;
        bool is_resp = n >= 16 && !memcmp(s, "<tool_response>", 15) &&
                       !memcmp(s + n - 16, "</tool_response>", 16);
        if (!is_resp) {
            *out = k;
            return 0;
        }
    }
    return raise(r, "No user query found in messages.");
}

int cw_chat_render(const struct cw_chat_template *t, const struct cw_chat_conv *conv, char **out,
                   size_t *out_len, struct cw_err *err)
{
    struct render r = {.t = t, .conv = conv, .err = err};
    struct sbuf tmp = {0};
    json_t *tools = NULL;
    int rc = -1;
    *out = NULL;
    *out_len = 0;
    if (!conv->n_msgs) {
        raise(&r, "No messages provided.");
        goto done;
    }
    if (conv->tools_json) {
        json_error_t je;
        tools = json_loads(conv->tools_json, JSON_DECODE_ANY, &je);
        if (!tools || !json_is_array(tools)) {
            cw_errf(err, CW_ERR_FORMAT, "chat template: tools are not a JSON array");
            goto done;
        }
        if (!json_array_size(tools)) {
            json_decref(tools);
            tools = NULL;
        }
    }
    if (render_system(&r, tools, &tmp))
        goto done;
    size_t last_query = 0;
    if (find_last_query(&r, &tmp, &last_query))
        goto done;
    for (size_t i = 0; i < conv->n_msgs; i++) {
        const struct cw_chat_msg *m = &conv->msgs[i];
        const char *s;
        size_t n;
        if (content_trimmed(&r, m, true, false, &tmp, &s, &n))
            goto done;
        switch (m->role) {
        case CW_CHAT_SYSTEM:
            if (i != 0) {
                raise(&r, "System message must be at the beginning.");
                goto done;
            }
            break;
        case CW_CHAT_USER:
            sb_puts(&r.out, "<|im_start|>user\n");
            sb_put(&r.out, s, n);
            sb_puts(&r.out, "<|im_end|>\n");
            break;
        case CW_CHAT_ASSISTANT:
            if (render_assistant(&r, i, last_query, s, n))
                goto done;
            break;
        case CW_CHAT_TOOL:
            if (i > 0 && conv->msgs[i - 1].role != CW_CHAT_TOOL)
                sb_puts(&r.out, "<|im_start|>user");
            sb_puts(&r.out, "\n<tool_response>\n");
            sb_put(&r.out, s, n);
            sb_puts(&r.out, "\n</tool_response>");
            if (i + 1 == conv->n_msgs || conv->msgs[i + 1].role != CW_CHAT_TOOL)
                sb_puts(&r.out, "<|im_end|>\n");
            break;
        default:
            raise(&r, "Unexpected message role.");
            goto done;
        }
    }
    if (conv->add_generation_prompt) {
        sb_puts(&r.out, "<|im_start|>assistant\n");
        sb_puts(&r.out, conv->enable_thinking == CW_CHAT_FALSE ? "<think>\n\n</think>\n\n" : "<think>\n");
    }
    if (r.out.oom || tmp.oom) {
        cw_errf(err, CW_ERR_NOMEM, "chat template: out of memory");
        goto done;
    }
    if (!r.out.p)
        sb_put(&r.out, "", 0);
    *out = r.out.p;
    *out_len = r.out.n;
    r.out.p = NULL;
    rc = 0;
done:
    free(r.out.p);
    free(tmp.p);
    json_decref(tools);
    return rc;
}

/* ---- conversations from JSON -------------------------------------------- */

/* What cw_chat_conv_owned.arena_ points to: the parsed JSON (whose strings
 * the conversation borrows) and every array and string built from it. */
struct conv_arena {
    json_t *root;
    void **blocks;
    size_t n_blocks, cap;
};

static void *arena_keep(struct conv_arena *a, void *p)
{
    if (!p)
        return NULL;
    if (a->n_blocks == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        void **nb = realloc(a->blocks, cap * sizeof *nb);
        if (!nb) {
            free(p);
            return NULL;
        }
        a->blocks = nb;
        a->cap = cap;
    }
    a->blocks[a->n_blocks++] = p;
    return p;
}

static const char *role_name(enum cw_chat_role r)
{
    static const char *const names[] = {"system", "user", "assistant", "tool"};
    return names[r];
}

/* Template rule for one content item: images first (also when "text" is
 * present), then videos, then text; anything else is the template's error. */
static int part_from_json(json_t *item, struct cw_chat_part *p, struct cw_err *err)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!json_is_object(item))
        return cw_errf(err, CW_ERR_FORMAT, "chat: Unexpected item type in content.");
    if (json_object_get(item, "image") || json_object_get(item, "image_url") ||
        (type && !strcmp(type, "image"))) {
        p->type = CW_CHAT_PART_IMAGE;
    } else if (json_object_get(item, "video") || (type && !strcmp(type, "video"))) {
        p->type = CW_CHAT_PART_VIDEO;
    } else if (json_is_string(json_object_get(item, "text"))) {
        p->type = CW_CHAT_PART_TEXT;
        p->text = json_string_value(json_object_get(item, "text"));
    } else {
        return cw_errf(err, CW_ERR_FORMAT, "chat: Unexpected item type in content.");
    }
    return 0;
}

static int tool_call_from_json(struct conv_arena *a, json_t *j, struct cw_chat_tool_call *tc,
                               struct cw_err *err)
{
    json_t *fn = json_object_get(j, "function");
    if (!json_is_object(j) || (fn && !json_is_object(fn)))
        return cw_errf(err, CW_ERR_FORMAT, "chat: a tool call is not an object");
    tc->id = json_string_value(json_object_get(j, "id"));
    if (!fn)
        fn = j;
    tc->name = json_string_value(json_object_get(fn, "name"));
    if (!tc->name)
        return cw_errf(err, CW_ERR_FORMAT, "chat: a tool call has no function name");
    json_t *args = json_object_get(fn, "arguments");
    if (!args)
        return 0;
    if (json_is_string(args)) { /* OpenAI sends the arguments as JSON text */
        json_error_t je;
        json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
        bool obj = json_is_object(parsed);
        json_decref(parsed);
        if (!obj)
            return cw_errf(err, CW_ERR_FORMAT, "chat: tool call %s: arguments are not a JSON object",
                           tc->name);
        tc->arguments = json_string_value(args);
        return 0;
    }
    if (!json_is_object(args))
        return cw_errf(err, CW_ERR_FORMAT, "chat: tool call %s: arguments are not a JSON object",
                       tc->name);
    tc->arguments = arena_keep(a, json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!tc->arguments)
        return cw_errf(err, CW_ERR_NOMEM, "chat: out of memory");
    return 0;
}

static int msg_from_json(struct conv_arena *a, json_t *j, struct cw_chat_msg *m, struct cw_err *err)
{
    const char *role = json_string_value(json_object_get(j, "role"));
    int r = -1;
    for (int k = CW_CHAT_SYSTEM; role && k <= CW_CHAT_TOOL; k++)
        if (!strcmp(role, role_name((enum cw_chat_role)k)))
            r = k;
    if (r < 0)
        return cw_errf(err, CW_ERR_FORMAT, "chat: Unexpected message role.");
    m->role = (enum cw_chat_role)r;
    json_t *content = json_object_get(j, "content");
    if (json_is_string(content)) {
        m->content = json_string_value(content);
    } else if (json_is_array(content)) {
        size_t n = json_array_size(content);
        struct cw_chat_part *parts = arena_keep(a, calloc(n ? n : 1, sizeof *parts));
        if (!parts)
            return cw_errf(err, CW_ERR_NOMEM, "chat: out of memory");
        for (size_t i = 0; i < n; i++)
            if (part_from_json(json_array_get(content, i), &parts[i], err))
                return -1;
        m->parts = parts;
        m->n_parts = n;
    } else if (content && !json_is_null(content)) {
        return cw_errf(err, CW_ERR_FORMAT, "chat: Unexpected content type.");
    }
    m->reasoning_content = json_string_value(json_object_get(j, "reasoning_content"));
    m->tool_call_id = json_string_value(json_object_get(j, "tool_call_id"));
    json_t *calls = json_object_get(j, "tool_calls");
    if (json_is_array(calls) && json_array_size(calls)) {
        size_t n = json_array_size(calls);
        struct cw_chat_tool_call *tcs = arena_keep(a, calloc(n, sizeof *tcs));
        if (!tcs)
            return cw_errf(err, CW_ERR_NOMEM, "chat: out of memory");
        for (size_t i = 0; i < n; i++)
            if (tool_call_from_json(a, json_array_get(calls, i), &tcs[i], err))
                return -1;
        m->tool_calls = tcs;
        m->n_tool_calls = n;
    }
    return 0;
}

static enum cw_chat_flag flag_from_json(json_t *v)
{
    if (!v)
        return CW_CHAT_UNDEF;
    return json_is_true(v) ? CW_CHAT_TRUE : json_is_false(v) ? CW_CHAT_FALSE : CW_CHAT_UNDEF;
}

int cw_chat_conv_from_json(struct cw_chat_conv_owned *c, const char *json, size_t len,
                           struct cw_err *err)
{
    memset(c, 0, sizeof *c);
    struct conv_arena *a = calloc(1, sizeof *a);
    if (!a)
        return cw_errf(err, CW_ERR_NOMEM, "chat: out of memory");
    c->arena_ = a;
    json_error_t je;
    a->root = json_loadb(json, len, 0, &je);
    if (!a->root) {
        cw_errf(err, CW_ERR_FORMAT, "chat: JSON line %d: %s", je.line, je.text);
        goto fail;
    }
    json_t *msgs = json_object_get(a->root, "messages");
    if (!json_is_array(msgs)) {
        cw_errf(err, CW_ERR_FORMAT, "chat: \"messages\" is not an array");
        goto fail;
    }
    size_t n = json_array_size(msgs);
    struct cw_chat_msg *m = arena_keep(a, calloc(n ? n : 1, sizeof *m));
    if (!m) {
        cw_errf(err, CW_ERR_NOMEM, "chat: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (msg_from_json(a, json_array_get(msgs, i), &m[i], err)) {
            cw_err_prefix(err, "message %zu", i);
            goto fail;
        }
    }
    c->conv.msgs = m;
    c->conv.n_msgs = n;
    json_t *tools = json_object_get(a->root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            cw_errf(err, CW_ERR_FORMAT, "chat: \"tools\" is not an array");
            goto fail;
        }
        c->conv.tools_json = arena_keep(a, json_dumps(tools, JSON_COMPACT | JSON_ENCODE_ANY));
        if (!c->conv.tools_json) {
            cw_errf(err, CW_ERR_NOMEM, "chat: out of memory");
            goto fail;
        }
    }
    c->conv.add_generation_prompt = json_is_true(json_object_get(a->root, "add_generation_prompt"));
    c->conv.enable_thinking = flag_from_json(json_object_get(a->root, "enable_thinking"));
    c->conv.preserve_thinking = flag_from_json(json_object_get(a->root, "preserve_thinking"));
    c->conv.add_vision_id = json_is_true(json_object_get(a->root, "add_vision_id"));
    return 0;
fail:
    cw_chat_conv_free(c);
    return -1;
}

void cw_chat_conv_free(struct cw_chat_conv_owned *c)
{
    struct conv_arena *a = c->arena_;
    if (a) {
        for (size_t i = 0; i < a->n_blocks; i++)
            free(a->blocks[i]);
        free(a->blocks);
        json_decref(a->root);
        free(a);
    }
    memset(c, 0, sizeof *c);
}
