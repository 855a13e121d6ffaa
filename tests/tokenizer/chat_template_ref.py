"""Reference renderer for the chat-template parity test: renders every (template, conversation,
add_generation_prompt) case of a cases file with transformers' own jinja2 environment (the one
apply_chat_template uses: trim_blocks, lstrip_blocks, its tojson and raise_exception) and writes
{"<template>/<conversation>/<gen>": text or {"error": message}} as JSON.

Usage: chat_template_ref.py CASES.json OUT.json
"""
import json
import sys

from transformers.utils.chat_template_utils import _compile_jinja_template


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    special = cases["special_tokens"]
    out = {}
    for name, source in cases["templates"].items():
        compiled = _compile_jinja_template(source)
        for i, messages in enumerate(cases["conversations"]):
            for gen in (False, True):
                key = f"{name}/{i}/{int(gen)}"
                try:
                    out[key] = compiled.render(messages=messages, add_generation_prompt=gen, **special)
                except Exception as e:  # raise_exception(), undefined attributes, ...
                    out[key] = {"error": str(e)}
    json.dump(out, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
