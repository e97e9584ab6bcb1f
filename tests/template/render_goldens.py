#!/usr/bin/env python3
"""Renders the chat-template goldens with python3-jinja2 exactly as Hugging Face transformers
renders chat templates (transformers/utils/chat_template_utils.py): an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, its tojson
filter (json.dumps without HTML escaping), raise_exception, and strftime_now (here fixed to
2026-01-15 12:00 UTC so that the goldens are reproducible; the C++ test passes the same time).

  render_goldens.py            writes goldens.json next to this script
  render_goldens.py --check F  renders again and fails if F differs (goldens cannot drift)
"""
import datetime
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("python3-jinja2 is not installed (scripts/install-deps.sh installs it): skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2026, 1, 15, 12, 0, 0, tzinfo=datetime.timezone.utc)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def contexts():
    with open(os.path.join(HERE, "conversations.json")) as f:
        convs = json.load(f)
    for case in convs:
        for agp in (True, False):
            ctx = {
                "messages": case["messages"],
                "tools": case.get("tools"),
                "documents": None,
                "add_generation_prompt": agp,
                "bos_token": "<|bos|>",
                "eos_token": "<|eos|>",
            }
            ctx.update(case.get("kwargs", {}))
            yield case["name"] + ("" if agp else "-nogen"), ctx


def render_all():
    env = make_env()
    out = []
    tdir = os.path.join(HERE, "templates")
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            src = f.read()
        tmpl = env.from_string(src)
        for case, ctx in contexts():
            rec = {"template": name, "case": case, "context": ctx}
            try:
                rec["output"] = tmpl.render(**ctx)
            except Exception as e:  # the C++ engine must fail too
                rec["error"] = f"{type(e).__name__}: {e}"
            out.append(rec)
    # Small templates that exercise one feature each, with a common context.
    with open(os.path.join(HERE, "features.json")) as f:
        features = json.load(f)
    ctx = {"x": 1, "s": "abcdef", "u": "héllo 世界😀", "l": [1, 2, 3, 2],
           "d": {"b": 2, "a": 1, "c": "z"}, "none_val": None,
           "msgs": [{"role": "user", "content": "hi there"},
                    {"role": "assistant", "content": "yo", "tool_calls": []},
                    {"role": "user", "content": "bye"}]}
    for name, src in features:
        rec = {"template": "feature:" + name, "source": src, "context": ctx}
        try:
            rec["output"] = env.from_string(src).render(**ctx)
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    return out


def main():
    data = json.dumps(render_all(), ensure_ascii=False, indent=1) + "\n"
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2], encoding="utf-8") as f:
            old = f.read()
        if old != data:
            sys.exit(f"{sys.argv[2]} differs from what jinja2 {jinja2.__version__} renders now: "
                     "run tests/template/render_goldens.py")
        print(f"goldens match jinja2 {jinja2.__version__}")
        return
    with open(os.path.join(HERE, "goldens.json"), "w", encoding="utf-8") as f:
        f.write(data)


if __name__ == "__main__":
    main()
