/* chat_output.c — the reasoning/tool-call splitter and the streaming parser
 * over it (see chat_output.h for the format and the contract).
 *
 * The splitter decides only on bytes it can see: when a decision depends on
 * bytes not yet given (a tag cut in half, a whitespace run that might precede
 * a tool call) it returns -2, so any split of the input gives the same spans
 * modulo boundaries. Decisions never depend on how much is buffered: bounds
 * (name length, whitespace before a call) are rules on the text itself. */
#include "model/chat_output.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- splitter ------------------------------------------------------------ */

enum {
    ST_R_LEAD,    /* start of reasoning: whitespace, optional <think> */
    ST_R_LEAD2,   /* after <think>: whitespace */
    ST_REASONING,
    ST_C_LEAD,    /* after </think>: whitespace */
    ST_CONTENT,
    ST_AFTER_TC,  /* after </tool_call> */
    ST_TC_BODY,   /* inside <function=...>, between parameters */
    ST_ARG_VALUE,
};

enum { M_NO, M_PART, M_YES };

#define MAX_NAME 256  /* longer function/parameter names are not markup */
#define MAX_GAP 64    /* whitespace allowed inside a tool-call header or close */
#define MAX_PRE 1024  /* whitespace before a tool call longer than this is text */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Does b start with l? M_PART when b is a proper prefix of l (undecided). */
static int lit(const char *b, size_t n, const char *l)
{
    size_t ln = strlen(l), k = n < ln ? n : ln;
    if (memcmp(b, l, k))
        return M_NO;
    return n >= ln ? M_YES : M_PART;
}

/* An undecided match at end of output is no match. */
static int settle(int m, bool eof) { return m == M_PART && eof ? M_NO : m; }

/* "<TAG" NAME ">" ["\n"]: the shape of both <function=...> and <parameter=...>. */
static int named_tag(const char *b, size_t n, bool eof, const char *open, size_t *len,
                     size_t *name_off, size_t *name_len)
{
    int m = settle(lit(b, n, open), eof);
    if (m != M_YES)
        return m;
    size_t i = strlen(open), start = i;
    while (i < n && b[i] != '>' && b[i] != '<' && !is_ws(b[i]) && i - start <= MAX_NAME)
        i++;
    if (i - start > MAX_NAME)
        return M_NO;
    if (i == n)
        return eof ? M_NO : M_PART;
    if (b[i] != '>' || i == start)
        return M_NO;
    *name_off = start;
    *name_len = i - start;
    i++;
    if (i == n && !eof)
        return M_PART; /* is the optional newline next? */
    if (i < n && b[i] == '\n')
        i++;
    *len = i;
    return M_YES;
}

/* Skips up to MAX_GAP whitespace; M_PART if the run reaches the end. */
static int gap(const char *b, size_t n, bool eof, size_t *i)
{
    size_t st = *i;
    while (*i < n && is_ws(b[*i]) && *i - st <= MAX_GAP)
        (*i)++;
    if (*i - st > MAX_GAP)
        return M_NO;
    if (*i == n)
        return eof ? M_NO : M_PART;
    return M_YES;
}

/* "<tool_call>" ws "<function=NAME>" ["\n"] */
static int tool_header(const char *b, size_t n, bool eof, size_t *len, size_t *name_off,
                       size_t *name_len)
{
    int m = settle(lit(b, n, "<tool_call>"), eof);
    if (m != M_YES)
        return m;
    size_t i = strlen("<tool_call>");
    if ((m = gap(b, n, eof, &i)) != M_YES)
        return m;
    size_t l;
    m = named_tag(b + i, n - i, eof, "<function=", &l, name_off, name_len);
    if (m == M_YES) {
        *name_off += i;
        *len = i + l;
    }
    return m;
}

/* "</function>" ws "</tool_call>" */
static int tool_close(const char *b, size_t n, bool eof, size_t *len)
{
    int m = settle(lit(b, n, "</function>"), eof);
    if (m != M_YES)
        return m;
    size_t i = strlen("</function>");
    if ((m = gap(b, n, eof, &i)) != M_YES)
        return m;
    m = settle(lit(b + i, n - i, "</tool_call>"), eof);
    *len = i + strlen("</tool_call>");
    return m;
}

/* ["\n"] "</parameter>" ["\n"] */
static int arg_close(const char *b, size_t n, bool eof, size_t *len)
{
    size_t i = n && b[0] == '\n' ? 1 : 0;
    int m = settle(lit(b + i, n - i, "</parameter>"), eof);
    if (m != M_YES)
        return m;
    i += strlen("</parameter>");
    if (i == n && !eof)
        return M_PART;
    if (i < n && b[i] == '\n')
        i++;
    *len = i;
    return M_YES;
}

