"""Unstuck's Python reward worker (compiled into the binary; see include/unstuck/reward/worker_pool.h).

Imports the user's file once (a file path; a file inside a package is imported by its dotted name,
so its relative imports work; or a module, verl's pkg://a.b.c or a.b.c, found on --pythonpath and
the interpreter's path), calls it once with --factory-kwargs when the name is a factory, checks that
the function takes the arguments its style passes, then answers one JSON request per line on stdin
with one JSON line on stdout. What the function prints goes to stderr, so it cannot corrupt the
answers. --kwargs are added to every call and win over the passed arguments (verl's reward_kwargs).

  --style verl: name(data_source=, solution_str=, ground_truth=, extra_info=, **kwargs) per item, as
                verl's reward managers call compute_score; a number (bool, int, float) or a dict
                with "score" (its other numeric keys are returned as extra, the rest as columns);
                an async function is awaited
  --style trl:  name(prompts=[...], completions=[...], completion_ids=[...], trainer_state=,
                log_extra=, log_metric=, <column>=[...] for every other column, **kwargs) once per
                batch, as TRL 1.16's GRPOTrainer._calculate_rewards calls it (a function without
                **kwargs gets the names it declares); a list with one number or None per completion
                (None: not applicable to that completion); an async function is awaited
"""
import argparse
import asyncio
import importlib.util
import inspect
import json
import math
import numbers
import os
import re
import sys
import traceback
import types

VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
TRL_ARGS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


def short_traceback(limit=12):
    try:
        lines = traceback.format_exc().rstrip().splitlines()
    except BaseException:  # an exception whose str() raises
        return "an exception that cannot be printed"
    return clean("\n".join(lines[-limit:]))


def module_name_of(path):
    """The dotted module `path` names (verl's pkg://a.b.c, or a.b.c itself), or None for a file."""
    if path.startswith("pkg://"):
        return path[len("pkg://"):].replace("/", ".").strip(".")
    if "/" not in path and not path.endswith(".py") and not os.path.exists(path) and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", path):
        return path
    return None


def package_of(path):
    """(the folder above the package, the dotted name) of a file inside a package, else None."""
    folder = os.path.dirname(path)
    parts = [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return (folder, ".".join(parts)) if len(parts) > 1 else None


def load(path, name, pythonpath):
    for folder in reversed(pythonpath):
        sys.path.insert(0, folder)
    dotted = module_name_of(path)
    if dotted is None:
        if not os.path.isfile(path):
            raise RuntimeError(f"no such file: {path}")
        path = os.path.abspath(path)
        package = package_of(path)
        if package is not None:  # a file of a package: imported by its name, so relative imports work
            sys.path.insert(0, package[0])
            dotted = package[1]
    try:
        if dotted is not None:
            module = importlib.import_module(dotted)
        else:
            spec = importlib.util.spec_from_file_location("unstuck_user_reward", path)
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, os.path.dirname(path))
            spec.loader.exec_module(module)
    except Exception:
        raise RuntimeError(f"importing {dotted or path} failed:\n{short_traceback()}")
    fn = getattr(module, name, None)
    if not callable(fn):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise RuntimeError(f"{path} has no function '{name}' (its functions: {', '.join(names) or 'none'})")
    return fn


def check_signature(fn, name, style, kwargs):
    sig = inspect.signature(fn)
    if style == "verl":
        try:
            sig.bind(**{**{a: None for a in VERL_ARGS}, **kwargs})
        except TypeError as e:
            more = f" and reward.function.kwargs {', '.join(kwargs)}" if kwargs else ""
            raise RuntimeError(f"{name}{sig} cannot be called as verl calls compute_score "
                               f"({', '.join(a + '=' for a in VERL_ARGS)}{more}): {e}")
    else:  # what TRL 1.16 passes every function (the columns come beside them, by name)
        try:
            sig.bind_partial(**{**{a: None for a in TRL_ARGS}, **kwargs})
        except TypeError as e:
            more = f", reward.function.kwargs {', '.join(kwargs)}" if kwargs else ""
            raise RuntimeError(f"{name}{sig} cannot be called as TRL calls a reward function "
                               f"({', '.join(a + '=' for a in TRL_ARGS)}{more}, **columns): {e}")
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY,) and p.default is p.empty:
                raise RuntimeError(f"{name}{sig}: positional-only parameter '{p.name}' (TRL passes keywords)")


FLOAT32_MAX = 3.4028234663852886e38  # the trainer keeps rewards in float32: a larger score would be inf


def text(value, limit=200):
    """repr(value), cut to `limit`, for any value: a repr that raises or holds a lone surrogate included."""
    try:
        s = repr(value)
    except BaseException as e:  # its repr raising is its own failure, not the batch's
        s = f"<a {type(value).__name__} whose repr raised {type(e).__name__}>"
    return clean(s[:limit])


def clean(s):
    """`s` as text JSON and UTF-8 can carry (a lone surrogate becomes its backslash escape)."""
    return str(s).encode("utf-8", "backslashreplace").decode("utf-8")


def number(value):
    """The value as a finite float32-range float, or an error text. Never raises."""
    try:
        if isinstance(value, bool):
            return float(value), None
        if isinstance(value, numbers.Real):
            try:
                x = float(value)
            except OverflowError:
                return None, f"returned {text(value, 40)}, outside float32's range (|score| <= 3.4e38)"
            if not math.isfinite(x):
                return None, f"returned {x}"
            if abs(x) > FLOAT32_MAX:
                return None, f"returned {x!r}, outside float32's range (|score| <= 3.4e38)"
            return x, None
        if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
            try:
                return number(value.item())
            except Exception:
                pass
        if value is None:
            return None, "returned None"
        return None, f"returned {clean(type(value).__name__)}: {text(value)}"
    except BaseException as e:  # a value whose type checks or conversions raise
        return None, f"returned a value that cannot be read as a number ({clean(type(e).__name__)})"


