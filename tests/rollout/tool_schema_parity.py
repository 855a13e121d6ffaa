"""The tool schemas Unstuck's worker derives (src/reward/reward_worker.py, --style tools) against
transformers' get_json_schema on the functions of tool_corpus.py: equal JSON for every tool, and both
refuse every function of BROKEN. Then the worker process itself: its {"schemas": true} answer, and
calls as TRL makes them (a result, a raising tool, an unknown tool, an async tool). Exit 77 without
transformers."""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    try:
        from transformers.utils import get_json_schema
    except ImportError:
        print("skip: transformers is not installed")
        return 77
    worker = module(os.path.join(ROOT, "src/reward/reward_worker.py"), "unstuck_worker")
    corpus = module(os.path.join(HERE, "tool_corpus.py"), "tool_corpus")
    failures = 0
    for name in corpus.TOOLS:
        ours, theirs = worker.tool_schema(getattr(corpus, name)), get_json_schema(getattr(corpus, name))
        if json.dumps(ours, sort_keys=False) != json.dumps(theirs, sort_keys=False):
            print(f"FAIL {name}:\n  ours   {json.dumps(ours)}\n  theirs {json.dumps(theirs)}")
            failures += 1
    for name in corpus.BROKEN:
        fn = getattr(corpus, name)
        refused = []
        for derive in (worker.tool_schema, get_json_schema):
            try:
                derive(fn)
                refused.append(False)
            except Exception:
                refused.append(True)
        if refused != [True, True]:
            print(f"FAIL {name}: refused by (ours, transformers) = {refused}, both should refuse")
            failures += 1
    failures += check_worker(a.python, corpus)
    print(f"{len(corpus.TOOLS)} schemas equal, {len(corpus.BROKEN)} refused by both" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0


def check_worker(python, corpus):
    """The worker process: schemas, then TRL-style calls."""
    src = os.path.join(ROOT, "src/reward/reward_worker.py")
    path = os.path.join(HERE, "tool_corpus.py")
    tools = json.dumps([{"path": path, "name": n} for n in ("multiply", "fetch_page", "get_current_temperature")])
    items = [{"schemas": True},
             {"name": "multiply", "arguments": {"a": 6, "b": 7}},
             {"name": "multiply", "arguments": {"a": 6}},
             {"name": "divide", "arguments": {}},
             {"name": "fetch_page", "arguments": {"url": "x"}},
             {"name": "multiply", "arguments": "6, 7"}]
    request = json.dumps({"id": 1, "items": items}) + "\n"
    p = subprocess.run([python, src, "--style", "tools", "--tools", tools], input=request, capture_output=True,
                       text=True, timeout=60)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    if len(lines) != 2 or lines[0] != {"ready": True}:
        print(f"FAIL worker: {p.stdout!r} {p.stderr[-2000:]}")
        return 1
    got = lines[1]["results"]
    for g in got[1:]:  # each call's own time: a number, taken out before the comparison
        seconds = g["value"].pop("seconds", None)
        if not isinstance(seconds, float) or not 0.0 <= seconds < 60.0:
            print(f"FAIL worker: a call without its seconds: {json.dumps(g)} ({seconds!r})")
            return 1
    expected = [
        {"value": json.dumps([worker_schema(corpus, n) for n in ("multiply", "fetch_page", "get_current_temperature")])},
        {"value": {"content": "42", "failed": False}},
        {"value": {"content": str({"error": "multiply() missing 1 required positional argument: 'b'"}), "failed": True}},
        {"value": {"content": str({"error": "Tool divide not found."}), "failed": True}},
        {"value": {"content": "<html>x</html>", "failed": False}},
        {"value": {"content": str({"error": "test_corpus.multiply() argument after ** must be a mapping, not str"}),
                   "failed": True}},
    ]
    # The last message names the function as Python does (its qualified name): compare its tail only.
    bad = 0
    for i, (g, e) in enumerate(zip(got, expected)):
        if i == 5:
            ok = g["value"]["failed"] and "argument after ** must be a mapping, not str" in g["value"]["content"]
        else:
            ok = g == e
        if not ok:
            print(f"FAIL worker item {i}: got {json.dumps(g)}\n  expected {json.dumps(e)}")
            bad += 1
    return bad


def worker_schema(corpus, name):
    from transformers.utils import get_json_schema
    return get_json_schema(getattr(corpus, name))


if __name__ == "__main__":
    sys.exit(main())
