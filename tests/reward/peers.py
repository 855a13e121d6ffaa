#!/usr/bin/env python3
"""ctest reward.peers: peers' reward code, unchanged, scores through Unstuck as the peer scores it.

For each reward function below, the same records are scored twice: by `unstuck reward score --config`
(the function on Unstuck's reward workers, called as the config's style says) and by the function
called here the way its own trainer calls it (TRL 1.16's GRPOTrainer._calculate_rewards; verl's
reward managers). Every score must be equal to the bit, and log_extra / log_metric / dict extras must
come back as the peer logs them. Then short GRPO runs use some of them (TRL's completion_ids, async,
log_metric; verl's default_compute_score through pkg:// on verl-layout records) and check what the
run logged against what the functions define.

  - TRL's shipped rewards (trl.rewards, a module: accuracy_reward, reasoning_accuracy_reward,
    think_format_reward, and the factories get_cosine_scaled_reward, get_repetition_penalty_reward,
    get_soft_overlong_punishment with reward.function.factory_kwargs);
  - the custom-reward examples of TRL's GRPO guide, byte for byte (peers/trl_guide/, see its README);
  - verl's default_compute_score as pkg://verl.utils.reward_score on gsm8k, MATH and DAPO records,
    and verl's example reward file gsm8k_toolcall_shaping.py with reward_kwargs (peers/verl/).

Usage: peers.py --unstuck BUILD/unstuck --python PYTHON --out DIR. Exit 77 (skipped) when PYTHON lacks
trl 1.16, math-verify or verl (scripts/setup.sh installs them from requirements-peers.txt).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(HERE, "peers")

FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# ---- records ------------------------------------------------------------------------------------

MATH = [  # (problem, solution column as the dataset has it, completion text)
    ("What is 1/2 + 1/4?", "$\\frac{3}{4}$", "<think>\nAdd the fractions.\n</think>\nThe answer is $\\boxed{\\frac{3}{4}}$."),
    ("What is 2+2?", "$4$", "<think>\ntwo and two\n</think>\n\\boxed{5}"),
    ("Solve x+1=3.", "$2$", "x = 2, so \\boxed{2}"),
    ("What is 10% of 50?", "$5$", "<think>half of ten</think> the answer is 5 5 5 5 5 5"),
    ("Simplify sqrt(8).", "$2\\sqrt{2}$", "<think>\n8 = 4*2\n</think>\n$\\boxed{2\\sqrt{2}}$"),
    ("What is 0.5 as a fraction?", "$\\frac{1}{2}$", ""),
    ("Compute 3*4.", "$12$", "the the the the the the the the 12"),
    ("Give pi to two places.", "$3.14$", "<think>\n\n</think>\n\\boxed{3.14}"),
    ("What is 7-7?", "$0$", "<think>seven minus seven</think><answer>\\boxed{0}</answer>"),
]


def math_rows(conversational):
    rows = []
    for k, (problem, solution, completion) in enumerate(MATH):
        prompt = [{"role": "user", "content": problem}] if conversational else problem
        # Lengths 6..54, so the length-based rewards see every regime; every other one repeats its n-grams.
        ids = list(range(1, 1 + 6 * (k + 1))) if k % 2 == 0 else [1, 2, 3] * (2 * (k + 1))
        rows.append({"prompt": prompt, "solution": solution, "ground_truth": solution.strip("$"), "task": "math",
                     "completion": [{"role": "assistant", "content": completion}] if conversational else completion,
                     "completion_ids": ids})
    return rows


def verl_rows():
    rows = []
    cases = [
        ("openai/gsm8k", "72", "Natalia sold 48 + 24 = 72 clips.\n#### 72"),
        ("openai/gsm8k", "72", "She sold 70 clips.\n#### 70"),
        ("openai/gsm8k", "1,000", "#### 1000"),
        ("lighteval/MATH", "\\frac{1}{2}", "So the answer is $\\boxed{\\frac{1}{2}}$."),
        ("lighteval/MATH", "\\frac{1}{2}", "So the answer is $\\boxed{0.5}$."),
        ("HuggingFaceH4/MATH-500", "3", "\\boxed{3}"),
        ("math_dapo", "34", "Thinking... Answer: 34"),
        ("math_dapo", "34", "Answer: 35"),
        ("aime2024", "204", "the result is\nAnswer: 204"),
    ]
    for k, (source, truth, solution) in enumerate(cases):
        rows.append({"data_source": source, "prompt": [{"role": "user", "content": f"problem {k}"}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": truth},
                     "extra_info": {"split": "train", "index": k}, "completion": solution})
    return rows


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---- the peers' own calls (run in PYTHON, the interpreter with the peers' packages) ---------------

TRL_REFERENCE = textwrap.dedent("""
    import asyncio, importlib, importlib.util, inspect, json, sys
    from transformers import TrainerState
    spec = json.loads(sys.argv[1])
    rows = [json.loads(line) for line in open(spec["input"]) if line.strip()]
    if spec["path"].endswith(".py"):
        s = importlib.util.spec_from_file_location("guide", spec["path"])
        module = importlib.util.module_from_spec(s)
        s.loader.exec_module(module)
    else:
        module = importlib.import_module(spec["path"])
    fn = getattr(module, spec["name"])
    if spec.get("factory_kwargs") is not None:
        fn = fn(**spec["factory_kwargs"])
    # As GRPOTrainer._calculate_rewards: every column but prompt/completion/completion_ids, trainer_state,
    # log_extra, log_metric, then prompts=, completions=, completion_ids=.
    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs = {k: [r[k] for r in rows] for k in keys}
    extra, metrics = {}, {}
    kwargs["trainer_state"] = TrainerState()
    kwargs["log_extra"] = lambda column, values: extra.setdefault(column, []).extend(values)
    kwargs["log_metric"] = lambda name, value: metrics.setdefault(name, []).append(value)
    out = fn(prompts=[r["prompt"] for r in rows], completions=[r["completion"] for r in rows],
             completion_ids=[r["completion_ids"] for r in rows], **kwargs)
    if inspect.isawaitable(out):
        out = asyncio.run(out)
    print(json.dumps({"rewards": list(out), "extra": extra, "metrics": metrics}))
