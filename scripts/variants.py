#!/usr/bin/env python3
"""One GRPO run per policy-gradient variant on the embedded default, and their table.

Runs `unstuck train --config configs/grpo/countdown.yaml` (the embedded countdown policy, BF16-SR,
32 prompts x 8 completions, lr 1e-4, 50 steps) once per variant of docs/GRPO.md ("Policy-gradient
variants"), each the default config plus the variant's overrides, the same seed for all, one run at
a time. Trains the base policy first when it is missing (configs/sft/countdown.yaml). Writes the
table (reward, accuracy, KL to the reference, length, the variant's own metrics, wall time) to
--results (default docs/RESULTS-variants.md). Finished runs are reused; an unfinished one is run
again from the start.

    .venv/bin/python scripts/variants.py                 # every variant, 50 steps
    .venv/bin/python scripts/variants.py --only rloo,tis --steps 20 --results /tmp/v.md --data /tmp/v.json
    .venv/bin/python scripts/variants.py --render docs/results/variants/variants.json   # the table from its data

--data (default docs/results/variants/variants.json) keeps what the table renders (each run's summary,
the machine, the commit), so the committed table can be rendered again without the runs.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, overrides, what it is): the default first, the rest against it.
VARIANTS = [
    ("grpo", [], "GRPO: (r - group mean) / group std, token clip 0.2 / 0.28, dual clip 3, token_mean"),
    ("mean_only", ["grpo.advantage=mean_only"], "Dr. GRPO's advantage (no std division)"),
    ("rloo", ["grpo.advantage=rloo"], "RLOO leave-one-out baseline"),
    ("reinforce_pp", ["grpo.advantage=reinforce_pp"], "REINFORCE++: batch mean and std"),
    ("grpo_passk", ["grpo.advantage=grpo_passk"], "pass@k: only the group's best, by its margin"),
    ("scale_batch", ["grpo.scale_rewards=batch"], "group mean, batch std (TRL's scale_rewards: batch)"),
    ("gspo", ["grpo.importance_ratio=sequence", "grpo.clip_low=3e-4", "grpo.clip_high=4e-4",
              "grpo.loss_aggregation=seq_mean_token_mean"], "GSPO: sequence ratio, clip 3e-4 / 4e-4"),
    ("no_dual_clip", ["grpo.clip_ratio_c=0"], "without the dual clip"),
    ("overlong_filter", ["grpo.overlong=filter"], "DAPO: truncated completions out of the loss"),
    ("soft_penalty", ["grpo.overlong=soft_penalty", "grpo.overlong_buffer=4"],
     "DAPO: soft overlong penalty over the last 4 tokens"),
    ("dynamic_sampling", ["grpo.filter_groups=zero_variance", "grpo.oversample=2"],
     "DAPO: flat groups dropped, up to 2 extra rounds"),
    ("kl_loss", ["grpo.kl_coef=0.01"], "k3 KL in the loss, coefficient 0.01"),
    ("kl_reward", ["grpo.kl_coef=0.01", "grpo.kl_in=reward"], "k3 KL in the reward, coefficient 0.01"),
    ("minibatches4", ["grpo.minibatches=4"], "4 optimizer steps per rollout batch"),
    ("minibatches4_tis", ["grpo.minibatches=4", "grpo.tis_cap=2"], "the same with truncated IS, cap 2"),
]


def say(msg):
    print(f"[variants] {msg}", flush=True)


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def yaml_value(config, section, key):
    """A scalar of a flat two-level YAML config (enough for the configs of configs/)."""
    current = None
    with open(config) as f:
        for line in f:
            text = line.split("#", 1)[0].rstrip()
            if not text:
                continue
            if not text.startswith(" ") and text.endswith(":"):
                current = text[:-1]
            elif current == section and text.strip().startswith(key + ":"):
                return text.split(":", 1)[1].strip()
    return None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summary(metrics, window):
    """The table's numbers from a run's metrics lines: the first and last `window` steps' means."""
    first, last = metrics[:window], metrics[-window:]
    col = lambda lines, key: mean([m.get(key) for m in lines])  # noqa: E731
    evals = [m["eval_accuracy"] for m in metrics if "eval_accuracy" in m]
    return {
        "reward_first": col(first, "reward_mean"), "reward_last": col(last, "reward_mean"),
        "accuracy_last": col(last, "accuracy"), "kl_last": col(last, "kl_ref_k3"),
        "len_last": col(last, "response_len_mean"), "clip_frac": col(metrics, "clip_frac"),
        "eval_last": evals[-1] if evals else None, "rounds": col(metrics, "sampling_rounds"),
        "filled": col(metrics, "groups_filled"), "sampled_last": col(last, "sampled_reward_mean"), "kl_penalty": col(metrics, "kl_reward_penalty"),
        "tis_weight": col(metrics, "tis_weight_mean"), "overlong": col(metrics, "overlong_frac"),
        "zero_adv": col(metrics, "zero_adv_frac"), "step_s": col(metrics, "step_seconds"),
    }


def fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def render(data):
    """The markdown table (docs/RESULTS-variants.md) of the data main() writes to --data."""
    w = data["window"]
    lines = [
        "# Policy-gradient variants on the embedded default",
        "",
        f"One {data['steps']}-step run per variant of `{data['config']}` (the embedded countdown policy, BF16 with "
        "stochastic rounding, 32 prompts x 8 completions, lr 1e-4, seed 1), each the config plus the "
        "variant's overrides, one run at a time. One seed each: the differences between rows are single "
        "runs, not measured effects. Written by",
        "",
        "```",
        f".venv/bin/python scripts/variants.py --steps {data['steps']}"
        + (f" --only {data['only']}" if data["only"] else ""),
        f".venv/bin/python scripts/variants.py --render {data['data']}   # this table again from its data",
        "```",
        "",
        f"on {data['cpu']} ({data['cores']} cores), commit {data['commit']}. Columns: the mean training "
        f"reward of the first and the last {w} steps, the last {w} steps' sampled accuracy, KL to the reference "
        f"(`kl_ref_k3`) and completion length, the final greedy test accuracy (`eval_accuracy`, "
        "200 records), the mean clip fraction, the variant's own metric where it has one (means over the run "
        "unless said), and the run's wall time (start-up and evaluations included). With dynamic sampling the "
        "batch's reward is that of the groups kept, biased upwards by the filter; the reward of every sampled "
        "completion is the one to compare.",
        "",
        f"| variant | overrides | reward first {w} | reward last {w} | accuracy last {w} | KL last {w} | "
        f"length last {w} | eval accuracy | clip frac | variant metric | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        name, overrides, s, seconds = row["name"], row["overrides"], row["summary"], row["seconds"]
        extra = "-"
        if s["rounds"] is not None:
            extra = (f"rounds {fmt(s['rounds'], 2)}, filled {fmt(s['filled'], 2)}, reward of every sampled "
                     f"completion last {w} {fmt(s['sampled_last'])}")
        elif s["kl_penalty"] is not None:
            extra = f"kl_reward_penalty {s['kl_penalty']:.2e}"
        elif s["tis_weight"] is not None:
            extra = f"tis_weight_mean {fmt(s['tis_weight'], 4)}"
        elif "overlong" in name or "penalty" in name:
            extra = f"overlong_frac {fmt(s['overlong'], 4)}"
        kl = "-" if s["kl_last"] is None else f"{s['kl_last']:.2e}"
        cells = [name, " ".join("`" + o + "`" for o in overrides) or "(default)", fmt(s["reward_first"]),
                 fmt(s["reward_last"]), fmt(s["accuracy_last"]), kl, fmt(s["len_last"], 2), fmt(s["eval_last"]),
                 fmt(s["clip_frac"], 4), extra, fmt(seconds, 0)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "What each variant is:", ""]
    lines += [f"- `{row['name']}`: {row['what']}." for row in data["rows"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/grpo/countdown.yaml", help="the GRPO config every variant starts from")
    ap.add_argument("--steps", type=int, default=50, help="GRPO steps per run (default 50)")
    ap.add_argument("--only", help="comma-separated variant names (default: all): " +
                    ", ".join(v[0] for v in VARIANTS))
    ap.add_argument("--out", default="runs/variants", help="folder of the runs (default runs/variants)")
    ap.add_argument("--results", default="docs/RESULTS-variants.md", help="markdown table to write")
    ap.add_argument("--unstuck", default="build/unstuck", help="the unstuck binary")
    ap.add_argument("--window", type=int, default=10, help="steps averaged at the start and the end (default 10)")
    ap.add_argument("--data", default="docs/results/variants/variants.json",
                    help="JSON of what the table renders (default docs/results/variants/variants.json)")
    ap.add_argument("--render", metavar="DATA", help="print the table of a saved --data file and exit")
    a = ap.parse_args(argv)
    if a.render:
        with open(a.render) as f:
            sys.stdout.write(render(json.load(f)))
        return 0
    os.chdir(ROOT)
    names = {v[0] for v in VARIANTS}
    chosen = VARIANTS
    if a.only:
        wanted = [n.strip() for n in a.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            ap.error(f"--only: unknown variant(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        chosen = [v for v in VARIANTS if v[0] in wanted]
    if a.steps < 1 or a.window < 1:
        ap.error("--steps and --window must be >= 1")
    if not os.access(a.unstuck, os.X_OK):
        ap.error(f"{a.unstuck} not found; build first (scripts/setup.sh)")
    base = yaml_value(a.config, "grpo", "base_model")
    if base and not os.path.exists(os.path.join(base, "sft_result.json")):
        say(f"training the base policy by SFT (configs/sft/countdown.yaml) -> {base}")
        subprocess.run([a.unstuck, "sft", "--config", "configs/sft/countdown.yaml"], check=True)
    rows = []
    for name, overrides, what in chosen:
        run_dir = os.path.join(a.out, name)
        metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
        seconds = None
        if len(metrics) != a.steps:
            shutil.rmtree(run_dir, ignore_errors=True)
            cmd = [a.unstuck, "train", "--config", a.config, f"run.output_dir={a.out}", f"run.name={name}",
                   f"grpo.steps={a.steps}", "grpo.checkpoint_every=0", "grpo.final_model=false"] + overrides
            say(f"{name}: {' '.join(overrides) or '(the config as it is)'}")
            t0 = time.time()
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL)
            seconds = time.time() - t0
            if done.returncode not in (0, 3):  # 3: run health said most optimizer steps were skipped
                say(f"{name}: exit {done.returncode}; see {run_dir}/train.log")
                return done.returncode
            metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
            with open(os.path.join(run_dir, "variant_seconds.json"), "w") as f:
                json.dump({"seconds": seconds}, f)
        else:
            try:
                with open(os.path.join(run_dir, "variant_seconds.json")) as f:
                    seconds = json.load(f)["seconds"]
            except (OSError, ValueError, KeyError):
                seconds = None
        rows.append((name, overrides, what, summary(metrics, a.window), seconds))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    data = {"steps": a.steps, "config": a.config, "only": a.only, "window": a.window, "data": a.data, "cpu": cpu_name(),
            "cores": os.cpu_count(), "commit": commit or "unknown",
            "rows": [{"name": name, "overrides": overrides, "what": what, "summary": s, "seconds": seconds}
                     for name, overrides, what, s, seconds in rows]}
    os.makedirs(os.path.dirname(os.path.abspath(a.data)), exist_ok=True)
    with open(a.data, "w") as f:
        json.dump(data, f, indent=1)
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    with open(a.results, "w") as f:
        f.write(render(data))
    say(f"table -> {a.results}, data -> {a.data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