static size_t ws_run(const char *b, size_t n)
{
    size_t i = 0;
    while (i < n && is_ws(b[i]))
        i++;
    return i;
}

/* Plain text up to the next byte that may start markup. */
static size_t text_run(const char *b, size_t n, bool stop_ws)
{
    size_t i = 0;
    while (i < n && b[i] != '<' && !(stop_ws && is_ws(b[i])))
        i++;
    return i;
}

static int emit(struct cw_chat_span *sp, enum cw_chat_span_kind k, size_t len)
{
    sp->kind = k;
    return (int)len;
}

/* Reasoning or content text at b: plain runs, whitespace (markup before a
 * tag that ends the text), and '<' that may open a tag. */
static int split_text(struct cw_chat_splitter *s, const char *b, size_t n, bool eof,
                      struct cw_chat_span *sp)
{
    bool reasoning = s->state == ST_REASONING;
    enum cw_chat_span_kind text = reasoning ? CW_SPAN_REASONING : CW_SPAN_CONTENT;
    size_t l, no, nl;
    if (is_ws(b[0])) {
        size_t w = ws_run(b, n);
        if (w > MAX_PRE) /* only the last MAX_PRE bytes of a run may precede a call */
            return emit(sp, text, w - MAX_PRE);
        if (w == n)
            return eof ? emit(sp, text, w) : -2;
        int m = tool_header(b + w, n - w, eof, &l, &no, &nl);
        if (m == M_PART)
            return -2;
        if (m == M_YES)
            return emit(sp, CW_SPAN_PRE_TOOL, w);
        if (reasoning) {
            m = settle(lit(b + w, n - w, "</think>"), eof);
            if (m == M_PART)
                return -2;
            if (m == M_YES)
                return emit(sp, CW_SPAN_MARKUP, w);
        }
        s->state = reasoning ? ST_REASONING : ST_CONTENT;
        return emit(sp, text, w);
    }
    if (b[0] == '<') {
        int m = tool_header(b, n, eof, &l, &no, &nl);
        if (m == M_PART)
            return -2;
        if (m == M_YES) {
            s->state = ST_TC_BODY;
            sp->name_off = no;
            sp->name_len = nl;
            return emit(sp, CW_SPAN_TOOL_OPEN, l);
        }
        if (reasoning) {
            m = settle(lit(b, n, "</think>"), eof);
            if (m == M_PART)
                return -2;
            if (m == M_YES) {
                s->state = ST_C_LEAD;
                return emit(sp, CW_SPAN_MARKUP, strlen("</think>"));
            }
        }
        s->state = reasoning ? ST_REASONING : ST_CONTENT;
        return emit(sp, text, 1 + text_run(b + 1, n - 1, true));
    }
    s->state = reasoning ? ST_REASONING : ST_CONTENT;
    return emit(sp, text, text_run(b, n, true));
}

void cw_chat_split_init(struct cw_chat_splitter *s, bool in_reasoning)
{
    s->state = in_reasoning ? ST_R_LEAD : ST_C_LEAD;
}

