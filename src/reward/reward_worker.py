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
  --style tools: the functions of --tools [{"path":, "name":}, ...] as the policy's tools, called as TRL
                1.16's GRPOTrainer calls them: name(**arguments); an item {"name":, "arguments":} answers
                {"value": {"content": str(result), "failed": false, "seconds": s}}, a call that raises answers
                {"value": {"content": str({"error": str(e)}), "failed": true, "seconds": s}} (what TRL shows the model);
                an item {"schemas": true} answers {"value": "[schema, ...]"} (JSON text, so the keys keep
                their order through the trainer's JSON reader), each tool's JSON schema derived
                from its type hints and Google-style docstring by the rules of transformers'
                get_json_schema (a tool whose schema cannot be derived stops the worker at its start);
                --builtin-python adds the schema of the built-in python(code) tool (run by the trainer);
                --environment {"path":, "name":} is TRL 1.16's environment_factory: one instance per
                rollout slot (the trainer's row), reused across steps as TRL's pool is; its public methods
                are tools (schemas after --tools'), called on the item's "slot" instance; {"reset": slot,
                "kwargs": {...}} calls reset(**kwargs) and answers {"value": {"observation": str or
                null}}; {"reward": slot} calls get_reward() and answers a score; {"environment": true}
                answers {"value": {"class": name, "get_reward": bool}}; a request whose state is
                {"score": {path, name, pythonpath, kwargs, factory_kwargs}, "trainer_state": {...}} calls that
                TRL reward function once on its items (TRL items, each with its row's "slot") with
                environments=[each item's instance], answering as --style trl does
  An item {"describe": true} of a --style trl worker answers {"value": {"environments": bool}}: whether
  the function takes environments (TRL's environment_factory instances; the tool workers call it then).
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
import time
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


LOADED = {}  # file path -> its module, so a file loaded twice (an environment and its reward function) is one module


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
        elif path in LOADED:
            module = LOADED[path]
        else:
            spec = importlib.util.spec_from_file_location("unstuck_user_reward", path)
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, os.path.dirname(path))
            spec.loader.exec_module(module)
            LOADED[path] = module
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


def reward_function(path, name, style, pythonpath, kwargs, factory_kwargs):
    """(the function, whether it takes **kwargs, its parameters' names): loaded, made by its factory
    when factory_kwargs is not None, its signature checked for `style`."""
    fn = load(path, name, pythonpath)
    if factory_kwargs is not None:
        try:
            fn = fn(**factory_kwargs)
        except Exception:
            raise RuntimeError(f"calling the factory {name}(**reward.function.factory_kwargs) failed:\n{short_traceback()}")
        if not callable(fn):
            raise RuntimeError(f"the factory {name} returned {text(fn)}, not a function")
    check_signature(fn, name, style, kwargs)
    sig = inspect.signature(fn)
    return fn, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()), set(sig.parameters)


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


# Tools (--style tools). The schema rules are transformers' get_json_schema's, so a tool renders into
# the chat template's tools branch as it does under TRL: a docstring is required, its text before
# Args:/Returns:/Raises: is the description, each parameter needs a type hint and a line in Args:
# ("name: text" or "name (type): text", continued on deeper-indented lines), a trailing
# "(choices: [json list])" becomes an enum, and the return hint (when it converts) and Returns: text
# give "return".
SCALAR_JSON = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
BARE_JSON = {**SCALAR_JSON, list: "array", tuple: "array", dict: "object"}
DOC_DESCRIPTION = re.compile(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", re.DOTALL)
DOC_ARGS = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
DOC_RETURNS = re.compile(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(Raises:|\Z)", re.DOTALL)
DOC_ARG = re.compile(r"(?:^|\n)([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:\s*(.*?)\s*"
                     r"(?=\n(?!\1[ \t])[ \t]*\w+(?:[ \t]*\([^()\n]*\))?:|\Z)", re.DOTALL)


class SchemaError(Exception):
    pass


def enum_schema(values):
    kinds = list(dict.fromkeys(SCALAR_JSON[type(v)] for v in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def hint_schema(hint):
    import enum
    import typing
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None and isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        if not values or any(type(v) not in SCALAR_JSON for v in values):
            raise SchemaError(f"the Enum {hint.__name__} needs members whose values are int, float, str, bool or None")
        return enum_schema(values)
    if origin is None:
        if hint is typing.Any:
            return {}
        if hint in BARE_JSON:
            return {"type": BARE_JSON[hint]}
        raise SchemaError(f"the type hint {hint!r} has no JSON schema (int, float, str, bool, Enum, Literal, "
                          "and list, tuple, dict and unions of them have)")
    if origin is typing.Union or origin is types.UnionType:
        parts = [hint_schema(t) for t in args if t is not type(None)]
        if len(parts) == 1:
            out = parts[0]
        elif all(p.keys() == {"type"} and isinstance(p["type"], str) for p in parts):
            names = sorted({p["type"] for p in parts})
            out = {"type": names[0] if len(names) == 1 else names}
        else:
            out = {"anyOf": parts}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is typing.Literal and args:
        if any(type(a) not in SCALAR_JSON for a in args):
            raise SchemaError("a Literal may list only int, float, str, bool and None values")
        return enum_schema(list(args))
    if origin is list:
        return {"type": "array", "items": hint_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise SchemaError(f"the type hint {hint} (a one-element or open tuple) has no JSON schema; use list[...]")
        return {"type": "array", "prefixItems": [hint_schema(t) for t in args]}
    if origin is dict:
        return {"type": "object", "additionalProperties": hint_schema(args[1])} if len(args) == 2 else {"type": "object"}
    raise SchemaError(f"the type hint {hint!r} has no JSON schema")


def tool_schema(fn):
    """{"type": "function", "function": {name, description, parameters[, return]}} of `fn`."""
    import typing
    name = getattr(fn, "__name__", "operation")
    doc = inspect.getdoc(fn)
    if not doc:
        raise SchemaError(f"{name} has no docstring (its description and each argument's come from it)")
    doc = doc.strip()
    found = DOC_DESCRIPTION.search(doc)
    description = found.group(1).strip() if found else None
    found = DOC_RETURNS.search(doc)
    returns = found.group(1).strip() if found else None
    found = DOC_ARGS.search(doc)
    described = {}
    if found:
        block = "\n".join(line for line in found.group(1).split("\n") if line.strip())
        described = {m[1]: re.sub(r"\s*\n+\s*", " ", m[2].strip()) for m in DOC_ARG.findall(block)}
    sig = inspect.signature(fn)
    first = next(iter(sig.parameters), None)
    receiver = first if first in ("self", "cls") and sig.parameters[first].annotation is inspect.Parameter.empty else None
    required = []
    for p in sig.parameters.values():
        if p.name == receiver:
            continue
        if p.annotation is inspect.Parameter.empty:
            raise SchemaError(f"{name}: argument '{p.name}' has no type hint")
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    properties, result = {}, None
    for arg, hint in typing.get_type_hints(fn).items():
        if arg == receiver:
            continue
        if arg == "return":
            try:
                result = hint_schema(hint)
            except SchemaError:  # the model never writes the return value: left out, not refused
                pass
            continue
        properties[arg] = hint_schema(hint)
    for arg, schema in properties.items():
        if arg not in described:
            raise SchemaError(f"{name}: the docstring's Args: has no description of '{arg}'")
        text_ = described[arg]
        choices = re.search(r"\(choices:\s*(.*?)\)\s*$", text_, flags=re.IGNORECASE)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text_ = text_[: choices.start()].strip()
        schema["description"] = text_
    parameters = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    out = {"name": name, "description": description, "parameters": parameters}
    if result is not None:
        if returns is not None:
            result["description"] = returns
        out["return"] = result
    return {"type": "function", "function": out}


def python(code: str) -> str:
    """Runs a Python program in a sandbox and returns what it prints.

    Args:
        code: The program. What it prints is the result; if it raises, the error's last line is returned.
    """
    raise RuntimeError("the python tool runs in the trainer's code sandbox, not in the worker")


def load_tools(specs, pythonpath):
    """{name: function} of --tools, each with its schema derived (RuntimeError naming the tool when not)."""
    tools, schemas = {}, []
    for spec in specs:
        fn = load(spec["path"], spec["name"], pythonpath)
        try:
            schema = tool_schema(fn)
        except SchemaError as e:
            raise RuntimeError(f"tool {spec['path']}:{spec['name']}: no JSON schema: {e}")
        except Exception:
            raise RuntimeError(f"tool {spec['path']}:{spec['name']}: deriving its JSON schema failed:\n{short_traceback()}")
        if spec["name"] in tools:
            raise RuntimeError(f"two tools are named '{spec['name']}'")
        tools[spec["name"]] = fn
        schemas.append(schema)
    return tools, schemas


class Environments:
    """TRL's environment_factory: one instance per slot (a row of the trainer's batch), reused across
    steps as TRL's pool reuses them; public methods are tools, reset(**row) starts a rollout,
    get_reward() scores it."""

    def __init__(self, spec, pythonpath, tool_names):
        where = f"tools.environment {spec['path']}:{spec['name']}"
        self.factory = load(spec["path"], spec["name"], pythonpath)
        try:
            probe = self.factory()
        except Exception:
            raise RuntimeError(f"{where}: creating an instance failed:\n{short_traceback()}")
        members = dict(inspect.getmembers(type(probe), predicate=inspect.isfunction))  # on the class, as TRL lists them
        self.class_name = type(probe).__name__
        if "reset" not in members:
            raise RuntimeError(f"{where}: {self.class_name} has no reset method (TRL's environments must define one)")
        self.has_reward = "get_reward" in members
        self.methods = [n for n in members if n not in ("reset", "get_reward") and not n.startswith("_")]
        self.schemas = []
        for n in self.methods:
            if n in tool_names:
                raise RuntimeError(f"{where}: its method {n} has the name of a tool in tools.functions")
            try:
                self.schemas.append(tool_schema(getattr(probe, n)))
            except SchemaError as e:
                raise RuntimeError(f"{where}: method {n}: no JSON schema: {e}")
            except Exception:
                raise RuntimeError(f"{where}: method {n}: deriving its JSON schema failed:\n{short_traceback()}")
        self.spare, self.slots, self.rewards = [probe], {}, {}

    def reset(self, item):
        slot = item["reset"]
        try:
            if slot not in self.slots:
                self.slots[slot] = self.spare.pop() if self.spare else self.factory()
            observation = awaited(self.slots[slot].reset(**item.get("kwargs", {})))
        except BaseException:
            self.slots.pop(slot, None)
            return {"error": short_traceback()}
        if observation is not None and not isinstance(observation, str):
            return {"error": f"reset returned {clean(type(observation).__name__)}, not a string or None"}
        return {"value": {"observation": observation if observation is None else clean(observation)}}

    def reward(self, item):
        instance = self.slots.get(item["reward"])
        if instance is None:
            return {"error": "this rollout's environment instance is gone (its tool worker restarted)"}
        try:
            value = awaited(instance.get_reward())
        except BaseException:
            return {"error": short_traceback()}
        x, err = number(value)
        return {"error": err} if err is not None else {"score": x, "extra": {}}

    def score(self, state, items, pythonpath):
        """A TRL reward function that reads the instances (environments=), called once on this worker's
        rows: state["score"] names it ({path, name, pythonpath, kwargs, factory_kwargs}), each item is a
        row's TRL item with its "slot"."""
        spec = state["score"]
        key = json.dumps(spec, sort_keys=True)
        try:
            if key not in self.rewards:
                self.rewards[key] = reward_function(spec["path"], spec["name"], "trl",
                                                    pythonpath + spec.get("pythonpath", []), spec.get("kwargs", {}),
                                                    spec.get("factory_kwargs"))
        except Exception as e:
            return {"error": str(e)}
        fn, var_kw, params = self.rewards[key]
        instances = [self.slots.get(it.get("slot")) for it in items]
        gone = [it.get("slot") for it, instance in zip(items, instances) if instance is None]
        if gone:
            return {"error": f"the environment instances of rows {gone} are gone (their tool worker restarted)"}
        return score_trl(fn, items, var_kw, params, state.get("trainer_state", {}),
                         {**spec.get("kwargs", {}), "environments": instances})

    def method(self, item):
        """The bound method the call names on its slot's instance, or None when it names no method."""
        if item.get("name") not in self.methods:
            return None
        instance = self.slots.get(item.get("slot"))
        if instance is None:
            raise RuntimeError("this rollout's environment instance is gone (its tool worker restarted)")
        return getattr(instance, item["name"])


def call_tool(tools, item, environments=None):
    """One tool call as TRL makes it: content str(result), or str({"error": str(e)}) when it raises;
    with the seconds the call took."""
    name, arguments = item.get("name"), item.get("arguments")
    start = time.perf_counter()
    try:
        fn = environments.method(item) if environments else None
        fn = fn or tools.get(name)
        if fn is None:
            raise ValueError(f"Tool {name} not found.")
        result = awaited(fn(**arguments))
        content, failed = str(result), False
    except Exception as e:
        content, failed = str({"error": str(e)}), True
    except BaseException as e:  # sys.exit() in a tool: a failed call, the worker lives on
        content, failed = str({"error": f"{type(e).__name__}: {e}"}), True
    return {"value": {"content": clean(content), "failed": failed, "seconds": time.perf_counter() - start}}


def serve_tools(a, send):
    try:
        tools, schemas = load_tools(json.loads(a.tools), a.pythonpath)
        environments = None
        if a.environment:  # TRL: the standalone tools, then the environment's methods
            environments = Environments(json.loads(a.environment), a.pythonpath, set(tools))
            schemas += environments.schemas
        if a.builtin_python:  # its schema only: the trainer runs it in the code sandbox
            schemas.append(tool_schema(python))
    except Exception as e:
        send({"fatal": str(e)})
        return 2
    send({"ready": True})

    def answer(it):
        if it.get("schemas"):
            return {"value": json.dumps(schemas)}
        if environments is not None and it.get("environment"):
            return {"value": {"class": environments.class_name, "get_reward": environments.has_reward}}
        if environments is not None and "reset" in it:
            return environments.reset(it)
        if environments is not None and "reward" in it:
            return environments.reward(it)
        return call_tool(tools, it, environments)

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        state = request.get("state") or {}
        if environments is not None and "score" in state:  # a reward function that reads the instances
            send({**environments.score(state, request.get("items", []), a.pythonpath), "id": request.get("id")})
            continue
        send({"id": request.get("id"), "results": [answer(it) for it in request.get("items", [])]})
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--path")
    ap.add_argument("--name")
    ap.add_argument("--style", choices=["verl", "trl", "tools"], required=True)
    ap.add_argument("--tools", default="[]")
    ap.add_argument("--environment", default="")
    ap.add_argument("--builtin-python", action="store_true")
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

    if a.style == "tools":
        return serve_tools(a, send)
    if a.path is None or a.name is None:
        send({"fatal": f"--style {a.style} needs --path and --name"})
        return 2
    try:
        fn, var_kw, params = reward_function(a.path, a.name, a.style, a.pythonpath, kwargs,
                                             None if a.factory_kwargs is None else json.loads(a.factory_kwargs))
    except Exception as e:
        send({"fatal": str(e)})
        return 2
    send({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        items = request.get("items", [])
        if items and items[0].get("describe"):  # whether it reads environments (then the tool workers call it)
            send({"id": request.get("id"), "results": [{"value": {"environments": "environments" in params}}]})
            continue
        if a.style == "verl":
            answer = score_verl(fn, items, kwargs)
        else:
            answer = score_trl(fn, items, var_kw, params, request.get("state", {}), kwargs)
        answer["id"] = request.get("id")
        send(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
