"""Paired comparison of precision modes: runs `unstuck train` arms x seeds, then the report and plots.

Two ways in:
  * your own config: the arms are precision modes, each a copy of the config with precision.mode
    and optim.lr overridden (bf16@2x: BF16 round-to-nearest at twice the config's LR); the report
    has the tables and plots but no verdicts:
        scripts/compare.py --config my.yaml --modes fp16,bf16,bf16_sr,bf16@2x --seeds 3 --steps 100
  * a preset of the paper reproduction (arXiv 2611.13545; scripts/reproduce.sh is a thin wrapper):
        scripts/compare.py --preset paper-quick     # the arms of configs/paper/, verdicts included
Seed s gives every arm the same prompts, sampling stream and rounding key (run.seed = s). Runs go
seed-major, --jobs at a time on one thread each, with progress lines and an ETA. Ctrl-C (or SIGTERM)
stops cleanly: the running trainers checkpoint and exit. Rerunning the same command resumes:
finished runs are kept and an interrupted one continues with `unstuck train --resume`. A folder
that holds a different sweep is refused. The sweep is recorded in <out>/sweep.json.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from .arms import (PAPER_ARMS, PRESETS, SweepError, mode_arms, paper_arms, phase_arms, published, resolved_config,
                   yaml_scalar)
from .runs import base_sha256

# The command lines of the pool, drift, phase and report (scripts/paper_*.py) run as their own processes.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(SCRIPTS)

# Keys of sweep.json that define the sweep: a rerun must match them to resume it.
IDENTITY_KEYS = ["steps", "seeds", "arms", "base", "eval_every", "eval_samples", "compute", "arm_overrides",
                 "overrides", "pool"]


def say(msg):
    print(f"[compare] {msg}", flush=True)


def fmt_time(seconds):
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_name(device):
    """The CPU (and on a CUDA sweep the GPU) a report's timing names: "2 cores of AMD EPYC"."""
    cpu = "an unnamed CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    text = f"{usable_cpus()} cores of {cpu}"
    if device == "cuda":
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines() if shutil.which("nvidia-smi") else []
        text += f" and {gpu[0] if gpu else 'an unnamed GPU'}"
    return text


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="your run config (YAML); the arms come from --modes")
    src.add_argument("--preset", choices=sorted(PRESETS), help="a paper-reproduction preset")
    ap.add_argument("--modes", help="comma-separated arms for --config: MODE or MODE@Kx, MODE in "
                    "fp32, fp16, bf16, bf16_sr, fp16_sr (e.g. fp16,bf16,bf16_sr,bf16@2x)")
    ap.add_argument("--arms", help="paper presets: space- or comma-separated arms of configs/paper/ "
                    f"(default: {' '.join(PAPER_ARMS)})")
    ap.add_argument("--k", type=float, help="paper presets: k of the BF16-RN @ k*x arm (bf16_lr_k; default the "
                    "preset's, else configs/paper/bf16_lr_k.yaml's 2), e.g. the calibrated k of an earlier report")
    ap.add_argument("--seeds", type=int, help="paired seeds 1..N (default: the preset's, or 3)")
    ap.add_argument("--steps", type=int, help="GRPO steps per run (default: the preset's or the config's)")
    ap.add_argument("--eval-every", type=int, help="steps between greedy evaluations")
    ap.add_argument("--eval-samples", type=int, help="test records per evaluation")
    ap.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (the reference arm keeps "
                    "all of them, for the drift analysis)")
    ap.add_argument("--compute", choices=["native", "fp32"], help="precision.compute of every arm (paper "
                    "presets: fp32, so weight rounding is the only difference; native: the secondary sweep)")
    ap.add_argument("--out", help="sweep folder (default runs/<preset> or runs/compare-<config name>)")
    ap.add_argument("--results", help="markdown report (default: <out>/RESULTS.md; docs/RESULTS.md for "
                    "paper-quick/paper-full)")
    ap.add_argument("--plots", help="plot folder (default <out>/plots; docs/results/<quick|full>)")
    ap.add_argument("--jobs", type=int, help="runs at a time (default: one per usable CPU)")
    ap.add_argument("--base", help="paper presets: base policy to start from (default: trained by SFT)")
    ap.add_argument("--pool", help="paper presets: prompt pool (JSONL) to train on instead of the one built "
                    "from the base by scripts/paper_pool.py")
    ap.add_argument("--no-build", action="store_true", help="do not (re)build build/unstuck")
    ap.add_argument("--no-drift", action="store_true", help="skip the drift histogram and retained-gain probe")
    ap.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--command-line", help=argparse.SUPPRESS)  # how the user called us (reproduce.sh)
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every arm (after the arm's own); with a "
                    "paper preset, optim.lr=X sets x (bf16_lr_k runs at k times it)")
    a = ap.parse_args(argv)
    if a.config and not a.modes:
        ap.error("--config needs --modes (e.g. --modes fp16,bf16,bf16_sr)")
    if a.preset and a.modes:
        ap.error("--modes goes with --config; a paper preset takes --arms")
    if a.config and (a.arms or a.base or a.pool or a.k is not None):
        ap.error("--arms, --base, --pool and --k go with a paper preset; with --config the arms come from --modes "
                 "(bf16@1.7x for k = 1.7), the base policy from the config's grpo.base_model and the prompts from "
                 "its data.train_path")
    if a.k is not None and not a.k > 0:
        ap.error(f"--k takes a positive LR multiple, got {a.k:g}")
    for name in ("seeds", "steps", "eval_every", "eval_samples", "checkpoint_every", "jobs"):
        v = getattr(a, name)
        if v is not None and v < 1:
            ap.error(f"--{name.replace('_', '-')} takes a positive integer, got {v}")
    for o in a.overrides:
        if "=" not in o:
            ap.error(f"override '{o}' is not key=value")
    return a


