#!/usr/bin/env python3
"""Unstuck against TRL and transformers at the size people train (issue 25).

Builds a stand-in of a public model with transformers (scripts/scale_standin.py: the public config's
numbers, random weights with a fixed seed, a byte-level BPE tokenizer trained here, the embedding at
the real vocabulary size, the family's chat template, GSM8K-style records) and runs, each in a
fresh process, interleaved round by round:

  GRPO       `unstuck train` (configs/examples/gsm8k_qwen2.5.yaml) vs TRL's GRPOTrainer on the same
             model directory, data, chat template and work: P prompts x G completions, T new tokens,
             temperature 1, one optimizer step per batch (AdamW, lr 1e-6, beta2 0.99, clip 1.0, clip
             range 0.2/0.2, token-mean loss), no KL and no reference model on either side (TRL beta 0;
             unstuck grpo.ref_metrics_every 0). Modes: fp32 vs TRL in FP32; bf16_sr vs TRL with BF16
             autocast (FP32 master weights on both sides).
             Measured: peak resident memory of the whole process (wait4's ru_maxrss, the same for
             both), seconds per step after the first, and its phases (rollout: time in generation;
             update: the rest of the step).
  start-up   launch -> first rollout token of `unstuck train` (its run.json "startup") vs a Python
             process that imports transformers, loads the same directory and generates one token
             (seconds since its own process start, /proc/self/stat, the same clock).
  generation `unstuck bench generate --model DIR` vs transformers' generate on the same directory:
             same batch, prompt length, new tokens (no early stop), temperature 1.

Ratios are TRL (or transformers) / Unstuck for time (> 1: Unstuck faster) and Unstuck / TRL for
memory (< 1: Unstuck smaller), medians over the rounds. Installs nothing: TRL comes from
`pip install -r requirements-bench.txt` (exit 77 naming the module otherwise).

  scripts/bench_scale.py                                   # Qwen2.5-0.5B, 2 prompts x 4 x 64 tokens
  scripts/bench_scale.py --work large                      # 8 prompts x 8 x 256 tokens
  scripts/bench_scale.py --shape qwen2.5-1.5b --device cuda   # on a GPU machine
  scripts/bench_scale.py --layers 2 --rounds 1 --no-trl    # the CI-sized shape, Unstuck only
  scripts/bench_scale.py --lora 16                         # LoRA on both sides (TRL with peft's LoraConfig)
  scripts/bench_scale.py --tokenizer-vocab full            # a tokenizer of the real size (151,646 ids)
  scripts/bench_scale.py --table report.json               # the table of a saved --json report
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_peers  # noqa: E402
import scale_standin  # noqa: E402

MISSING_PEERS = 77
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
WORK = {"small": dict(prompts=2, group=4, new_tokens=64, steps=2),
        "large": dict(prompts=8, group=8, new_tokens=256, steps=2),
        "tiny": dict(prompts=1, group=2, new_tokens=8, steps=1)}  # start-up measurements (bench_pissa.py)


def seconds_since_process_start():
    """This process's age (its /proc/self/stat start time against CLOCK_BOOTTIME), as unstuck measures."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def gsm8k_reward(completions, answer, **_):
    """1 when the last \\boxed{...} of the completion equals the number after ####."""
    import re
    out = []
    for c, a in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else c
        boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
        out.append(1.0 if boxed and boxed[-1].strip() == a.split("####")[-1].strip() else 0.0)
    return out


# ---------------------------------------------------------------------------------------------
# Workers (each in a fresh process)