int cw_chat_split_next(struct cw_chat_splitter *s, const char *b, size_t n, bool eof,
                       struct cw_chat_span *sp)
{
    if (!s || !sp || (!b && n))
        return -1;
    memset(sp, 0, sizeof *sp);
    if ((s->state == ST_TC_BODY || s->state == ST_ARG_VALUE) && n == 0 && eof) {
        s->state = ST_CONTENT; /* output ended inside a tool call */
        return emit(sp, CW_SPAN_TOOL_ABORT, 0);
    }
    if (n == 0)
        return -2;
    if (n > (size_t)1 << 30)
        n = (size_t)1 << 30; /* spans fit in an int */
    size_t l, no, nl;
    int m;
    switch (s->state) {
    case ST_R_LEAD:
    case ST_R_LEAD2:
    case ST_C_LEAD:
        if (is_ws(b[0]))
            return emit(sp, CW_SPAN_MARKUP, ws_run(b, n));
        if (s->state != ST_R_LEAD2) {
            m = settle(lit(b, n, "<think>"), eof);
            if (m == M_PART)
                return -2;
            if (m == M_YES) {
                s->state = ST_R_LEAD2;
                return emit(sp, CW_SPAN_MARKUP, strlen("<think>"));
            }
        }
        s->state = s->state == ST_C_LEAD ? ST_CONTENT : ST_REASONING;
        return split_text(s, b, n, eof, sp);
    case ST_AFTER_TC:
        if (is_ws(b[0])) /* the newline between calls, or after the last */
            return emit(sp, CW_SPAN_MARKUP, ws_run(b, n));
        s->state = ST_CONTENT;
        return split_text(s, b, n, eof, sp);
    case ST_REASONING:
    case ST_CONTENT:
        return split_text(s, b, n, eof, sp);
    case ST_TC_BODY:
        if (is_ws(b[0]))
            return emit(sp, CW_SPAN_MARKUP, ws_run(b, n));
        m = named_tag(b, n, eof, "<parameter=", &l, &no, &nl);
        if (m == M_YES) {
            s->state = ST_ARG_VALUE;
            sp->name_off = no;
            sp->name_len = nl;
            return emit(sp, CW_SPAN_ARG_OPEN, l);
        }
        if (m == M_NO) {
            m = tool_close(b, n, eof, &l);
            if (m == M_YES) {
                s->state = ST_AFTER_TC;
                return emit(sp, CW_SPAN_TOOL_CLOSE, l);
            }
        }
        if (m == M_PART)
            return -2;
        s->state = ST_CONTENT;
        return emit(sp, CW_SPAN_TOOL_ABORT, 0);
    case ST_ARG_VALUE:
        if (b[0] == '\n' || b[0] == '<') {
            m = arg_close(b, n, eof, &l);
            if (m == M_PART)
                return -2;
            if (m == M_YES) {
                s->state = ST_TC_BODY;
                return emit(sp, CW_SPAN_ARG_CLOSE, l);
            }
            l = 1;
        } else {
            l = 0;
        }
        while (l < n && b[l] != '\n' && b[l] != '<')
            l++;
        return emit(sp, CW_SPAN_ARG_VALUE, l);
    }
    return -1;
}

/* ---- parser -------------------------------------------------------------- */

static int sb_put(struct cw_chat_strbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static void sb_free(struct cw_chat_strbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int cw_chat_parser_init(struct cw_chat_parser *p, bool in_reasoning, const char *tools_json,
                        cw_chat_event_fn fn, void *user, struct cw_err *err)
{
    memset(p, 0, sizeof *p);
    cw_chat_split_init(&p->split_, in_reasoning);
    p->fn_ = fn;
    p->user_ = user;
    if (tools_json) {
        json_error_t je;
        json_t *t = json_loads(tools_json, 0, &je);
        if (!json_is_array(t)) {
            json_decref(t);
            return cw_errf(err, CW_ERR_FORMAT, "chat output: tools are not a JSON array");
        }
        p->tools_ = t;
    }
    return 0;
}

void cw_chat_parser_free(struct cw_chat_parser *p)
{
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    sb_free(&p->reasoning);
    sb_free(&p->content);
    sb_free(&p->pending_);
    sb_free(&p->raw_);
    sb_free(&p->args_);
    sb_free(&p->value_);
    sb_free(&p->cur_name_);
    sb_free(&p->arg_name_);
    json_decref(p->tools_);
    memset(p, 0, sizeof *p);
}

static int event(struct cw_chat_parser *p, enum cw_chat_event_type type, const char *text, size_t len,
                 struct cw_err *err)
{
    struct cw_chat_event ev = {type, p->n_calls, text, len};
    if (p->fn_ && p->fn_(p->user_, &ev))
        return cw_errf(err, CW_ERR_INVALID, "chat output: stopped by the event callback");
    return 0;
}

/* Bit set of JSON types a parameter accepts, from its schema "type". */
enum { T_STRING = 1, T_NUMBER = 2, T_INTEGER = 4, T_BOOLEAN = 8, T_NULL = 16, T_OBJECT = 32,
       T_ARRAY = 64, T_ANY = 127 };

static unsigned type_bit(const char *t)
{
    static const char *const names[] = {"string", "number", "integer", "boolean", "null", "object",
                                        "array"};
    for (unsigned i = 0; t && i < 7; i++)
        if (!strcmp(t, names[i]))
            return 1u << i;
    return T_ANY; /* unknown types constrain nothing */
}

static unsigned param_types(json_t *tools, const char *fn, const char *arg)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i), *f = json_object_get(t, "function");
        if (!f)
            f = t;
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn))
            continue;
        json_t *ty = json_object_get(
            json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), arg),
            "type");
        if (json_is_string(ty))
            return type_bit(json_string_value(ty));
        if (json_is_array(ty) && json_array_size(ty)) {
            unsigned m = 0;
            for (size_t k = 0; k < json_array_size(ty); k++)
                m |= type_bit(json_string_value(json_array_get(ty, k)));
            return m;
        }
        return T_ANY;
    }
    return T_ANY;
}