class Sweep:
    """The resolved description of a sweep: arms, seeds, cadence, folders."""

    def __init__(self, a, unstuck):
        self.unstuck = unstuck
        self.overrides = list(a.overrides)
        if a.preset:
            p = PRESETS[a.preset]
            self.preset = a.preset
            self.steps = a.steps or p["steps"]
            self.seeds = a.seeds or p["seeds"]
            self.eval_every = a.eval_every or p["eval_every"]
            self.eval_samples = a.eval_samples or p["eval_samples"]
            self.ckpt_every = a.checkpoint_every or p["checkpoint_every"]
            self.compute = a.compute or p.get("compute", "fp32")
            # the secondary sweep of a preset computing in FP32: its own folder and report
            native = "-native" if self.compute == "native" != p.get("compute", "fp32") else ""
            self.out = a.out or f"runs/{a.preset}{native}"
            phase = p.get("phase")
            self.arms = (phase_arms(phase["modes"], phase["lrs"], a.arms, phase.get("bits", (0,))) if phase
                         else paper_arms(a.arms, p["arms"]))
            for arm in self.arms:  # --quick-fp8: the BF16 arms in FP8, named so in every table
                mode = p.get("arm_modes", {}).get(arm.name)
                if mode:
                    arm.overrides.append(f"precision.mode={mode}")
                    arm.label = arm.label.replace("BF16", "FP8")
            # An optim.lr override sets x, as with --config: bf16_lr_k runs at k times it, a phase sweep refuses it.
            x = p.get("lr")
            lr_overrides = [o for o in self.overrides if o.startswith("optim.lr=")]
            if lr_overrides:
                if phase:
                    raise SweepError(f"{lr_overrides[-1]}: the phase sweep gives every arm the LR of its row "
                                     f"({', '.join(f'{lr:g}' for lr in phase['lrs'])}); --arms picks among them")
                value = lr_overrides[-1].split("=", 1)[1]
                try:
                    x = float(value)
                except ValueError:
                    x = float("nan")
                if not x > 0:
                    raise SweepError(f"{lr_overrides[-1]}: optim.lr must be a positive number, got '{value}'")
                self.overrides = [o for o in self.overrides if not o.startswith("optim.lr=")]
            self.set_lrs(x, a.k if a.k is not None else p.get("k"), a.k is not None, unstuck)
            self.phase = bool(phase)
            self.verdicts = not phase
            self.drift = p.get("drift", True) and not a.no_drift
            self.base, self.sft_args = a.base, None
            if not a.base:
                if p.get("smoke"):
                    self.base = os.path.join(self.out, "sft-smoke", "model")
                    self.sft_args = ["precision.threads=1", f"run.output_dir={self.out}", "run.name=sft-smoke",
                                     "sft.steps=30", "sft.eval_every=0", "sft.eval_samples=16", "sft.log_every=10"]
                else:  # one thread: on a shared machine a multi-threaded SFT slows down many times over
                    name = p.get("base_name", "sft-countdown")
                    self.base = f"runs/{name}/model"
                    self.sft_args = ["precision.threads=1", f"run.name={name}"] + p.get("sft", [])
            self.device = p.get("device")
            self.jobs = p.get("jobs")
            self.preset_overrides = p.get("train", [])
            self.probe_samples = p.get("probe_samples")
            # The prompt pool: built from the base (cached next to a base this driver trains, else in the
            # sweep folder) unless --pool gives one or an override sets data.train_path.
            self.pool_spec, self.pool, self.pool_full = None, a.pool, None
            if not a.pool and not any(o.startswith("data.train_path=") for o in self.overrides) and p.get("pool"):
                self.pool_spec = dict(p["pool"])
                folder = os.path.dirname(self.base) if self.sft_args is not None else os.path.join(self.out, "pool")
                s = self.pool_spec
                self.pool = os.path.join(folder, f"pool-n{s['records']}-k{s['k']}-{s['lo']:g}-{s['hi']:g}.jsonl")
                if s.get("size"):  # the first `size` prompts of that pool, in the sweep folder
                    self.pool_full = self.pool
                    self.pool = os.path.join(self.out, f"pool-first{s['size']}.jsonl")
            doc, plots = published(a.preset, native)
            self.results = a.results or doc or os.path.join(self.out, "RESULTS.md")
            self.plots = a.plots or plots or os.path.join(self.out, "plots")
            self.base_dtype = "bf16"
        else:
            self.preset = "compare"
            cfg = resolved_config(unstuck, a.config, self.overrides)
            self.lr = float(yaml_scalar(cfg, "optim", "lr"))
            self.steps = a.steps or int(yaml_scalar(cfg, "grpo", "steps"))
            self.seeds = a.seeds or 3
            self.eval_every = a.eval_every or max(1, self.steps // 4)
            self.eval_samples = a.eval_samples or int(yaml_scalar(cfg, "grpo", "eval_samples"))
            self.ckpt_every = a.checkpoint_every or self.eval_every
            self.compute = a.compute
            name = os.path.splitext(os.path.basename(a.config))[0]
            self.out = a.out or f"runs/compare-{name}"
            self.arms = mode_arms(a.modes, a.config, self.lr)
            self.verdicts = self.phase = False
            # with FP8 arms: on fp8_rn's grid (paper/drift.py). Not for LoRA: the drift is measured on the full
            # model's weights against the base, and a LoRA run's checkpoints hold its adapters.
            self.lora = int(yaml_scalar(cfg, "lora", "rank")) > 0
            self.drift = not a.no_drift and not self.lora
            self.device = self.jobs = self.probe_samples = None
            self.preset_overrides = []
            self.pool_spec = self.pool = self.pool_full = None
            self.base, self.sft_args = yaml_scalar(cfg, "grpo", "base_model"), None
            self.results = a.results or os.path.join(self.out, "RESULTS.md")
            self.plots = a.plots or os.path.join(self.out, "plots")
            self.base_dtype = "bf16" if yaml_scalar(cfg, "grpo", "round_base_to_bf16") == "true" else "fp32"
        self.reference = "fp16" if any(arm.name == "fp16" for arm in self.arms) else self.arms[0].name
        self.runs = [(arm, s) for s in range(1, self.seeds + 1) for arm in self.arms]

    def set_lrs(self, x, k, k_given, unstuck):
        """The LR x for every arm (an optim.lr override, else the preset's `lr`, else configs/paper/bf16.yaml's)
        and the bf16_lr_k arm at k times it (--k, else the preset's `k`, else the arm's own multiple, 2).
        --k without that arm is refused."""
        lr_k = next((arm for arm in self.arms if arm.name == "bf16_lr_k"), None)
        if k_given and lr_k is None:
            raise SweepError("--k sets the LR of the bf16_lr_k arm (BF16-RN @ k*x), which this sweep does not run")
        if x is None and (k is None or lr_k is None):
            return  # every arm at its own config's LR
        config_lr = lambda path: float(yaml_scalar(resolved_config(unstuck, path, []), "optim", "lr"))
        x_config = config_lr("configs/paper/bf16.yaml")
        for arm in self.arms:
            if arm is not lr_k and x is not None:
                arm.overrides.append(f"optim.lr={x!r}")
        if lr_k is not None:
            if k is None:
                k = config_lr(lr_k.config) / x_config
            else:
                lr_k.label = f"BF16-RN @ k*x (k = {k:g})"
            lr_k.overrides.append(f"optim.lr={k * (x or x_config):.10g}")  # 10 digits: no float noise (8.5e-06)

    def run_dir(self, arm, seed):
        return os.path.join(self.out, arm.name, f"seed{seed}")

    def is_done(self, arm, seed):
        return os.path.exists(os.path.join(self.run_dir(arm, seed), "checkpoints", f"step_{self.steps:08d}",
                                           "manifest.json"))

    def steps_done(self, arm, seed):
        try:
            with open(os.path.join(self.run_dir(arm, seed), "metrics.jsonl")) as f:
                return sum(1 for line in f if line.strip())
        except FileNotFoundError:
            return 0

    def record(self, command, commit):
        return {"preset": self.preset, "steps": self.steps, "seeds": self.seeds,
                "arms": " ".join(arm.name for arm in self.arms),
                "labels": {arm.name: arm.label for arm in self.arms},
                "arm_overrides": {arm.name: [arm.config] + arm.overrides for arm in self.arms},
                "reference": self.reference, "verdicts": self.verdicts, "base": self.base,
                "base_dtype": self.base_dtype, "eval_every": self.eval_every, "eval_samples": self.eval_samples,
                "checkpoint_every": self.ckpt_every, "compute": self.compute or "as configured",
                "overrides": self.overrides, "pool": self.pool_spec if self.pool_spec else self.pool,
                "pool_path": self.pool, "phase": self.phase, "command": command, "commit": commit,
                "base_sha256": base_sha256({"base": self.base})}

    def train_args(self, arm, seed):
        d = self.run_dir(arm, seed)
        ckpts = os.path.join(d, "checkpoints")
        if os.path.isdir(ckpts) and any(os.path.exists(os.path.join(ckpts, c, "manifest.json"))
                                        for c in os.listdir(ckpts)):
            return ["train", "--resume", d]
        shutil.rmtree(d, ignore_errors=True)  # stopped before its first checkpoint: nothing to keep
        # The reference arm keeps every checkpoint: the drift analysis reads its weights at the
        # steps where it reaches 50% and 100% of its gain.
        keep = self.steps // self.ckpt_every + 2 if arm.name == self.reference and self.drift else 2
        args = ["train", "--config", arm.config] + arm.overrides + [
            f"run.output_dir={os.path.join(self.out, arm.name)}", f"run.name=seed{seed}", f"run.seed={seed}",
            f"grpo.steps={self.steps}", f"grpo.eval_every={self.eval_every}",
            f"grpo.eval_samples={self.eval_samples}", f"grpo.checkpoint_every={self.ckpt_every}",
            f"grpo.keep_checkpoints={keep}", "precision.threads=1"]
        if self.base and self.preset != "compare":
            args.append(f"grpo.base_model={self.base}")
        if self.compute:
            args.append(f"precision.compute={self.compute}")
        if self.pool:
            args.append(f"data.train_path={self.pool}")
        if self.device:
            args.append(f"run.device={self.device}")
        return args + self.preset_overrides + self.overrides


def git_commit():
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "include",
                                "configs", "scripts", "CMakeLists.txt"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return commit + (" + local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_record(sweep, command):
    os.makedirs(sweep.out, exist_ok=True)
    path = os.path.join(sweep.out, "sweep.json")
    new = sweep.record(command, git_commit())
    if os.path.exists(path):
        old = json.load(open(path))
        diff = [k for k in IDENTITY_KEYS if old.get(k) != new.get(k)]
        if diff:
            raise SweepError(f"{sweep.out} holds a different sweep ("
                             + "; ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in diff)
                             + "); pick another --out or delete it")
    tmp = path + ".new"
    with open(tmp, "w") as f:
        json.dump(new, f, indent=1)
    os.replace(tmp, path)


def build(no_build, unstuck):
    if no_build:
        return
    if not os.path.exists(unstuck):
        say("setting up and building (scripts/setup.sh)")
        subprocess.run([os.path.join(ROOT, "scripts", "setup.sh")], check=True)
        return
    say("building (incremental)")
    log = os.path.join(os.path.dirname(unstuck), "compare-build.log")
    with open(log, "w") as f:
        r = subprocess.run(["cmake", "--build", os.path.dirname(unstuck), "--target", "unstuck", "-j",
                            str(usable_cpus())], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.stderr.write("".join(open(log).readlines()[-30:]))
        raise SweepError(f"the build failed (full log: {log})")


def require_cuda(unstuck, preset):
    """Refuses a CUDA preset where `unstuck --version` reports no usable CUDA device."""
    r = subprocess.run([unstuck, "--version"], capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("CUDA kernels:")), "CUDA kernels: unknown")
    m = re.search(r"(\d+) usable device", line)
    if not m or int(m.group(1)) == 0:
        raise SweepError(f"the preset {preset} runs on a CUDA device and this machine has none usable "
                         f"(`{unstuck} --version`: {line.strip()}); use --quick on the CPU")


def prepare_base(sweep):
    """Trains the paper's base policy once (SFT) and evaluates the base; returns a timing phrase."""
    note = "the base policy given by --base"
    if sweep.sft_args is not None:
        if not os.path.exists(os.path.join(sweep.base, "sft_result.json")):
            say(f"training the base policy by SFT (configs/sft/countdown.yaml) -> {sweep.base}")
            subprocess.run([sweep.unstuck, "sft", "--config", "configs/sft/countdown.yaml"] + sweep.sft_args,
                           check=True)
            note = "including the SFT of the base policy"
        else:
            say(f"reusing the base policy {sweep.base} (delete it to retrain)")
            note = "the base policy reused"
    if not os.path.exists(os.path.join(sweep.base, "model.safetensors")):
        raise SweepError(f"base policy '{sweep.base}' has no model.safetensors")
    out = os.path.join(sweep.out, "base_eval.json")
    if not os.path.exists(out):
        say(f"evaluating the base policy (greedy, {sweep.base_dtype} compute, {sweep.eval_samples} test records)")
        r = subprocess.run([sweep.unstuck, "eval", "--model", sweep.base, "--samples", str(sweep.eval_samples),
                            "--dtype", sweep.base_dtype, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SweepError(f"evaluating the base policy failed: {r.stderr.strip()}")
        j = json.loads(r.stdout)
        j["dtype"] = sweep.base_dtype
        with open(out + ".tmp", "w") as f:
            json.dump(j, f)
        os.replace(out + ".tmp", out)
    return note


def prepare_pool(sweep):
    """Builds the prompt pool from the base (scripts/paper_pool.py) unless it is cached for this base;
    adds its statistics to sweep.json. Returns a timing phrase (None when no pool is built)."""
    if not sweep.pool_spec:
        if sweep.pool and not os.path.exists(sweep.pool):
            raise SweepError(f"--pool {sweep.pool}: no such file")
        return None
    s, pool = sweep.pool_spec, sweep.pool_full or sweep.pool
    meta = pool[:-len(".jsonl")] + ".json"
    model = os.path.join(sweep.base, "model.safetensors")
    st = os.stat(model)
    base_id = {"model": model, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    stats = json.load(open(meta)) if os.path.exists(meta) and os.path.exists(pool) else None
    note = "the prompt pool reused"
    if not stats or stats.get("base_id") != base_id:
        say(f"building the prompt pool: {s['records']} training prompts x {s['k']} samples of the base, kept when "
            f"solved {s['lo']:g}-{s['hi']:g} of the time -> {pool}")
        t0 = time.time()
        cmd = [sys.executable, os.path.join(SCRIPTS, "paper_pool.py"), "--model", sweep.base, "--records",
               str(s["records"]), "--k", str(s["k"]), "--lo", str(s["lo"]), "--hi", str(s["hi"]), "--unstuck",
               sweep.unstuck, "--threads", "1", "--device", sweep.device or "cpu", "--out", pool, "--json", meta + ".new"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SweepError(f"building the prompt pool failed: {(r.stderr or r.stdout).strip()}")
        stats = json.load(open(meta + ".new"))
        stats["base_id"], stats["seconds"] = base_id, round(time.time() - t0, 1)
        with open(meta + ".new", "w") as f:
            json.dump(stats, f, indent=1)
        os.replace(meta + ".new", meta)
        note = f"building the prompt pool ({fmt_time(stats['seconds'])})"
    say(f"prompt pool {pool}: kept {stats['kept']} of {stats['records']} prompts (base's mean solve rate "
        f"{stats['mean_solve_rate']:.3f}, in the pool {stats['kept_mean_solve_rate']:.3f})")
    if s.get("size"):  # the sweep trains on the first `size` prompts of the pool (a pool that recurs often)
        lines = open(pool).readlines()
        if len(lines) < s["size"]:
            raise SweepError(f"the preset trains on the first {s['size']} prompts of the pool, but {pool} "
                             f"kept only {len(lines)}")
        with open(sweep.pool + ".new", "w") as f:
            f.writelines(lines[:s["size"]])
        os.replace(sweep.pool + ".new", sweep.pool)
        stats = dict(stats, size=s["size"], full_pool=pool)
        say(f"the sweep trains on its first {s['size']} prompts: {sweep.pool}")
    path = os.path.join(sweep.out, "sweep.json")
    record = json.load(open(path))
    record["pool_stats"] = {k: v for k, v in stats.items() if k != "base_id"}
    with open(path + ".new", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".new", path)
    return note


def run_summary(path):
    m = [json.loads(line) for line in open(path) if line.strip()]
    e = [x["eval_accuracy"] for x in m if "eval_accuracy" in x]
    tail = m[-10:]
    return (f"reward {sum(x['reward_mean'] for x in tail) / len(tail):.3f}, eval acc "
            f"{e[-1] if e else float('nan'):.3f}, KL {m[-1]['kl_ref_exact']:.2e}, sticking {m[-1]['sticking_frac']:.2f}")


class Scheduler:
    """Runs the sweep's unfinished runs, `jobs` at a time; a signal stops them cleanly."""

    def __init__(self, sweep, jobs, progress_every):
        self.sweep, self.jobs, self.progress_every = sweep, jobs, progress_every
        self.running = {}  # Popen -> (arm, seed)
        self.stopping = False

    def on_signal(self, signum, frame):
        if not self.stopping:
            say("stopping: the running arms checkpoint and exit; rerun the same command to resume")
        self.stopping = True
        self.stop_all()

    def stop_all(self):
        for p in self.running:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # the trainer finishes its step, checkpoints, exits

    def start(self, arm, seed):
        s = self.sweep
        os.makedirs(os.path.join(s.out, arm.name), exist_ok=True)
        args = s.train_args(arm, seed)
        log = open(s.run_dir(arm, seed) + ".console.log", "a")
        log.write(f"$ {shlex.join([s.unstuck] + args)}\n")
        log.flush()
        # A session of its own: a Ctrl-C in the terminal reaches only us, and we stop the trainers.
        p = subprocess.Popen([s.unstuck] + args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.running[p] = (arm, seed)

    def run(self, t_sweep):
        s = self.sweep
        total = len(s.runs)
        done = sum(s.is_done(arm, seed) for arm, seed in s.runs)
        resumed = done
        if done:
            say(f"{done} of {total} runs already finished in {s.out}")
        say(f"sweep: {total} runs (arms: {' '.join(arm.name for arm in s.arms)}; seeds 1..{s.seeds}; {s.steps} "
            f"steps each; compute {s.compute or 'as configured'}; {self.jobs} at a time, one thread each)")
        t_runs = time.time()
        steps_at_start = sum(s.steps_done(arm, seed) for arm, seed in s.runs)
        pending = [r for r in s.runs if not s.is_done(*r)]
        last_status = time.time()
        old = {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                while not self.stopping and len(self.running) < self.jobs and pending:
                    self.start(*pending.pop(0))
                if not self.running:
                    break
                time.sleep(0.5)
                for p in [p for p in self.running if p.poll() is not None]:
                    arm, seed = self.running.pop(p)
                    log = s.run_dir(arm, seed) + ".console.log"
                    # Our own SIGTERM can land after the trainer has put back the default handler (its
                    # run was ending): that run stopped, it did not fail; a rerun resumes or keeps it.
                    stopped_by_us = self.stopping and p.returncode == -signal.SIGTERM
                    if p.returncode != 0 and not stopped_by_us:
                        self.stopping = True
                        self.stop_all()
                        for q in self.running:
                            q.wait()
                        sys.stderr.write("".join(open(log).readlines()[-15:]))
                        raise SweepError(f"run {arm.name} seed {seed} failed (exit {p.returncode}); log: {log}")
                    if s.is_done(arm, seed):
                        done += 1
                        summary = run_summary(os.path.join(s.run_dir(arm, seed), "metrics.jsonl"))
                        say(f"[{done}/{total}] {arm.name} seed {seed} done: {summary}")
                    elif not self.stopping:  # stopped by a signal of its own: stop the sweep too
                        self.stopping = True
                        self.stop_all()
                        say(f"run {arm.name} seed {seed} stopped before its last step (log: {log})")
                now = time.time()
                if now - last_status >= self.progress_every and self.running:
                    last_status = now
                    total_done = sum(s.steps_done(arm, seed) for arm, seed in s.runs)
                    new = total_done - steps_at_start
                    eta = fmt_time((now - t_runs) * (total * s.steps - total_done) / new) if new > 0 else "?"
                    running = " ".join(f"{arm.name}/seed{seed} step {s.steps_done(arm, seed)}/{s.steps}"
                                       for arm, seed in self.running.values())
                    say(f"progress: {total_done}/{total * s.steps} steps, {fmt_time(now - t_sweep)} elapsed, "
                        f"ETA {eta} | {running}")
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
        return done, resumed


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    for name in ("config", "out", "results", "plots", "base"):  # the user's paths, from the checkout's root
        p = getattr(a, name)
        if p:
            p = os.path.abspath(p)
            setattr(a, name, os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p)
    os.chdir(ROOT)
    command = a.command_line or "scripts/compare.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    unstuck = os.path.join(os.environ.get("UNSTUCK_BUILD_DIR", "build"), "unstuck")
    try:
        build(a.no_build, unstuck)
        if not os.path.exists(unstuck):
            raise SweepError(f"{unstuck} not found; run scripts/setup.sh first (or drop --no-build)")
        sweep = Sweep(a, unstuck)
        if sweep.device == "cuda":
            require_cuda(unstuck, a.preset)
        write_record(sweep, command)
        t_sweep = time.time()
        base_note = prepare_base(sweep)
        pool_note = prepare_pool(sweep)
        if pool_note:
            base_note += ", " + pool_note
        sched = Scheduler(sweep, a.jobs or sweep.jobs or usable_cpus(), a.progress_every)
        done, resumed = sched.run(t_sweep)
        total = len(sweep.runs)
        if sched.stopping:
            say(f"interrupted after {done} of {total} runs; rerun `{command}` to resume")
            return 130
        elapsed = time.time() - t_sweep
        timing = f"{int(elapsed) // 60} min {int(elapsed) % 60} s on {machine_name(sweep.device)}, {base_note}"
        if resumed:
            timing = f"resumed with {resumed} of {total} runs done; this invocation took {timing}"
        say(f"all {total} runs finished in {fmt_time(elapsed)}; writing plots ({sweep.plots}) and {sweep.results}")
        py = sys.executable
        if sweep.phase:  # the phase diagram, with the runs of the main sweep of the same base policy
            extra = [d for d in ("runs/paper-quick", "runs/paper-gpu") if os.path.exists(os.path.join(d, "sweep.json"))
                     and json.load(open(os.path.join(d, "sweep.json"))).get("base") == sweep.base]
            subprocess.run([py, os.path.join(SCRIPTS, "paper_phase.py"), "--sweeps", sweep.out] + extra
                           + ["--results", sweep.results, "--plots", sweep.plots, "--timing", timing], check=True)
            say(f"done: {sweep.results}")
            return 0
        if getattr(sweep, "lora", False) and not a.no_drift:
            say("LoRA arms: no drift histogram (it measures full-model weights; sticking per adapter is in metrics.jsonl, "
                "scripts/lora_sticking.py tabulates it)")
        if sweep.drift:
            probe = (["--no-probe"] if sweep.probe_samples == 0 else
                     ["--eval-samples", str(sweep.probe_samples)] if sweep.probe_samples else [])
            subprocess.run([py, os.path.join(SCRIPTS, "paper_drift.py"), "--sweep", sweep.out, "--plots", sweep.plots,
                            "--unstuck", unstuck] + probe, check=True)
        subprocess.run([py, os.path.join(SCRIPTS, "paper_report.py"), "--sweep", sweep.out, "--results",
                        sweep.results, "--plots", sweep.plots, "--timing", timing], check=True)
        say(f"done: {sweep.results}")
        return 0
    except SweepError as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"compare.py: error: {shlex.join(map(str, e.cmd))} failed (exit {e.returncode})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside the runs (build, SFT of the base, report)
        say(f"interrupted; rerun `{command}` to continue")
        return 130

