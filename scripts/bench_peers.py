#!/usr/bin/env python3
"""Unstuck against its Python peers on identical work, interleaved (issue 15).

  GRPO step   `unstuck train` vs TRL's GRPOTrainer, from the same SFT base (an `unstuck sft` output
              is a transformers model directory; its tokenizer.model loads as the matching HF
              tokenizer, checked on the prompts), same 32 prompts x 8 completions per step, 16 new
              tokens, temperature 1, one optimizer step (AdamW, lr 1e-4, beta2 0.99, clip 1.0,
              clip range 0.2/0.28, no KL, token-mean loss), no checkpoint or eval in the timed steps;
              no reference policy on either side (TRL with beta 0 loads none; unstuck runs with
              grpo.ref_metrics_every 0 unless --ref-metrics-every says otherwise).
              Modes: fp32 vs TRL in FP32, and bf16 / bf16_sr vs TRL with BF16 autocast.
  generation  `unstuck bench generate` (KV cache, temperature 1) vs transformers' `generate` on a
              LlamaForCausalLM of the same shape (checked by parameter count), same batch, prompt
              length and number of new tokens (min_new_tokens: no early stop on either side).

Each measurement runs in a fresh process; rounds alternate the frameworks, so load on a shared
machine falls on both. Per-step times after the warm-up steps are pooled per cell: median and
range (min..max); the ratio is TRL or transformers time / Unstuck time (> 1: Unstuck faster), as
the median and range of the per-round paired ratios. Installs nothing: TRL and transformers come
from `pip install -r requirements-bench.txt` (exit 77, naming the missing module, otherwise; the
generation comparison alone needs transformers only).

  scripts/bench_peers.py [--base runs/sft-countdown/model] [--threads 1,0] [--rounds 3] [--json]
  scripts/bench_peers.py --no-step --threads 1,2 --gen-dtypes fp32,bf16 --rounds 3   # generation only
  scripts/bench_peers.py --smoke    # tiny base trained on the spot, 1 round, seconds (ctest)
  scripts/bench_peers.py --table report.json   # the table of a saved --json report
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MISSING_PEERS = 77  # ctest SKIP_RETURN_CODE


# ---------------------------------------------------------------------------------------------
# Workers (run in their own process: thread count and warm caches are per process)

def countdown_reward(completions, numbers, target, **_):
    """1 when the <answer> expression uses the numbers exactly once each and makes the target."""
    import ast
    import re
    from fractions import Fraction

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value), [node.value]
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
            (a, na), (b, nb) = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and b == 0:
                raise ValueError
            v = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op)) if not isinstance(
                node.op, ast.Div) else a / b
            return v, na + nb
        raise ValueError

    out = []
    for text, nums, t in zip(completions, numbers, target):
        m = re.search(r"<answer>(.*?)</answer>", text)
        try:
            expr = m.group(1).strip()
            if not re.fullmatch(r"[0-9+\-*/() ]+", expr):
                raise ValueError
            v, used = value(ast.parse(expr, mode="eval").body)
            out.append(1.0 if v == t and sorted(used) == sorted(nums) else 0.0)
        except Exception:
            out.append(0.0)
    return out


def step_timer(callback_base, times, lengths, sync=None):
    """A transformers TrainerCallback class appending each step's seconds to `times` (after `sync()`,
    e.g. torch.cuda.synchronize) and each logged completions/mean_length to `lengths`."""
    class Timer(callback_base):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            if sync:
                sync()
            times.append(time.perf_counter() - self.t0)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])
    return Timer


def trl_worker(args):
    """GRPO steps with TRL; prints {"step_seconds": [...], "completion_len": mean}."""
    import torch
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    records = [json.loads(l) for l in Path(args.data).read_text().splitlines() if l.strip()]
    tok = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    tok.pad_token = tok.convert_ids_to_tokens(model.config.pad_token_id)
    ds = Dataset.from_list([{"prompt": tok.bos_token + r["prompt"], "numbers": r["numbers"], "target": r["target"]}
                            for r in records])
    times, lengths = [], []
    Timer = step_timer(TrainerCallback, times, lengths)

    cfg = GRPOConfig(
        output_dir=args.out, per_device_train_batch_size=args.prompts * args.group, num_generations=args.group,
        max_completion_length=args.new_tokens, temperature=1.0, learning_rate=1e-4, adam_beta2=0.99,
        weight_decay=0.0, max_grad_norm=1.0, lr_scheduler_type="constant", beta=0.0, epsilon=0.2,
        epsilon_high=0.28, loss_type="dapo", num_iterations=1, max_steps=args.steps, bf16=args.mode != "fp32",
        use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, seed=1, disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=countdown_reward, args=cfg, train_dataset=ds,
                          processing_class=tok, callbacks=[Timer()])
    trainer.train()
    print(json.dumps({"step_seconds": times, "completion_len": statistics.mean(lengths) if lengths else None}))


def hf_generate_worker(args):
    """transformers generate on a random LlamaForCausalLM of the given shape; prints tokens/s."""
    import torch
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    from transformers import LlamaConfig, LlamaForCausalLM
    shape = json.loads(args.shape)
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=shape["vocab_size"], hidden_size=shape["dim"], num_hidden_layers=shape["n_layers"],
                      num_attention_heads=shape["n_heads"], num_key_value_heads=shape["n_kv_heads"],
                      intermediate_size=shape["ffn_dim"], max_position_embeddings=shape["max_seq_len"],
                      tie_word_embeddings=shape.get("tied", False), rms_norm_eps=1e-5, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0)
    params = None
    prompts = torch.randint(4, cfg.vocab_size, (args.sequences, args.prompt_tokens))
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=args.new_tokens,
              min_new_tokens=args.new_tokens, pad_token_id=0, attention_mask=torch.ones_like(prompts))
    result = {}
    for mode in args.mode.split(","):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16 if mode == "bf16" else torch.float32).eval()
        params = sum(p.numel() for p in model.parameters())
        with torch.inference_mode():
            model.generate(prompts, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
            rates = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = model.generate(prompts, **kw)
                dt = time.perf_counter() - t0
                assert out.shape[1] == args.prompt_tokens + args.new_tokens
                rates.append(args.sequences * args.new_tokens / dt)
        result[mode] = {"tokens_per_s": rates, "params": params}
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# Driver

def run(cmd, env=None, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    if p.returncode != 0:
        sys.exit(f"bench_peers: command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}"
                 f"\n{p.stderr[-3000:]}")
    return p.stdout


def last_json(text):
    return json.loads([l for l in text.splitlines() if l.startswith("{")][-1])


def thread_env(threads):
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    else:
        env.pop("OMP_NUM_THREADS", None)
    return env


def summarize(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


class Bench:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.unstuck = str(Path(a.unstuck).resolve())

    def prepare_data(self):
        """The first `prompts` training records (each step then sees the same 32 prompts on both sides)."""
        src = [l for l in (ROOT / "data/countdown/train.jsonl").read_text().splitlines() if l.strip()]
        d = self.work / "data"
        d.mkdir(parents=True, exist_ok=True)
        (d / "train.jsonl").write_text("\n".join(src[:self.a.prompts]) + "\n")
        (d / "test.jsonl").write_text("\n".join(src[-2:]) + "\n")
        return d

    def check_tokenizer(self, data):
        """The HF tokenizer of the base gives the prompt token counts `unstuck data check` reports."""
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(self.a.base)
        out = run([self.unstuck, "data", "check", "--config", str(ROOT / "configs/grpo/countdown.yaml"),
                   f"grpo.base_model={self.a.base}", f"data.train_path={data / 'train.jsonl'}",
                   f"data.test_path={data / 'test.jsonl'}"])
        lines, checked = out.splitlines(), 0
        for i, line in enumerate(lines):
            if line.startswith("--- prompt ") and "tokens" in line:
                n = int(line.split("(")[1].split()[0])
                text = lines[i + 1]
                ids = tok(text, add_special_tokens=False).input_ids
                if len(ids) != n:
                    sys.exit(f"bench_peers: HF tokenizer gives {len(ids)} tokens for {text!r}, unstuck {n}")
                checked += 1
        if checked == 0:
            sys.exit("bench_peers: `unstuck data check` printed no prompt to compare")
        return checked

    def unstuck_steps(self, mode, threads, data, tag):
        name = f"{mode}_t{threads}_{tag}"
        args = [self.unstuck, "train", "--config", str(ROOT / "configs/grpo/countdown.yaml"),
                f"run.output_dir={self.work / 'runs'}", f"run.name={name}", f"grpo.base_model={self.a.base}",
                f"data.train_path={data / 'train.jsonl'}", f"data.test_path={data / 'test.jsonl'}",
                f"precision.mode={mode}", f"precision.threads={threads}", "grpo.round_base_to_bf16=false",
                f"grpo.steps={self.a.warmup + self.a.steps}", f"grpo.prompts_per_step={self.a.prompts}",
                f"grpo.group_size={self.a.group}", f"rollout.max_new_tokens={self.a.new_tokens}",
                "rollout.temperature=1.0", "grpo.eval_every=0", "grpo.eval_samples=1", "grpo.checkpoint_every=0",
                "grpo.final_model=false", "run.log_level=warn",
                f"grpo.ref_metrics_every={self.a.ref_metrics_every}"]
        run(args, env=thread_env(threads))
        metrics = [json.loads(l) for l in (self.work / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        shutil.rmtree(self.work / "runs" / name, ignore_errors=True)
        timed = metrics[self.a.warmup:]
        return ([m["step_seconds"] for m in timed],
                statistics.mean(m["response_len_mean"] for m in timed))

    def trl_steps(self, mode, threads, data, tag):
        out = self.work / f"trl_{mode}_{threads}_{tag}"
        res = last_json(run([sys.executable, __file__, "--worker", "trl", "--base", self.a.base, "--data",
                             str(data / "train.jsonl"), "--mode", mode, "--threads", str(threads), "--out", str(out),
                             "--steps", str(self.a.warmup + self.a.steps), "--prompts", str(self.a.prompts),
                             "--group", str(self.a.group), "--new-tokens", str(self.a.new_tokens)],
                            env=thread_env(threads)))
        shutil.rmtree(out, ignore_errors=True)
        return res["step_seconds"][self.a.warmup:], res["completion_len"]

    def unstuck_generate(self, threads):
        """One `unstuck bench generate --json` run (with --repeats / --no-recompute / --dtype where this
        build has them); returns it with m["kv_tokens_per_s"] reduced to one number per mode."""
        opts = run([self.unstuck, "bench", "generate", "--help"])
        dtypes = self.a.gen_dtypes.split(",")
        extra = (["--repeats", str(self.a.gen_repeats)] if "--repeats" in opts else []) + \
                (["--no-recompute"] if "--no-recompute" in opts else []) + \
                (["--dtype", dtypes[0]] if len(dtypes) == 1 and "--dtype" in opts else [])
        res = last_json(run([self.unstuck, "bench", "generate", "--json", "--sequences", str(self.a.gen_batch),
                             "--new-tokens", str(self.a.gen_tokens), "--prompt-tokens", str(self.a.gen_prompt),
                             "--threads", str(threads)] + extra, env=thread_env(threads)))
        for m in dtypes:
            v = res[m]["kv_tokens_per_s"]
            res[m]["kv_tokens_per_s"] = v["median"] if isinstance(v, dict) else statistics.median(v) \
                if isinstance(v, list) else v
        return res

    def hf_generate(self, mode, threads, shape):
        return last_json(run([sys.executable, __file__, "--worker", "hf_generate", "--mode", mode, "--threads",
                              str(threads), "--shape", json.dumps(shape), "--sequences", str(self.a.gen_batch),
                              "--prompt-tokens", str(self.a.gen_prompt), "--new-tokens", str(self.a.gen_tokens),
                              "--repeats", str(self.a.gen_repeats)], env=thread_env(threads)))


def smoke_base(bench, work):
    """A tiny countdown policy (SFT, seconds) for --smoke."""
    base = work / "base"
    run([bench.unstuck, "sft", "--config", str(ROOT / "configs/sft/countdown.yaml"), f"run.output_dir={work}",
         "run.name=smoke_sft", f"sft.output={base}", "sft.steps=10", "sft.batch_size=8", "sft.eval_every=0",
         "sft.eval_samples=4", "model.dim=16", "model.n_layers=1", "model.n_heads=2", "model.n_kv_heads=2",
         "model.ffn_dim=32", "precision.threads=1", "run.log_level=warn"],
        cwd=ROOT)  # the config's data and tokenizer paths are relative to the repository
    return str(base)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=str(ROOT / "runs/sft-countdown/model"),
                    help="SFT base policy (`unstuck sft --config configs/sft/countdown.yaml` writes the default)")
    ap.add_argument("--unstuck", default=str(ROOT / "build/unstuck"))
    ap.add_argument("--threads", default="1,0", help="comma list; 0 = all cores")
    ap.add_argument("--modes", default="fp32,bf16,bf16_sr", help="unstuck precision modes (bf16* vs TRL autocast)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (a fresh process per cell each)")
    ap.add_argument("--warmup", type=int, default=1, help="GRPO steps not timed at the start of each run")
    ap.add_argument("--steps", type=int, default=3, help="timed GRPO steps per run")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--ref-metrics-every", type=int, default=0,
                    help="unstuck grpo.ref_metrics_every; 0 (default): no reference forward, as TRL with beta 0 does")
    ap.add_argument("--gen-batch", type=int, default=256)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--gen-prompt", type=int, default=16)
    ap.add_argument("--gen-repeats", type=int, default=3, help="timed generate calls per process (both sides)")
    ap.add_argument("--gen-dtypes", default="fp32,bf16", help="generation weight dtypes: comma list of fp32, bf16")
    ap.add_argument("--no-step", action="store_true")
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--table", metavar="JSON", help="print the table of a saved --json report and exit")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes and a tiny base: checks the pipeline only")
    ap.add_argument("--worker", choices=["trl", "hf_generate"], help=argparse.SUPPRESS)
    for k in ("--data", "--mode", "--out", "--shape"):
        ap.add_argument(k, help=argparse.SUPPRESS)
    ap.add_argument("--sequences", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--prompt-tokens", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.table:
        print_table(json.loads(Path(a.table).read_text()))
        return 0
    if a.worker == "trl":
        a.threads = int(a.threads)
        return trl_worker(a)
    if a.worker == "hf_generate":
        a.threads = int(a.threads)
        return hf_generate_worker(a)

    for module in ("torch", "transformers") + (() if a.no_step else ("trl", "datasets")):
        try:
            __import__(module)
        except ImportError:
            print(f"bench_peers: Python module '{module}' is missing; install the peers with "
                  f"`{sys.executable} -m pip install -r requirements-bench.txt` (this script installs nothing)",
                  file=sys.stderr)
            return MISSING_PEERS
    if a.smoke:
        a.threads, a.modes, a.rounds, a.warmup, a.steps = "1", "fp32", 1, 1, 1
        a.prompts, a.group, a.new_tokens = 4, 2, 4
        a.gen_batch, a.gen_tokens, a.gen_prompt, a.gen_repeats = 4, 4, 4, 1
    if not Path(a.unstuck).exists():
        sys.exit(f"bench_peers: {a.unstuck} not found (build it: scripts/setup.sh)")
    threads = [int(t) for t in a.threads.split(",")]
    if not a.gen_dtypes or any(d not in ("fp32", "bf16") for d in a.gen_dtypes.split(",")):
        sys.exit(f"bench_peers: --gen-dtypes must list fp32 and/or bf16, got {a.gen_dtypes!r}")
    modes = a.modes.split(",")
    import torch
    import transformers
    trl_version = None if a.no_step else __import__("trl").__version__
    work = Path(tempfile.mkdtemp(prefix="unstuck_bench_peers_"))
    try:
        bench = Bench(a, work)
        if a.smoke:
            a.base = smoke_base(bench, work)
        if not a.no_step and not (Path(a.base) / "config.json").exists():
            sys.exit(f"bench_peers: no SFT base at {a.base} (config.json missing); make it with "
                     "`build/unstuck sft --config configs/sft/countdown.yaml` or pass --base")
        report = {"machine": {"cpus": len(os.sched_getaffinity(0)), "cpu": cpu_name(),
                              "load_avg_start": os.getloadavg()},
                  "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                               "trl": trl_version},
                  "config": {k: getattr(a, k) for k in ("base", "rounds", "warmup", "steps", "prompts", "group",
                                                        "new_tokens", "ref_metrics_every", "gen_batch", "gen_tokens",
                                                        "gen_prompt")},
                  "step": [], "generate": []}
        if not a.no_step:
            data = bench.prepare_data()
            report["tokenizer_prompts_checked"] = bench.check_tokenizer(data)
            for t in threads:
                for mode in modes:
                    ours, theirs, ratios, lens = [], [], [], {"unstuck": [], "trl": []}
                    trl_mode = "fp32" if mode == "fp32" else "bf16"
                    for r in range(a.rounds):
                        order = [("unstuck", bench.unstuck_steps), ("trl", bench.trl_steps)]
                        if r % 2:
                            order.reverse()
                        got = {}
                        for who, fn in order:
                            got[who] = fn(mode if who == "unstuck" else trl_mode, t, data, f"r{r}")
                            lens[who].append(got[who][1])
                        ours += got["unstuck"][0]
                        theirs += got["trl"][0]
                        ratios.append(statistics.median(got["trl"][0]) / statistics.median(got["unstuck"][0]))
                        print(f"[step] threads {t} {mode}: round {r + 1}/{a.rounds} ratio {ratios[-1]:.2f}",
                              file=sys.stderr)
                    report["step"].append({
                        "threads": t, "mode": mode, "peer": f"trl {trl_mode}" + (" autocast" if trl_mode == "bf16" else ""),
                        "unstuck_s": summarize(ours), "peer_s": summarize(theirs), "ratio": summarize(ratios),
                        "completion_len": {k: statistics.mean(v) for k, v in lens.items() if v and None not in v}})
        if not a.no_generate:
            shape = None
            for t in threads:
                gen_dtypes = a.gen_dtypes.split(",")
                cell = {m: {"ours": [], "theirs": [], "ratios": []} for m in gen_dtypes}
                for r in range(a.rounds):
                    ours = bench.unstuck_generate(t) if r % 2 == 0 else None  # alternate who goes first
                    shape = shape or generate_shape(ours)
                    theirs = bench.hf_generate(a.gen_dtypes, t, shape)
                    ours = ours or bench.unstuck_generate(t)
                    for m in gen_dtypes:
                        if theirs[m]["params"] != shape["params"]:
                            sys.exit(f"bench_peers: the transformers model has {theirs[m]['params']} parameters, "
                                     f"unstuck's {shape['params']}: not the same shape")
                        rate = ours[m]["kv_tokens_per_s"]
                        cell[m]["ours"].append(rate)
                        cell[m]["theirs"] += theirs[m]["tokens_per_s"]
                        cell[m]["ratios"].append(rate / statistics.median(theirs[m]["tokens_per_s"]))
                    print(f"[generate] threads {t}: round {r + 1}/{a.rounds} ratios " +
                          ", ".join(f"{m} {cell[m]['ratios'][-1]:.2f}" for m in gen_dtypes), file=sys.stderr)
                for m in gen_dtypes:
                    report["generate"].append({
                        "threads": t, "mode": m, "peer": f"transformers generate {m}",
                        "unstuck_tokens_per_s": summarize(cell[m]["ours"]),
                        "peer_tokens_per_s": summarize(cell[m]["theirs"]),
                        "ratio": summarize(cell[m]["ratios"]), "model": shape})
        report["machine"]["load_avg_end"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print_table(report)
    return 0


def generate_shape(res):
    """The model `unstuck bench generate` times: its JSON names dim, layers, heads, vocabulary and
    parameters; the rest is ModelConfig's default shape (4 KV heads, SwiGLU 384, untied), which the
    parameter count check of the transformers side confirms."""
    m = dict(res["model"])
    m.update(n_kv_heads=m["n_heads"], ffn_dim=3 * m["dim"], max_seq_len=max(128, res["prompt_tokens"] + res["new_tokens"]))
    return m


def fmt_s(s):
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def fmt_r(s):
    return f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})"


def cpu_name():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unnamed CPU")


def print_table(rep):
    c = rep["config"]
    trl = f", trl {rep['versions']['trl']}" if rep["versions"].get("trl") else ""
    cpu = f" ({rep['machine']['cpu']})" if rep["machine"].get("cpu") else ""  # reports before it: not recorded
    print(f"unstuck vs peers: torch {rep['versions']['torch']}, transformers {rep['versions']['transformers']}"
          f"{trl}; {rep['machine']['cpus']} CPUs{cpu}, load average "
          f"{rep['machine']['load_avg_start'][0]:.1f} -> {rep['machine']['load_avg_end'][0]:.1f}")
    if rep["step"]:
        print(f"\nGRPO step ({c['prompts']} prompts x {c['group']}, {c['new_tokens']} new tokens, {c['rounds']} rounds x "
              f"{c['steps']} timed steps after {c['warmup']} warm-up; seconds: median (min-max); ratio = peer / unstuck"
              + (f"; unstuck grpo.ref_metrics_every {c['ref_metrics_every']}" if "ref_metrics_every" in c else "") + ")")
        print(f"{'threads':>7}  {'unstuck mode':<12} {'unstuck s':<22} {'peer':<18} {'peer s':<22} {'ratio':<18} completion len")
        for row in rep["step"]:
            r = row["ratio"]
            lens = " / ".join(f"{row['completion_len'].get(k, float('nan')):.1f}" for k in ("unstuck", "trl"))
            print(f"{row['threads'] or 'all':>7}  {row['mode']:<12} {fmt_s(row['unstuck_s']):<22} {row['peer']:<18} "
                  f"{fmt_s(row['peer_s']):<22} {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})   {lens}")
    if rep["generate"]:
        m = rep["generate"][0]["model"]
        print(f"\nGeneration ({c['gen_batch']} sequences x {c['gen_tokens']} new tokens after {c['gen_prompt']} prompt "
              f"tokens, temperature 1, KV cache; model dim {m['dim']} x {m['n_layers']} layers, {m['params']} params; "
              f"tokens/s: median (min-max); ratio = unstuck / peer)")
        print(f"{'threads':>7}  {'mode':<6} {'unstuck tok/s':<26} {'transformers tok/s':<26} ratio")
        for row in rep["generate"]:
            r = row["ratio"]
            print(f"{row['threads'] or 'all':>7}  {row['mode']:<6} {fmt_r(row['unstuck_tokens_per_s']):<26} "
                  f"{fmt_r(row['peer_tokens_per_s']):<26} {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})")


if __name__ == "__main__":
    sys.exit(main())