static bool type_allowed(json_t *v, unsigned m)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return m & T_OBJECT;
    case JSON_ARRAY: return m & T_ARRAY;
    case JSON_STRING: return m & T_STRING;
    case JSON_INTEGER: return m & (T_INTEGER | T_NUMBER);
    case JSON_REAL: return m & T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE: return m & T_BOOLEAN;
    case JSON_NULL: return m & T_NULL;
    }
    return false;
}

/* The value as JSON: parsed when the schema allows more than a string and
 * the text parses to an allowed type, else the text as a JSON string. */
static json_t *param_value(struct cw_chat_parser *p)
{
    const char *v = p->value_.p ? p->value_.p : "";
    unsigned m = param_types(p->tools_, p->cur_name_.p, p->arg_name_.p ? p->arg_name_.p : "");
    if (m != T_STRING) {
        json_error_t je;
        json_t *j = json_loadb(v, p->value_.n, JSON_DECODE_ANY, &je);
        if (j && type_allowed(j, m))
            return j;
        json_decref(j);
        /* the template writes booleans and null with Python's str() */
        if (m != T_ANY && (m & T_BOOLEAN) && (!strcmp(v, "True") || !strcmp(v, "False")))
            return json_boolean(v[0] == 'T');
        if (m != T_ANY && (m & T_NULL) && !strcmp(v, "None"))
            return json_null();
    }
    return json_stringn(v, p->value_.n);
}

/* Strict UTF-8 (what JSON text needs); names and values that fail it make
 * the call malformed. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n)
            return false;
        uint32_t cp = l == 1 ? c : c & (0x7f >> l);
        for (size_t k = 1; k < l; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) || (l == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += l;
    }
    return true;
}

/* ",\"name\":value" (or "{..." for the first) onto the arguments. */
static int finish_param(struct cw_chat_parser *p, struct cw_err *err)
{
    json_t *v = param_value(p);
    json_t *k = json_stringn(p->arg_name_.p ? p->arg_name_.p : "", p->arg_name_.n);
    char *vs = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    char *ks = k ? json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    json_decref(k);
    size_t from = p->args_.n;
    int rc = -1;
    if (vs && ks && !sb_put(&p->args_, p->args_.n ? "," : "{", 1) &&
        !sb_put(&p->args_, ks, strlen(ks)) && !sb_put(&p->args_, ":", 1) &&
        !sb_put(&p->args_, vs, strlen(vs)))
        rc = event(p, CW_CHAT_EV_TOOL_ARGS, p->args_.p + from, p->args_.n - from, err);
    else
        cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
    free(vs);
    free(ks);
    return rc;
}

static int finish_call(struct cw_chat_parser *p, struct cw_err *err)
{
    size_t from = p->args_.n;
    if (sb_put(&p->args_, p->args_.n ? "}" : "{}", p->args_.n ? 1 : 2))
        return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
    if (event(p, CW_CHAT_EV_TOOL_ARGS, p->args_.p + from, p->args_.n - from, err) ||
        event(p, CW_CHAT_EV_TOOL_END, p->args_.p, p->args_.n, err))
        return -1;
    struct cw_chat_call *c = realloc(p->calls, (p->n_calls + 1) * sizeof *c);
    if (!c)
        return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
    p->calls = c;
    c[p->n_calls].name = p->cur_name_.p;
    c[p->n_calls].arguments = p->args_.p;
    p->n_calls++;
    memset(&p->cur_name_, 0, sizeof p->cur_name_);
    memset(&p->args_, 0, sizeof p->args_);
    p->n_tool_raw += p->raw_.n;
    p->raw_.n = 0;
    p->in_call_ = false;
    return 0;
}

static int text_out(struct cw_chat_parser *p, struct cw_chat_strbuf *to, enum cw_chat_event_type t,
                    const char *s, size_t n, struct cw_err *err)
{
    if (sb_put(to, s, n))
        return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
    return event(p, t, s, n, err);
}

/* The open call is malformed: withdraw it, its raw text becomes content. */
static int abort_call(struct cw_chat_parser *p, struct cw_err *err)
{
    if (event(p, CW_CHAT_EV_TOOL_ABORT, NULL, 0, err))
        return -1;
    p->in_call_ = false;
    p->cur_name_.n = p->args_.n = p->value_.n = 0;
    size_t n = p->raw_.n;
    p->raw_.n = 0;
    return n ? text_out(p, &p->content, CW_CHAT_EV_CONTENT, p->raw_.p, n, err) : 0;
}