def trl_worker(a):
    import torch
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    device = a.device
    records = [json.loads(l) for l in Path(a.data, "train.jsonl").read_text().splitlines() if l.strip()]
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    ds = Dataset.from_list([{"prompt": [{"role": "system", "content": scale_standin.SYSTEM_PROMPT},
                                        {"role": "user", "content": r["question"]}],
                             "answer": r["answer"]} for r in records])
    steps, gen = [], []
    inner_generate = model.generate

    def timed_generate(*args, **kw):
        t0 = time.perf_counter()
        out = inner_generate(*args, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
        gen.append(time.perf_counter() - t0)
        return out
    model.generate = timed_generate
    lengths = []

    Timer = bench_peers.step_timer(TrainerCallback, steps, lengths, torch.cuda.synchronize if device == "cuda" else None)

    cfg = GRPOConfig(
        output_dir=a.out, per_device_train_batch_size=a.prompts * a.group, num_generations=a.group,
        max_completion_length=a.new_tokens, temperature=1.0, learning_rate=1e-6, adam_beta2=0.99,
        weight_decay=0.0, max_grad_norm=1.0, lr_scheduler_type="constant", beta=0.0, epsilon=0.2,
        epsilon_high=0.2, loss_type="dapo", num_iterations=1, max_steps=a.steps, bf16=a.mode != "fp32",
        use_cpu=device == "cpu", report_to="none", save_strategy="no", logging_steps=1, seed=1, disable_tqdm=True,
        dataloader_num_workers=0)
    peft_config = None
    if a.lora:  # peft's LoRA on the same projections, rank and alpha as unstuck's lora: keys
        from peft import LoraConfig
        peft_config = LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                 task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=gsm8k_reward, args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[Timer()], peft_config=peft_config)
    trainer.train()
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    print(json.dumps({"step_seconds": steps, "generate_seconds": gen, "completion_len": lengths,
                      "device_peak_bytes": peak}))