""")

VERL_REFERENCE = textwrap.dedent("""
    import importlib, importlib.util, json, sys
    spec = json.loads(sys.argv[1])
    rows = [json.loads(line) for line in open(spec["input"]) if line.strip()]
    if spec["path"].startswith("pkg://"):
        module = importlib.import_module(spec["path"][len("pkg://"):])
    else:
        s = importlib.util.spec_from_file_location("example", spec["path"])
        module = importlib.util.module_from_spec(s)
        s.loader.exec_module(module)
    fn = getattr(module, spec["name"])
    out = []
    for r in rows:  # as verl's naive reward manager: keywords, reward_kwargs merged over them
        result = fn(data_source=r["data_source"], solution_str=r["completion"],
                    ground_truth=r["reward_model"]["ground_truth"], extra_info=r.get("extra_info", {}),
                    **spec.get("kwargs", {}))
        out.append(result if isinstance(result, dict) else {"score": result})
    print(json.dumps(out))
""")


def reference(py, script, spec):
    r = run([py, "-c", script, json.dumps(spec)])
    if r.returncode != 0:
        raise SystemExit(f"the peer's own call failed for {spec['name']}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def unstuck_score(args, name, rows, function, data):
    folder = os.path.join(args.out, name)
    os.makedirs(folder, exist_ok=True)
    write_jsonl(os.path.join(folder, "in.jsonl"), rows)
    config = {"data": data, "reward": {"function": {"workers": 1, "batch_size": 64, "python": args.python, **function}}}
    with open(os.path.join(folder, "config.yaml"), "w") as f:
        json.dump(config, f)  # JSON is YAML
    r = run([args.unstuck, "reward", "score", "--config", os.path.join(folder, "config.yaml"),
             "--input", os.path.join(folder, "in.jsonl"), "--output", os.path.join(folder, "out.jsonl")])
    if r.returncode != 0:
        check(False, f"{name}: unstuck reward score failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
        return None
    return read_jsonl(os.path.join(folder, "out.jsonl"))


def same(a, b):
    return (a is None and b is None) or (a is not None and b is not None and float(a) == float(b)) or \
        (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


# ---- TRL ------------------------------------------------------------------------------------------

def trl_cases(args):
    guide = os.path.join(PEERS, "trl_guide")
    cases = [  # (name, path, function, factory_kwargs, conversational)
        ("trl.accuracy_reward", "trl.rewards", "accuracy_reward", None, True),
        ("trl.reasoning_accuracy_reward", "trl.rewards", "reasoning_accuracy_reward", None, True),
        ("trl.think_format_reward", "trl.rewards", "think_format_reward", None, True),
        ("trl.cosine_scaled", "trl.rewards", "get_cosine_scaled_reward", {"max_len": 40}, True),
        ("trl.repetition_penalty", "trl.rewards", "get_repetition_penalty_reward", {"ngram_size": 2, "max_penalty": -1.0}, True),
        ("trl.soft_overlong", "trl.rewards", "get_soft_overlong_punishment", {"max_completion_len": 40, "soft_punish_cache": 20}, True),
        ("guide.ex1_completion_ids", os.path.join(guide, "ex1_completion_ids_length.py"), "reward_func", None, False),
        ("guide.ex1_1_characters", os.path.join(guide, "ex1_1_character_length.py"), "reward_func", None, False),
        ("guide.ex2_format", os.path.join(guide, "ex2_format.py"), "format_reward_func", None, True),
        ("guide.ex3_reference", os.path.join(guide, "ex3_reference.py"), "reward_func", None, False),
        ("guide.ex5_async", os.path.join(guide, "ex5_async.py"), "async_reward_func", None, False),
        ("guide.ex6_logging", os.path.join(guide, "ex6_logging.py"), "reward_func", None, False),
    ]
    for name, path, fn, factory_kwargs, conversational in cases:
        rows = math_rows(conversational)
        function = {"path": path, "name": fn, "style": "trl"}
        if factory_kwargs is not None:
            function.update(factory=True, factory_kwargs=factory_kwargs)
        out = unstuck_score(args, name, rows, function, {"task": "math", "answer_key": "solution"})
        if out is None:
            continue
        spec = {"input": os.path.join(args.out, name, "in.jsonl"), "path": path, "name": fn, "factory_kwargs": factory_kwargs}
        ref = reference(args.python, TRL_REFERENCE, spec)
        ours = [o["reward"] for o in out]
        check(all(same(a, b) for a, b in zip(ours, ref["rewards"])) and len(ours) == len(ref["rewards"]),
              f"{name}: {len(ours)} scores equal TRL's call: ours {ours} vs {ref['rewards']}")
        for column, values in ref["extra"].items():  # log_extra: per completion
            got = [o.get("reward_columns", {}).get(column, o.get("reward_extra", {}).get(column)) for o in out]
            check(got == values, f"{name}: log_extra '{column}' per completion: {got} vs {values}")
        for metric, values in ref["metrics"].items():  # log_metric: per call (one call here)
            got = out[0].get("reward_metrics", {}).get(metric)
            check(got == values, f"{name}: log_metric '{metric}': {got} vs {values}")


# ---- verl -----------------------------------------------------------------------------------------

def verl_cases(args):
    rows = verl_rows()
    verl_data = {"task": "math", "answer_key": "reward_model.ground_truth"}
    cases = [  # (name, path, function, reward_kwargs)
        ("verl.default_compute_score", "pkg://verl.utils.reward_score", "default_compute_score", {}),
        ("verl.toolcall_shaping", os.path.join(PEERS, "verl", "gsm8k_toolcall_shaping.py"), "compute_score",
         {"method": "flexible", "format_score": 0.0, "shaping_reward": 0.25}),
        ("verl.docs_my_reward_fn", os.path.join(PEERS, "verl", "my_reward_fn.py"), "my_reward_fn", {}),
    ]
    for name, path, fn, kwargs in cases:
        case_rows = rows if name != "verl.toolcall_shaping" else [r for r in rows if r["data_source"] == "openai/gsm8k"]
        function = {"path": path, "name": fn, "style": "verl"}
        if kwargs:
            function["kwargs"] = kwargs
        out = unstuck_score(args, name, case_rows, function, verl_data)
        if out is None:
            continue
        ref = reference(args.python, VERL_REFERENCE,
                        {"input": os.path.join(args.out, name, "in.jsonl"), "path": path, "name": fn, "kwargs": kwargs})
        ours = [o["reward"] for o in out]
        theirs = [r["score"] for r in ref]
        check(ours == [float(x) for x in theirs], f"{name}: {len(ours)} scores equal verl's call: {ours} vs {theirs}")
        for o, r in zip(out, ref):  # a dict result's other keys: numbers as reward_extra, the rest as columns
            for key, value in r.items():
                if key == "score":
                    continue
                got = o.get("reward_extra", {}).get(key, o.get("reward_columns", {}).get(key))
                want = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
                want = float(want) if isinstance(want, bool) else want
                check(got == want, f"{name}: dict key '{key}' of {o['data_source']}: {got!r} vs {want!r}")
    # verl's records without a config: reward score reads them as they are (reward_model.ground_truth).
    folder = os.path.join(args.out, "verl.no_config")
    os.makedirs(folder, exist_ok=True)
    write_jsonl(os.path.join(folder, "in.jsonl"), rows)
    r = run([args.unstuck, "reward", "score", "--task", "math", "--input", os.path.join(folder, "in.jsonl"),
             "--output", os.path.join(folder, "out.jsonl")])
    check(r.returncode == 0, "verl records score with --task math and no config" +
          ("" if r.returncode == 0 else f": {r.stdout[-500:]}{r.stderr[-500:]}"))
    if r.returncode == 0:
        statuses = [o["status"] for o in read_jsonl(os.path.join(folder, "out.jsonl"))]
        check(statuses[0] == "correct" and statuses[1] == "wrong", f"verl records, built-in math verifier: {statuses}")
    r = run([args.unstuck, "reward", "score", "--input", os.path.join(folder, "in.jsonl")])
    check(r.returncode == 2 and "missing \"task\"" in r.stdout + r.stderr and "--task" in r.stdout + r.stderr,
          "verl records without a task or --task: an error naming both")


# ---- GRPO runs ------------------------------------------------------------------------------------

def grpo_runs(args):
    root = os.path.join(args.out, "runs")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    base = os.path.join(root, "base")
    r = run([args.unstuck, "sft", "--config", os.path.join(args.source, "configs/sft/arithmetic.yaml"),
             f"run.output_dir={root}", "run.name=sft", f"sft.output={base}", "model.dim=32", "model.n_layers=2",
             "model.n_heads=2", "model.n_kv_heads=2", "model.ffn_dim=64", "sft.steps=2", "sft.batch_size=4",
             "sft.warmup_steps=1", "sft.eval_every=0", "sft.eval_samples=4", "precision.threads=1"], cwd=args.source)
    if r.returncode != 0:
        check(False, f"tiny SFT base: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        return
    plain = os.path.join(root, "plain.jsonl")
    write_jsonl(plain, [{"prompt": f"{i}+2=", "ground_truth": str(i + 2), "task": "math"} for i in range(8)])
    verl = os.path.join(root, "verl.jsonl")
    write_jsonl(verl, [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{i}+2="}],
                        "reward_model": {"ground_truth": str(i + 2)}, "extra_info": {"index": i}} for i in range(8)])
    template = os.path.join(root, "chat.jinja")
    with open(template, "w") as f:
        f.write("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    guide = os.path.join(PEERS, "trl_guide")

    def train(name, data, function, steps=2):
        config = {"run": {"name": name, "output_dir": root, "seed": 1},
                  "data": {"task": "math", "train_path": data, "test_path": data, **({"chat_template": template,
                           "answer_key": "reward_model.ground_truth"} if data == verl else {"answer_key": "ground_truth"})},
                  "precision": {"mode": "fp32", "threads": 1}, "rollout": {"max_new_tokens": 8},
                  "grpo": {"base_model": base, "steps": steps, "prompts_per_step": 2, "group_size": 4, "eval_every": 0},
                  "reward": {"function": {"workers": 1, "python": args.python, **function}}}
        path = os.path.join(root, name + ".yaml")
        with open(path, "w") as f:
            json.dump(config, f)
        r = run([args.unstuck, "train", "--config", path], cwd=args.source)
        if r.returncode != 0:
            check(False, f"GRPO run {name}: {r.stdout[-1500:]}{r.stderr[-1500:]}")
            return None, r
        return read_jsonl(os.path.join(root, name, "metrics.jsonl")), r

    m, _ = train("ex1_completion_ids", plain, {"path": os.path.join(guide, "ex1_completion_ids_length.py"),
                                               "name": "reward_func", "style": "trl"})
    if m:  # reward = len(completion_ids): its mean is the mean response length the run measured itself
        check(all(abs(s["reward_mean"] - s["response_len_mean"]) < 1e-9 and s["reward_error_frac"] == 0 for s in m),
              f"GRPO with TRL's guide example 1: reward_mean == response_len_mean each step "
              f"({[(s['reward_mean'], s['response_len_mean']) for s in m]})")
    m, _ = train("ex5_async", plain, {"path": os.path.join(guide, "ex5_async.py"), "name": "async_reward_func", "style": "trl"})
    if m:
        check(all(s["reward_error_frac"] == 0 for s in m), "GRPO with TRL's async example: no reward errors")
    m, _ = train("ex6_logging", plain, {"path": os.path.join(guide, "ex6_logging.py"), "name": "reward_func", "style": "trl"})
    if m:
        check(all("reward_metric/accuracy" in s and s["reward_metric/accuracy"] == s["reward_mean"] for s in m),
              "GRPO with TRL's logging example: log_metric('accuracy') logged as reward_metric/accuracy, equal to reward_mean "
              f"({[(s.get('reward_metric/accuracy'), s['reward_mean']) for s in m]})")
    m, _ = train("verl_default", verl, {"path": "pkg://verl.utils.reward_score", "name": "default_compute_score",
                                        "style": "verl"})
    if m:
        check(all(s["reward_error_frac"] == 0 and "reward_extra/acc" not in s for s in m),
              "GRPO with verl's default_compute_score via pkg:// on verl records: no reward errors")
    # None: not applicable. A function that scores only even-indexed prompts.
    none_file = os.path.join(root, "none_reward.py")
    with open(none_file, "w") as f:
        f.write("def only_even(prompts, completions, ground_truth, **kwargs):\n"
                "    return [None if int(g) % 2 else float(len(c)) for c, g in zip(completions, ground_truth)]\n")
    m, r = train("none", plain, {"path": none_file, "name": "only_even", "style": "trl"}, steps=4)
    if m:
        fracs = [s.get("not_applicable_frac", 0.0) for s in m]
        check(all(f in (0.0, 0.5, 1.0) for f in fracs) and any(f > 0 for f in fracs) and
              all(math.isfinite(s["reward_mean"]) and s["reward_error_frac"] == 0 for s in m),
              f"GRPO with a function returning None: not_applicable_frac {fracs}, reward_mean finite, no errors")
        check("returned None for" in r.stdout + r.stderr, "the run warns, naming None, when every function returned None")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unstuck", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(HERE)))
    args = ap.parse_args()
    args.unstuck, args.out = os.path.abspath(args.unstuck), os.path.abspath(args.out)
    probe = run([args.python, "-c", "import trl, math_verify, verl.utils.reward_score; print(trl.__version__)"])
    if probe.returncode != 0:
        print(f"skipped: {args.python} lacks trl, math-verify or verl (scripts/setup.sh installs them):\n"
              f"{probe.stderr[-800:]}")
        return 77
    if not probe.stdout.strip().startswith("1.16"):
        print(f"note: TRL {probe.stdout.strip()} (the contract follows 1.16)")
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    trl_cases(args)
    verl_cases(args)
    grpo_runs(args)
    print(f"\n{len(FAILURES)} failure(s)" if FAILURES else "\nall peers' reward code scored as the peers score it")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
