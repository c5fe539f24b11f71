#!/usr/bin/python3
"""render_template.py — the reference renderer for cwen's chat-template tests.

Renders a chat template with a real Jinja engine (Jinja2) the way Hugging Face
transformers does: ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension, a `raise_exception` global and a
`tojson` filter that is json.dumps(ensure_ascii=False) with Python's default
separators and key order kept.

  render_template.py TEMPLATE CONVERSATION.json
      prints the rendering of one conversation; exit 2 (message on stderr) if
      the template raises.
  render_template.py --batch TEMPLATE CASES.json
      CASES.json is a list of conversations; prints a JSON list with, for each,
      {"ok": true, "text": ...} or {"ok": false, "error": ...}.

A conversation is {"messages": [...], "tools": [...], "add_generation_prompt":
bool, ...}; every key other than messages/tools/name/expect_error is passed to
the template as a variable (so enable_thinking, preserve_thinking,
add_vision_id are "undefined" unless present).
"""
import json
import sys

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("render_template.py: python3-jinja2 is not installed "
                     "(apt-get install python3-jinja2)\n")
    sys.exit(3)


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


SKIP = {"messages", "tools", "name", "expect_error", "add_generation_prompt"}


def render(tmpl, conv):
    kwargs = {k: v for k, v in conv.items() if k not in SKIP}
    return tmpl.render(messages=conv.get("messages", []),
                       tools=conv.get("tools"),
                       add_generation_prompt=conv.get("add_generation_prompt", False),
                       **kwargs)


def main(argv):
    batch = len(argv) == 4 and argv[1] == "--batch"
    if not batch and len(argv) != 3:
        sys.stderr.write(__doc__)
        return 64
    tpath, cpath = argv[-2], argv[-1]
    with open(tpath, encoding="utf-8") as f:
        tmpl = compile_template(f.read())
    with open(cpath, encoding="utf-8") as f:
        data = json.load(f)
    out = sys.stdout.buffer
    if not batch:
        try:
            out.write(render(tmpl, data).encode("utf-8"))
        except (TemplateError, jinja2.TemplateError) as e:
            sys.stderr.write("template error: %s\n" % e)
            return 2
        return 0
    results = []
    for conv in data:
        try:
            results.append({"ok": True, "text": render(tmpl, conv)})
        except (TemplateError, jinja2.TemplateError) as e:
            results.append({"ok": False, "error": str(e)})
    out.write(json.dumps(results, ensure_ascii=False).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