def hf_first_token_worker(a):
    """import transformers, load the directory, generate one token; seconds since this process started."""
    import torch
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32 if a.mode == "fp32" else torch.bfloat16)
    if a.device == "cuda":
        model = model.cuda()
    text = tok.apply_chat_template([{"role": "system", "content": scale_standin.SYSTEM_PROMPT},
                                    {"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt").to(model.device)
    with torch.inference_mode():
        model.generate(**ids, max_new_tokens=1, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    if a.device == "cuda":
        torch.cuda.synchronize()
    print(json.dumps({"first_token_seconds": seconds_since_process_start()}))


def hf_generate_worker(a):
    """transformers generate on the model directory: tokens/s of `repeats` timed calls after a warm-up."""
    import torch
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    from transformers import AutoModelForCausalLM
    dtype = torch.float32 if a.mode == "fp32" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype).to(a.device).eval()
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(10, 300, (a.sequences, a.prompt_tokens), generator=gen).to(a.device)
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=a.new_tokens,
              min_new_tokens=a.new_tokens, pad_token_id=model.config.pad_token_id,
              attention_mask=torch.ones_like(prompts))
    rates = []
    with torch.inference_mode():
        model.generate(prompts, **{**kw, "max_new_tokens": 2, "min_new_tokens": 2})
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            out = model.generate(prompts, **kw)
            if a.device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            assert out.shape[1] == a.prompt_tokens + a.new_tokens
            rates.append(a.sequences * a.new_tokens / dt)
    print(json.dumps({"tokens_per_s": rates}))


# ---------------------------------------------------------------------------------------------
# Driver

def run_measured(cmd, log, env=None, cwd=None):
    """Runs cmd (output to `log`); returns (exit code, peak RSS bytes of that process, wall seconds)."""
    with open(log, "w") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss * 1024, time.perf_counter() - t0


def check(rc, cmd, log):
    if rc != 0:
        tail = Path(log).read_text()[-4000:]
        sys.exit(f"bench_scale: command failed ({rc}): {' '.join(map(str, cmd))}\n{tail}")


def last_json(path):
    return json.loads([l for l in Path(path).read_text().splitlines() if l.startswith("{")][-1])


def thread_env(threads):
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    else:
        env.pop("OMP_NUM_THREADS", None)
    return env


def warm(model_dir):
    """Model files in the page cache and no dirty pages pending, before every timed process."""
    for f in Path(model_dir).iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass
    os.sync()


def summarize(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


class Bench:
    def __init__(self, a, work, standin):
        self.a, self.work, self.s = a, work, standin
        self.unstuck = str(Path(a.unstuck).resolve())
        self.env = thread_env(a.threads)

    def unstuck_train(self, mode, tag):
        a, w = self.a, WORK[self.a.work]
        name = f"{mode}_{tag}"
        cmd = [self.unstuck, "train", "--config", str(ROOT / "configs/examples/gsm8k_qwen2.5.yaml"),
               f"grpo.base_model={self.s['model']}", f"data.train_path={self.s['data']}/train.jsonl",
               f"data.test_path={self.s['data']}/test.jsonl", f"run.output_dir={self.work / 'runs'}",
               f"run.name={name}", f"run.device={a.device}", f"precision.mode={mode}",
               f"precision.threads={a.threads}", f"grpo.steps={w['steps']}", f"grpo.prompts_per_step={w['prompts']}",
               f"grpo.group_size={w['group']}", f"rollout.max_new_tokens={w['new_tokens']}", "grpo.minibatches=1",
               "grpo.ref_metrics_every=0", "grpo.kl_coef=0", "grpo.clip_high=0.2", "grpo.eval_every=0",
               "grpo.eval_samples=1", "grpo.checkpoint_every=0", "rollout.temperature=1.0",
               # TRL's GRPOConfig checkpoints activations by default (gradient_checkpointing=True).
               "model.activation_checkpointing=true"] + a.unstuck_args
        if a.lora:
            cmd += [f"lora.rank={a.lora}", f"lora.alpha={2 * a.lora}"]
        warm(self.s["model"])
        log = self.work / f"{name}.log"
        rc, peak, wall = run_measured(cmd, log, env=self.env)
        check(rc, cmd, log)
        run_dir = self.work / "runs" / name
        metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
        run = json.loads((run_dir / "run.json").read_text())
        final = run_dir / ("final_adapter/adapter_config.json" if a.lora else "final_model/config.json")
        if not final.exists() or not list((run_dir / "checkpoints").iterdir()):
            sys.exit(f"bench_scale: {run_dir} has no {final.parent.name}/ or checkpoint")
        timed = metrics[1:] or metrics
        res = {"peak_bytes": peak, "wall_s": wall, "step_s": [m["step_seconds"] for m in timed],
               "rollout_s": [m["rollout_seconds"] for m in timed],
               "update_s": [m["step_seconds"] - m["rollout_seconds"] for m in timed],
               # The first step apart: it touches the optimizer's moments for the first time.
               "first_update_s": metrics[0]["step_seconds"] - metrics[0]["rollout_seconds"],
               "first_optimizer_s": metrics[0]["optimizer_seconds"],
               "optimizer_s": [m["optimizer_seconds"] for m in timed],
               "completion_len": statistics.mean(m["response_len_mean"] for m in metrics),
               "startup_s": run.get("startup", {}).get("seconds"),
               "startup_stages": run.get("startup", {}).get("stages"),
               "plan_bytes": run.get("memory_plan", {}).get("peak_bytes"),
               "step_peaks": [m.get("peak_memory_bytes") for m in metrics], "run_dir": str(run_dir)}
        if a.check_export:
            res["export"] = self.check_export(run_dir)
        if not a.keep:
            shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        return res

    def check_export(self, run_dir):
        """`unstuck export` of the run loads in transformers and has the run's parameter count."""
        out = self.work / "export"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.unstuck, "export", "--run", str(run_dir), "--out", str(out)] + \
            (["--format", "merged"] if self.a.lora else [])
        log = self.work / "export.log"
        rc, peak, _ = run_measured(cmd, log, env=self.env)
        check(rc, cmd, log)
        probe = ("import sys,json,torch; from transformers import AutoModelForCausalLM; "
                 "m=AutoModelForCausalLM.from_pretrained(sys.argv[1]); "
                 "print(json.dumps({'params': sum(p.numel() for p in m.parameters())}))")
        got = json.loads(subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True,
                                        check=True).stdout.splitlines()[-1])
        shutil.rmtree(out, ignore_errors=True)
        return {"peak_bytes": peak, "params": got["params"]}

    def trl_train(self, mode, tag):
        w = WORK[self.a.work]
        out = self.work / f"trl_{mode}_{tag}"
        cmd = [sys.executable, __file__, "--worker", "trl", "--model", self.s["model"], "--data", self.s["data"],
               "--mode", mode, "--threads", str(self.a.threads), "--out", str(out), "--device", self.a.device,
               "--steps", str(w["steps"]), "--prompts", str(w["prompts"]), "--group", str(w["group"]),
               "--new-tokens", str(w["new_tokens"]), "--lora", str(self.a.lora)]
        warm(self.s["model"])
        log = self.work / f"trl_{mode}_{tag}.log"
        rc, peak, wall = run_measured(cmd, log, env=self.env)
        check(rc, cmd, log)
        r = last_json(log)
        shutil.rmtree(out, ignore_errors=True)
        steps, gen = r["step_seconds"], r["generate_seconds"]
        timed = list(range(1, len(steps))) or [0]
        return {"peak_bytes": peak, "wall_s": wall, "step_s": [steps[i] for i in timed],
                "rollout_s": [gen[i] for i in timed if i < len(gen)],
                "update_s": [steps[i] - gen[i] for i in timed if i < len(gen)],
                "completion_len": statistics.mean(r["completion_len"]) if r["completion_len"] else None,
                "device_peak_bytes": r["device_peak_bytes"]}

    def hf_first_token(self, mode):
        cmd = [sys.executable, __file__, "--worker", "hf_first_token", "--model", self.s["model"], "--mode", mode,
               "--threads", str(self.a.threads), "--device", self.a.device]
        warm(self.s["model"])
        log = self.work / "hf_first_token.log"
        rc, peak, _ = run_measured(cmd, log, env=self.env)
        check(rc, cmd, log)
        return last_json(log)["first_token_seconds"]

    def unstuck_generate(self, mode):
        a = self.a
        cmd = [self.unstuck, "bench", "generate", "--json", "--model", self.s["model"], "--dtype",
               "fp32" if mode == "fp32" else "bf16", "--sequences", str(a.gen_batch), "--new-tokens",
               str(a.gen_tokens), "--prompt-tokens", str(a.gen_prompt), "--repeats", str(a.gen_repeats),
               "--threads", str(a.threads), "--device", a.device, "--no-recompute"]
        log = self.work / "unstuck_generate.log"
        rc, _, _ = run_measured(cmd, log, env=self.env)
        check(rc, cmd, log)
        return last_json(log)

    def hf_generate(self, mode):
        a = self.a
        cmd = [sys.executable, __file__, "--worker", "hf_generate", "--model", self.s["model"], "--mode", mode,
               "--threads", str(a.threads), "--device", a.device, "--sequences", str(a.gen_batch), "--new-tokens",
               str(a.gen_tokens), "--prompt-tokens", str(a.gen_prompt), "--repeats", str(a.gen_repeats)]
        log = self.work / "hf_generate.log"
        rc, _, _ = run_measured(cmd, log, env=self.env)
        check(rc, cmd, log)
        return last_json(log)


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def ratio(a, b):
    return a / b if a and b else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(scale_standin.SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the public config")
    ap.add_argument("--work", default="small", choices=sorted(WORK))
    ap.add_argument("--modes", default="fp32,bf16_sr", help="unstuck precision modes (TRL: fp32 or bf16 autocast)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (a fresh process per cell each)")
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model-dir", help="reuse a stand-in built by scale_standin.py (its OUT directory)")
    ap.add_argument("--tokenizer-vocab", default="2048",
                    help="the stand-in tokenizer's BPE tokens, or full: the family's real count (Qwen2: 151,643)")
    ap.add_argument("--unstuck", default=str(ROOT / "build/unstuck"))
    ap.add_argument("--no-trl", action="store_true", help="Unstuck only (no peer runs)")
    ap.add_argument("--lora", type=int, default=0,
                    help="LoRA of this rank (alpha 2 x rank) on all seven projections on both sides (TRL: peft)")
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--no-startup", action="store_true")
    ap.add_argument("--check-export", action="store_true", help="export each run and load it in transformers")
    ap.add_argument("--keep", action="store_true", help="keep the runs' checkpoints")
    ap.add_argument("--gen-batch", type=int, default=8)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--gen-prompt", type=int, default=64)
    ap.add_argument("--gen-repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--table", metavar="JSON", help="print the table of a saved --json report and exit")
    ap.add_argument("--unstuck-arg", dest="unstuck_args", action="append", default=[],
                    help="extra key=value for every `unstuck train` (repeatable)")
    ap.add_argument("--worker", choices=["trl", "hf_first_token", "hf_generate"], help=argparse.SUPPRESS)
    for k in ("--model", "--data", "--mode", "--out"):
        ap.add_argument(k, help=argparse.SUPPRESS)
    for k in ("--steps", "--prompts", "--group", "--new-tokens", "--sequences", "--prompt-tokens", "--repeats"):
        ap.add_argument(k, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.table:
        print_table(json.loads(Path(a.table).read_text()))
        return 0
    if a.worker:
        return {"trl": trl_worker, "hf_first_token": hf_first_token_worker, "hf_generate": hf_generate_worker}[a.worker](a)

    for module in ("torch", "transformers", "tokenizers") + (() if a.no_trl else ("trl", "datasets")):
        try:
            __import__(module)
        except ImportError:
            print(f"bench_scale: Python module '{module}' is missing; install the peers with "
                  f"`{sys.executable} -m pip install -r requirements-bench.txt` (this script installs nothing)",
                  file=sys.stderr)
            return MISSING_PEERS
    if not Path(a.unstuck).exists():
        sys.exit(f"bench_scale: {a.unstuck} not found (build it: scripts/setup.sh)")
    import torch
    import transformers
    work = Path(tempfile.mkdtemp(prefix="unstuck_bench_scale_"))
    try:
        if a.model_dir:
            s = {"model": str(Path(a.model_dir, "model")), "data": str(Path(a.model_dir, "data")), "shape": a.shape}
            out = subprocess.run([a.unstuck, "inspect", s["model"]], capture_output=True, text=True).stdout
            s["params"] = next((int(l.split(":")[1]) for l in out.splitlines() if l.startswith("parameters:")), None)
            tokenizer = json.loads(Path(s["model"], "tokenizer.json").read_text())
            s["tokenizer_vocab"] = len(set(tokenizer["model"]["vocab"].values()) |
                                       {t["id"] for t in tokenizer.get("added_tokens", [])})
        else:
            print(f"[bench_scale] building the {a.shape} stand-in", file=sys.stderr)
            s = scale_standin.build(str(work / "standin"), a.shape, a.layers, tokenizer_vocab=a.tokenizer_vocab)
        bench = Bench(a, work, s)
        report = {"machine": {"cpus": len(os.sched_getaffinity(0)), "cpu": cpu_name(),
                              "mem_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
                              "load_avg_start": os.getloadavg()},
                  "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                               "trl": None if a.no_trl else __import__("trl").__version__},
                  "config": {"shape": a.shape, "layers": s.get("layers"), "params": s.get("params"),
                             "tokenizer_vocab": s.get("tokenizer_vocab"), "work": a.work,
                             **WORK[a.work], "rounds": a.rounds, "threads": a.threads, "device": a.device,
                             "gen_batch": a.gen_batch, "gen_tokens": a.gen_tokens, "gen_prompt": a.gen_prompt},
                  "grpo": [], "startup": [], "generate": []}
        for mode in a.modes.split(","):
            peer_mode = "fp32" if mode == "fp32" else "bf16"
            cells = {"unstuck": [], "trl": []}
            for r in range(a.rounds):
                order = [("unstuck", bench.unstuck_train)] + ([] if a.no_trl else [("trl", bench.trl_train)])
                if r % 2:
                    order.reverse()
                for who, fn in order:
                    print(f"[bench_scale] {mode}: round {r + 1}/{a.rounds}, {who}", file=sys.stderr)
                    cells[who].append(fn(mode if who == "unstuck" else peer_mode, f"r{r}"))
            report["grpo"].append({"mode": mode, "peer": f"trl {peer_mode}" + (" autocast" if peer_mode == "bf16" else ""),
                                   **summarize_cells(cells)})
            if not a.no_startup:
                ours = [c["startup_s"] for c in cells["unstuck"]]
                theirs = [bench.hf_first_token(peer_mode) for _ in range(a.rounds)]
                report["startup"].append({"mode": mode, "unstuck_s": summarize(ours), "transformers_s": summarize(theirs),
                                          "ratio": ratio(statistics.median(theirs), statistics.median(ours)),
                                          "unstuck_stages": cells["unstuck"][-1]["startup_stages"]})
            if not a.no_generate:
                ours, theirs = [], []
                for r in range(a.rounds):
                    first, second = (bench.unstuck_generate, bench.hf_generate) if r % 2 == 0 else \
                        (bench.hf_generate, bench.unstuck_generate)
                    x, y = first(mode), second(mode)
                    u, h = (x, y) if r % 2 == 0 else (y, x)
                    ours.append(u["fp32" if mode == "fp32" else "bf16"]["kv_tokens_per_s"])
                    theirs.append(statistics.median(h["tokens_per_s"]))
                report["generate"].append({"mode": mode, "unstuck_tokens_per_s": summarize(ours),
                                           "transformers_tokens_per_s": summarize(theirs),
                                           "ratio": ratio(statistics.median(ours), statistics.median(theirs))})
        report["machine"]["load_avg_end"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print_table(report)
    return 0


def summarize_cells(cells):
    out = {}
    for who, runs in cells.items():
        if not runs:
            continue
        out[who] = {k: summarize([r[k] for r in runs]) for k in ("peak_bytes", "wall_s")}
        for k in ("step_s", "rollout_s", "update_s"):
            out[who][k] = summarize([x for r in runs for x in r[k]])
        out[who]["completion_len"] = summarize([r["completion_len"] for r in runs])
        if who == "unstuck":
            out[who]["plan_bytes"] = summarize([r["plan_bytes"] for r in runs])
            for k in ("first_update_s", "first_optimizer_s"):
                out[who][k] = summarize([r.get(k) for r in runs])
            out[who]["optimizer_s"] = summarize([x for r in runs for x in r.get("optimizer_s", [])])
            if runs[0].get("export"):
                out[who]["export"] = runs[-1]["export"]
    if "trl" in out:
        u, t = out["unstuck"], out["trl"]
        out["ratios"] = {"memory": ratio(u["peak_bytes"]["median"], t["peak_bytes"]["median"]),
                         "step_speed": ratio(t["step_s"]["median"], u["step_s"]["median"]),
                         "rollout_speed": ratio(t["rollout_s"]["median"], u["rollout_s"]["median"])
                         if t["rollout_s"] else None,
                         "update_speed": ratio(t["update_s"]["median"], u["update_s"]["median"])
                         if t["update_s"] else None}
    return out


def gib(b):
    return f"{b / 2**30:.2f}" if b else "-"


def fmt(s, f="{:.1f}"):
    return "-" if not s else f"{f.format(s['median'])} ({f.format(s['min'])}-{f.format(s['max'])})"


def print_table(rep):
    c, m = rep["config"], rep["machine"]
    print(f"Unstuck at {c['shape']}" + (f" ({c['layers']} layers)" if c.get("layers") else "") +
          f", {c.get('params') or '?'} parameters, on {c['device']}: {m['cpus']} CPUs ({m['cpu']}), "
          f"{m['mem_gib']:.0f} GiB; torch {rep['versions']['torch']}, transformers {rep['versions']['transformers']}"
          + (f", trl {rep['versions']['trl']}" if rep["versions"].get("trl") else "") +
          f"; load average {m['load_avg_start'][0]:.1f} -> {m.get('load_avg_end', [0])[0]:.1f}")
    print(f"\nGRPO: {c['prompts']} prompts x {c['group']} completions, {c['new_tokens']} new tokens, "
          f"{c['steps']} steps, {c['rounds']} rounds (median (min-max); step times after the first step)")
    print(f"{'mode':<8} {'who':<20} {'peak GiB':<20} {'plan GiB':<9} {'step s':<22} {'rollout s':<22} "
          f"{'update s':<22} {'completion'}")
    for row in rep["grpo"]:
        for who in ("unstuck", "trl"):
            if who not in row:
                continue
            r = row[who]
            name = "unstuck " + row["mode"] if who == "unstuck" else row["peer"]
            pk = r["peak_bytes"]
            peak = f"{gib(pk['median'])} ({gib(pk['min'])}-{gib(pk['max'])})"
            plan = gib(r["plan_bytes"]["median"]) if r.get("plan_bytes") else "-"
            print(f"{row['mode']:<8} {name:<20} {peak:<20} {plan:<9} {fmt(r['step_s']):<22} {fmt(r['rollout_s']):<22} "
                  f"{fmt(r['update_s']):<22} {fmt(r['completion_len'])}")
        first = row.get("unstuck", {})
        if first.get("first_update_s") and first.get("update_s"):  # reports before it: not recorded
            print(f"{'':<8} {'first step':<20} update {fmt(first['first_update_s'])} s (optimizer "
                  f"{fmt(first['first_optimizer_s'])} s) against {fmt(first['update_s'])} s (optimizer "
                  f"{fmt(first['optimizer_s'])} s) later: "
                  f"{first['first_update_s']['median'] / first['update_s']['median']:.2f}x")
        if "ratios" in row:
            q = row["ratios"]
            f = lambda x: f"{x:.2f}" if x else "-"  # noqa: E731
            print(f"{'':<8} {'ratios':<20} memory unstuck/trl {f(q['memory'])}, speed trl/unstuck: step "
                  f"{f(q['step_speed'])}, rollout {f(q['rollout_speed'])}, update {f(q['update_speed'])}")
    if rep["startup"]:
        print("\nStart-up: launch -> first rollout token (unstuck train) vs import + load + one token (transformers)")
        for row in rep["startup"]:
            stages = ", ".join(f"{s['stage']} {s['seconds']:.1f}" for s in row["unstuck_stages"] or [])
            print(f"{row['mode']:<8} unstuck {fmt(row['unstuck_s'])} s, transformers {fmt(row['transformers_s'])} s, "
                  f"ratio transformers/unstuck {row['ratio']:.2f}\n{'':<8} unstuck stages: {stages}")
    if rep["generate"]:
        print(f"\nGeneration: {c['gen_batch']} sequences x {c['gen_tokens']} new tokens after {c['gen_prompt']} prompt "
              f"tokens, temperature 1 (tokens/s; ratio unstuck/transformers)")
        for row in rep["generate"]:
            print(f"{row['mode']:<8} unstuck {fmt(row['unstuck_tokens_per_s'], '{:.0f}')}, transformers "
                  f"{fmt(row['transformers_tokens_per_s'], '{:.0f}')}, ratio {row['ratio']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