static int on_span(struct cw_chat_parser *p, const struct cw_chat_span *sp, const char *s, size_t n,
                   struct cw_err *err)
{
    if (p->in_call_ || sp->kind == CW_SPAN_PRE_TOOL || sp->kind == CW_SPAN_TOOL_OPEN)
        if (sb_put(&p->raw_, s, n))
            return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
    switch (sp->kind) {
    case CW_SPAN_REASONING: return text_out(p, &p->reasoning, CW_CHAT_EV_REASONING, s, n, err);
    case CW_SPAN_CONTENT: return text_out(p, &p->content, CW_CHAT_EV_CONTENT, s, n, err);
    case CW_SPAN_MARKUP:
        if (!p->in_call_)
            p->n_markup += n;
        return 0;
    case CW_SPAN_PRE_TOOL: return 0; /* held in raw_: markup if the call completes */
    case CW_SPAN_TOOL_OPEN:
        p->in_call_ = true;
        p->cur_name_.n = p->args_.n = 0;
        if (sb_put(&p->cur_name_, s + sp->name_off, sp->name_len))
            return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
        if (!utf8_ok((const unsigned char *)s + sp->name_off, sp->name_len)) {
            p->split_.state = ST_CONTENT; /* not a name: the header is text */
            p->in_call_ = false;
            size_t raw = p->raw_.n;
            p->raw_.n = 0;
            return text_out(p, &p->content, CW_CHAT_EV_CONTENT, p->raw_.p, raw, err);
        }
        return event(p, CW_CHAT_EV_TOOL_START, p->cur_name_.p, p->cur_name_.n, err);
    case CW_SPAN_ARG_OPEN:
        p->arg_name_.n = p->value_.n = 0;
        return sb_put(&p->arg_name_, s + sp->name_off, sp->name_len) || sb_put(&p->value_, "", 0)
                   ? cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory")
                   : 0;
    case CW_SPAN_ARG_VALUE:
        return sb_put(&p->value_, s, n) ? cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory") : 0;
    case CW_SPAN_ARG_CLOSE:
        if (!utf8_ok((const unsigned char *)p->value_.p, p->value_.n) ||
            !utf8_ok((const unsigned char *)p->arg_name_.p, p->arg_name_.n)) {
            p->split_.state = ST_CONTENT;
            return abort_call(p, err);
        }
        return finish_param(p, err);
    case CW_SPAN_TOOL_CLOSE: return finish_call(p, err);
    case CW_SPAN_TOOL_ABORT: return abort_call(p, err);
    }
    return 0;
}

/* Runs the splitter over pending_ + text; keeps what it cannot decide. */
static int run(struct cw_chat_parser *p, const char *text, size_t len, bool eof, struct cw_err *err)
{
    if (p->failed_)
        return cw_errf(err, CW_ERR_INVALID, "chat output: parser failed earlier");
    /* Bytes are consumed straight from text when nothing is pending; only an
     * undecided tail is copied. */
    const char *b = text;
    size_t n = len;
    if (p->pending_.n) {
        if (sb_put(&p->pending_, text, len))
            return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
        b = p->pending_.p;
        n = p->pending_.n;
    }
    size_t off = 0;
    for (;;) {
        struct cw_chat_span sp;
        int k = cw_chat_split_next(&p->split_, b + off, n - off, eof, &sp);
        if (k == -2)
            break;
        if (k < 0 || on_span(p, &sp, b + off, (size_t)k, err)) {
            p->failed_ = true;
            return k < 0 ? cw_errf(err, CW_ERR_INVALID, "chat output: splitter error") : -1;
        }
        off += (size_t)k;
    }
    if (b == p->pending_.p) {
        memmove(p->pending_.p, p->pending_.p + off, n - off);
        p->pending_.n = n - off;
    } else if (off < n && sb_put(&p->pending_, b + off, n - off)) {
        return cw_errf(err, CW_ERR_NOMEM, "chat output: out of memory");
    }
    return 0;
}

int cw_chat_parser_feed(struct cw_chat_parser *p, const char *text, size_t len, struct cw_err *err)
{
    return run(p, text, len, false, err);
}

int cw_chat_parser_finish(struct cw_chat_parser *p, struct cw_err *err)
{
    if (run(p, "", 0, true, err))
        return -1;
    /* whitespace after the last call is markup */
    p->n_markup += p->raw_.n;
    p->raw_.n = 0;
    if (!p->reasoning.p)
        sb_put(&p->reasoning, "", 0);
    if (!p->content.p)
        sb_put(&p->content, "", 0);
    return 0;
}