def verl_result(value):
    extra, columns = {}, {}
    if isinstance(value, dict):
        if "score" not in value:
            return {"error": f"returned a dict without 'score' (keys: {', '.join(text(k, 40) for k in value) or 'none'})"}
        for k, v in value.items():
            if k != "score":
                x, err = number(v)
                if err is None:
                    extra[clean(k)] = x
                else:
                    columns[clean(k)] = column_value(v)
        value = value["score"]
    x, err = number(value)
    if err is not None:
        return {"error": err}
    return {"score": x, "extra": extra, "columns": columns}


def column_value(v):
    """A logged value as JSON carries it: None, a bool or a string as it is, a number as a float, else its repr."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, str):
        return clean(v)
    x, err = number(v)
    return x if err is None else text(v, 400)


class TrainerState(types.SimpleNamespace):
    """The fields of transformers' TrainerState a reward function reads (TRL passes self.state)."""


class BatchLog:
    """log_extra and log_metric of one call, as TRL's GRPOTrainer collects them."""

    def __init__(self, n):
        self.n, self.columns, self.metrics = n, {}, {}

    def log_extra(self, column, values):
        values = list(values)
        if len(values) != self.n:
            raise ValueError(f"log_extra('{column}', ...): {len(values)} values for {self.n} completions")
        self.columns.setdefault(str(column), []).extend(column_value(v) for v in values)

    def log_metric(self, name, value):
        x, err = number(value)
        if err is not None:
            raise ValueError(f"log_metric('{name}', ...) {err}, not a number")
        self.metrics.setdefault(str(name), []).append(x)


def awaited(value):
    """`value`, or what it gives when awaited (an async function's coroutine)."""
    return asyncio.run(value) if inspect.isawaitable(value) else value


def score_verl(fn, items, kwargs):
    results = []
    for item in items:
        try:
            value = awaited(fn(**{**{a: item.get(a) for a in VERL_ARGS}, **kwargs}))
            results.append(verl_result(value))
        except BaseException:  # sys.exit() or KeyboardInterrupt in the function: this item's error
            results.append({"error": short_traceback()})
    return {"results": results}


def score_trl(fn, items, var_kw, params, state, extra_kwargs):
    log = BatchLog(len(items))
    kwargs = {}
    columns = sorted({k for it in items for k in it.get("columns", {})})
    for c in columns:  # the dataset's columns, then what TRL passes by name (which wins, as in TRL)
        kwargs[c] = [it.get("columns", {}).get(c) for it in items]
    kwargs.update(prompts=[it.get("prompt") for it in items], completions=[it.get("completion") for it in items],
                  completion_ids=[it.get("completion_ids", []) for it in items],
                  trainer_state=TrainerState(**{"log_history": [], **state}),
                  log_extra=log.log_extra, log_metric=log.log_metric)
    kwargs.update(extra_kwargs)
    if not var_kw:  # the columns it does not declare are left out (TRL would fail on them)
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    try:
        values = awaited(fn(**kwargs))
        if not isinstance(values, (list, tuple)) and hasattr(values, "tolist"):
            values = values.tolist()
    except BaseException:  # sys.exit() or KeyboardInterrupt in the function: this batch's error
        return {"error": short_traceback()}
    if not isinstance(values, (list, tuple)):
        return {"error": f"returned {clean(type(values).__name__)}, not a list of {len(items)} numbers"}
    if len(values) != len(items):
        return {"error": f"returned {len(values)} values for {len(items)} completions"}
    results = []
    for v in values:
        if v is None:  # TRL: not applicable to this completion, left out of this function's term
            results.append({"none": True})
            continue
        x, err = number(v)
        results.append({"error": err} if err is not None else {"score": x, "extra": {}})
    for i, r in enumerate(results):  # log_extra: each completion's values, numbers as extras
        for column, logged in log.columns.items():
            if i < len(logged):
                target = "extra" if isinstance(logged[i], float) and "extra" in r else "columns"
                r.setdefault(target, {})[column] = logged[i]
    if results and log.metrics:  # log_metric: the call's values, once (on its first completion)
        results[0]["metrics"] = log.metrics
    return {"results": results}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--style", choices=["verl", "trl"], required=True)
    ap.add_argument("--pythonpath", action="append", default=[])
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--factory-kwargs", default=None)
    a = ap.parse_args()
    kwargs = json.loads(a.kwargs)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the function's prints go to stderr
    sys.stdout = sys.stderr

    def send(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        fn = load(a.path, a.name, a.pythonpath)
        if a.factory_kwargs is not None:
            try:
                fn = fn(**json.loads(a.factory_kwargs))
            except Exception:
                raise RuntimeError(f"calling the factory {a.name}(**reward.function.factory_kwargs) failed:\n{short_traceback()}")
            if not callable(fn):
                raise RuntimeError(f"the factory {a.name} returned {text(fn)}, not a function")
        check_signature(fn, a.name, a.style, kwargs)
    except Exception as e:
        send({"fatal": str(e)})
        return 2
    sig = inspect.signature(fn)
    var_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    params = set(sig.parameters)
    send({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        items = request.get("items", [])
        if a.style == "verl":
            answer = score_verl(fn, items, kwargs)
        else:
            answer = score_trl(fn, items, var_kw, params, request.get("state", {}), kwargs)
        answer["id"] = request.get("id")
        send(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
