#!/usr/bin/env python3
"""The GPU at the size people train (issue 27): `scripts/gpu_check.sh --scale` runs this on the GPU
machine after its device checks, in what is left of the lease's budget. For each shape (Qwen2.5-0.5B,
then Qwen2.5-1.5B: the public configs, random weights drawn by transformers on the device, the real
vocabulary) it measures, each part in its own processes and in this order, so that a budget that
runs out still leaves the first parts' figures:

  generate  `unstuck bench generate --model DIR --device cuda` at 256 prompts x 512 new tokens (no
            early stop; FP32 and BF16) against transformers' `generate` on the same model, batch,
            prompt length and dtype (BF16); tokens/s, their ratio, BF16 against FP32, and the
            fraction of the HBM-bandwidth limit: the bytes one decode step must read (the weights in
            the compute dtype once, plus the filled KV slots of every row, averaged over the steps)
            per step time, against a device-to-device copy's measured bandwidth (bytes read and
            written per second).
  grpo      `unstuck train` (configs/examples/gsm8k_qwen2.5.yaml, bf16_sr) against TRL's GRPOTrainer
            (transformers generation, BF16 autocast) on the same directory, data and work (16 prompts
            x 8 completions x 256 new tokens, one optimizer step per batch, no KL; scripts/bench_scale.py's
            settings): seconds per step after the first and its rollout / update split, the device's
            peak allocated memory on both sides, and the training phase's MFU: 6 x params per useful
            trained token (no padding) over the forward+backward seconds, against the device's dense
            BF16 peak.
  plan7b    the memory plan of a Qwen2.5-7B-shaped full-parameter GRPO run on this device
            (`unstuck config check`, on a model directory whose weight file has the real header and
            no data: a sparse file), the same with precision.offload: optimizer and with LoRA rank
            16; refused or not, with the plan.
  offload   one Qwen2.5-7B-shaped full-parameter GRPO run with precision.offload: optimizer (random
            weights drawn on the device; 4 prompts x 4 completions x 128 new tokens, 2 steps): the
            seconds per step and its rollout / forward+backward / optimizer split, the device's peak
            and the plan's device and host bytes. Last, as the longest part (the rehearsal runs it on
            the 0.5B shape at 2 layers).

Writes OUT/scale.json (updated after every part) and prints a summary; exits 0 when every part ran
(a part that did not fit the budget is named in the JSON's "skipped"), 1 when one failed.

  scripts/gpu_scale.py --unstuck build/unstuck --out /tmp/scale                  # on the GPU machine
  scripts/gpu_scale.py --unstuck build/unstuck --out /tmp/scale --rehearse       # here: 2 layers, tiny work, CPU
  scripts/gpu_scale.py --table run1/scale.json run2/scale.json   # the rollout table of saved reports (markdown)
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_scale  # noqa: E402
import scale_standin  # noqa: E402

H200_BF16_DENSE_TFLOPS = 989.0  # NVIDIA's H200 SXM datasheet, dense BF16 tensor cores


def log(msg):
    print(f"[gpu_scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def copy_bandwidth(device):
    """Bytes read + written per second by a 2 GiB device-to-device copy (median of 10 after 3 warm-ups)."""
    import torch
    n = (1 << 31) if device == "cuda" else (1 << 26)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * n / times[len(times) // 2]


def decode_bytes_per_step(cfg, params, dtype_bytes, batch, prompt, new):
    """Bytes a decode step must read: every weight once, plus each row's filled KV slots in every
    layer (mean over the steps: prompt + (new + 1) / 2 slots)."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_per_slot = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * hd * dtype_bytes
    return params * dtype_bytes + batch * (prompt + (new + 1) / 2) * kv_per_slot


def run_json(cmd, logfile, timeout, env=None):
    """Runs cmd with its output in `logfile`; returns the last JSON line it printed."""
    cmd = [str(c) for c in cmd]
    with open(logfile, "w") as out:
        p = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    if p.returncode != 0:  # the message is at the top of a libtorch error, its stack after it
        text = Path(logfile).read_text()
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{text[:1500]}\n...\n{text[-800:]}")
    return bench_scale.last_json(logfile)


class Scale:
    def __init__(self, a):
        self.a = a
        self.work = Path(tempfile.mkdtemp(prefix="unstuck_gpu_scale_"))
        self.t0 = time.time()
        self.report = {"device": a.device, "rehearse": a.rehearse, "parts": {}, "skipped": [], "failed": [],
                       "seconds": {}}
        self.out = Path(a.out)
        self.out.mkdir(parents=True, exist_ok=True)

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    def save(self):
        self.report["elapsed_s"] = time.time() - self.t0
        (self.out / "scale.json").write_text(json.dumps(self.report, indent=1))

    def part(self, name, need_s, fn):
        """Runs fn() when at least need_s seconds of the budget are left; records its result and time."""
        if name in self.a.skip:
            log(f"{name}: skipped (--skip)")
            return None
        if self.left() < need_s:
            log(f"{name}: skipped ({self.left():.0f} s left of the budget, it needs about {need_s:.0f} s)")
            self.report["skipped"].append(name)
            self.save()
            return None
        log(f"{name}: start ({self.left():.0f} s left)")
        t0 = time.time()
        try:
            result = fn()
        except (Exception, SystemExit) as e:  # one part's failure (bench_scale exits) leaves the others' figures
            log(f"{name}: FAILED: {e}")
            self.report["failed"].append({"part": name, "error": str(e)[-3000:]})
            result = None
        self.report["seconds"][name] = round(time.time() - t0, 1)
        if result is not None:
            self.report["parts"][name] = result
            shown = {k: v for k, v in result.items() if k != "config"} if isinstance(result, dict) else result
            log(f"{name}: done in {time.time() - t0:.0f} s: {json.dumps(shown)[:1500]}")
        self.save()
        return result

    # ---- the parts -------------------------------------------------------------------------------

    def standin(self, shape):
        s = scale_standin.build(str(self.work / shape), shape, self.a.layers, records=64, dtype="bf16",
                                device=self.a.device)
        s["config"] = json.loads(Path(s["model"], "config.json").read_text())
        return s

    def generate(self, shape, s):
        """Each rollout.decode mode in its own process (a failure of one leaves the other's figures)."""
        a = self.a
        B, P, N = a.gen_batch, a.gen_prompt, a.gen_tokens
        bw = self.report["copy_bandwidth_bytes_per_s"]
        res = {"sequences": B, "prompt_tokens": P, "new_tokens": N, "params": s["params"],
               "copy_bandwidth_bytes_per_s": bw, "errors": {}}
        # auto: the CUDA graphs on a GPU (the dynamic steps on the CPU); dynamic: op by op over the filled slots.
        for mode in a.generate_modes:
            try:
                ours = run_json([a.unstuck, "bench", "generate", "--json", "--model", s["model"], "--dtype", "both",
                                 "--sequences", B, "--prompt-tokens", P, "--new-tokens", N, "--repeats",
                                 a.gen_repeats, "--device", a.device, "--no-recompute", "--decode", mode],
                                self.work / f"{shape}_unstuck_generate_{mode}.log", timeout=max(30, self.left()))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                res["errors"][mode] = str(e)[-2000:]
                log(f"{shape}: bench generate --decode {mode} failed: {str(e)[-600:]}")
                continue
            for dt, nbytes in (("bf16", 2), ("fp32", 4)):
                step_s = ours[dt]["kv_seconds"] / N
                need = decode_bytes_per_step(s["config"], s["params"], nbytes, B, P, N)
                res[f"unstuck_{dt}_{mode}_tokens_per_s"] = ours[dt]["kv_tokens_per_s"]
                res[f"unstuck_{dt}_{mode}_step_ms"] = 1e3 * step_s
                res[f"unstuck_{dt}_bytes_per_step"] = need
                res[f"unstuck_{dt}_{mode}_bandwidth_fraction"] = need / step_s / bw
        # Kept now: a failure or time-out of the transformers run below leaves these figures in scale.json.
        self.report["parts"][f"{shape}/generate"] = res
        self.save()
        if shape in a.skip_hf:  # measured in an earlier run of the same work on this machine: not again
            return res
        theirs = run_json([sys.executable, str(ROOT / "scripts/bench_scale.py"), "--worker", "hf_generate",
                           "--model", s["model"], "--mode", "bf16", "--threads", "0", "--device", a.device,
                           "--sequences", B, "--new-tokens", N, "--prompt-tokens", P, "--repeats", 1],
                          self.work / f"{shape}_hf_generate.log", timeout=max(30, self.left()))
        hf = sorted(theirs["tokens_per_s"])[len(theirs["tokens_per_s"]) // 2]
        res["transformers_bf16_tokens_per_s"] = hf
        for mode in ("auto", "dynamic"):
            if f"unstuck_bf16_{mode}_tokens_per_s" in res:
                res[f"ratio_{mode}_unstuck_over_transformers_bf16"] = res[f"unstuck_bf16_{mode}_tokens_per_s"] / hf
                res[f"ratio_{mode}_bf16_over_fp32"] = (res[f"unstuck_bf16_{mode}_tokens_per_s"] /
                                                      res[f"unstuck_fp32_{mode}_tokens_per_s"])
        if "unstuck_bf16_auto_tokens_per_s" in res and "unstuck_bf16_dynamic_tokens_per_s" in res:
            for dt in ("bf16", "fp32"):
                res[f"{dt}_auto_over_dynamic"] = (res[f"unstuck_{dt}_auto_tokens_per_s"] /
                                                  res[f"unstuck_{dt}_dynamic_tokens_per_s"])
        return res

    def grpo(self, shape, s):
        a = self.a
        args = argparse.Namespace(unstuck=a.unstuck, threads=0, device=a.device, work=a.grpo_work, lora=0,
                                  unstuck_args=[], check_export=False, keep=False)
        bench = bench_scale.Bench(args, self.work, s)
        res = {"work": bench_scale.WORK[a.grpo_work], "params": s["params"], "peak_tflops": a.peak_tflops}
        try:
            ours = bench.unstuck_train("bf16_sr", shape)
        except SystemExit as e:  # the CUDA graphs' rollouts failed: the op-by-op steps, so the rest is measured
            res["error_auto"] = str(e)[-2000:]
            log(f"{shape}: unstuck train failed, again with rollout.decode=dynamic: {str(e)[-600:]}")
            args.unstuck_args = ["rollout.decode=dynamic"]
            ours = bench.unstuck_train("bf16_sr", shape + "_dynamic")
            res["rollout_decode"] = "dynamic"
        metrics = [json.loads(l) for l in Path(ours["run_dir"], "metrics.jsonl").read_text().splitlines()]
        timed = metrics[1:] or metrics
        fb = sum(m["forward_backward_seconds"] for m in timed) / len(timed)
        # Useful trained tokens: the positions the forwards computed less their padding.
        train_tokens = sum(m["train_tokens"] - m.get("train_padding_tokens", 0) for m in timed) / len(timed)
        res.update({"unstuck": {k: ours[k] for k in ("step_s", "rollout_s", "update_s", "completion_len", "plan_bytes")},
                    "unstuck_device_peak_bytes": max(p or 0 for p in ours["step_peaks"]),
                    "unstuck_forward_backward_s": fb, "unstuck_train_tokens": train_tokens,
                    "unstuck_training_mfu": 6 * s["params"] * train_tokens / fb / (a.peak_tflops * 1e12)})
        shutil.rmtree(ours["run_dir"], ignore_errors=True)
        if not a.no_trl:
            try:
                import trl  # noqa: F401
                import datasets  # noqa: F401
            except ImportError as e:
                res["trl"] = f"not run: {e}"
                return res
            theirs = bench.trl_train("bf16", shape)
            res["trl"] = {k: theirs[k] for k in ("step_s", "rollout_s", "update_s", "completion_len",
                                                  "device_peak_bytes")}
            med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
            res["ratio_step_trl_over_unstuck"] = med(theirs["step_s"]) / med(ours["step_s"])
            res["ratio_rollout_trl_over_unstuck"] = med(theirs["rollout_s"]) / med(ours["rollout_s"])
            res["ratio_update_trl_over_unstuck"] = med(theirs["update_s"]) / med(ours["update_s"])
            if theirs["device_peak_bytes"]:
                res["ratio_memory_unstuck_over_trl"] = res["unstuck_device_peak_bytes"] / theirs["device_peak_bytes"]
        return res

    def plan7b(self):
        s = header_only_standin(self.work / "qwen2.5-7b", "qwen2.5-7b")
        out = {"params": s["params"]}
        for name, extra in (("full", []), ("offload", ["precision.offload=optimizer"]),
                            ("lora16", ["lora.rank=16", "lora.alpha=32"])):
            cmd = [self.a.unstuck, "config", "check", "--json", "--config",
                   str(ROOT / "configs/examples/gsm8k_qwen2.5.yaml"), f"grpo.base_model={s['model']}",
                   f"data.train_path={s['data']}/train.jsonl", f"data.test_path={s['data']}/test.jsonl",
                   f"run.output_dir={self.work / 'runs'}", f"run.device={self.a.device}", "grpo.prompts_per_step=16",
                   "rollout.max_new_tokens=512", "model.activation_checkpointing=true"] + extra
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            plan = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode == 0 and plan:
                out[name] = {"fits": True, "memory": json.loads(plan[-1]).get("memory")}
            else:
                out[name] = {"fits": False, "rc": p.returncode, "refusal": p.stderr.strip()[-2500:],
                             "stdout": p.stdout.strip()[-1500:]}
        return out

    def offload_step(self, shape):
        a = self.a
        s = self.standin(shape)
        args = argparse.Namespace(unstuck=a.unstuck, threads=0, device=a.device, work=a.offload_work, lora=0,
                                  unstuck_args=["precision.offload=optimizer"], check_export=False, keep=False)
        ours = bench_scale.Bench(args, self.work, s).unstuck_train("bf16_sr", shape + "_offload")
        run_dir = Path(ours["run_dir"])
        metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
        plan = json.loads((run_dir / "run.json").read_text()).get("memory_plan", {})
        shutil.rmtree(Path(s["model"]).parent, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        pick = lambda key: [m.get(key) for m in metrics]  # noqa: E731
        return {"shape": shape, "params": s["params"], "work": bench_scale.WORK[a.offload_work],
                "step_s": pick("step_seconds"), "rollout_s": pick("rollout_seconds"),
                "forward_backward_s": pick("forward_backward_seconds"), "optimizer_s": pick("optimizer_seconds"),
                "device_peak_bytes": max(p or 0 for p in ours["step_peaks"]),
                "plan_device_peak_bytes": plan.get("peak_bytes"), "plan_host_bytes": plan.get("host_bytes"),
                "process_peak_rss_bytes": ours["peak_bytes"]}

    def run(self):
        a = self.a
        self.report["machine"] = machine(a.device)
        bw = self.part("copy_bandwidth", 5, lambda: copy_bandwidth(a.device))
        self.report["copy_bandwidth_bytes_per_s"] = bw
        # Order: every shape's rollout first, the 7B plan, then the GRPO steps from the largest shape
        # down (the training MFU target is the 1.5B shape's), so a short budget keeps the headline figures.
        standins = {}
        for i, shape in enumerate(a.shapes):
            s = self.part(f"{shape}/standin", 20 * (1 + i), lambda: self.standin(shape))
            if s:
                standins[shape] = s
                self.part(f"{shape}/generate", a.need_generate * (1 + i), lambda: self.generate(shape, s))
            if i == 0:
                self.part("qwen2.5-7b/plan", 15, self.plan7b)
        for i, shape in reversed(list(enumerate(a.shapes))):
            if shape in standins:
                self.part(f"{shape}/grpo", a.need_grpo * (1 + i), lambda: self.grpo(shape, standins[shape]))
                shutil.rmtree(Path(standins[shape]["model"]).parent, ignore_errors=True)
        self.part(f"{a.offload_shape}/offload", a.need_offload, lambda: self.offload_step(a.offload_shape))
        self.save()
        shutil.rmtree(self.work, ignore_errors=True)
        return 1 if self.report["failed"] else 0


def machine(device):
    import torch
    m = {"torch": torch.__version__, "cpu": bench_scale.cpu_name(), "cpus": os.cpu_count()}
    try:
        import transformers
        m["transformers"] = transformers.__version__
        import trl
        m["trl"] = trl.__version__
    except ImportError:
        pass
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        m.update(gpu=p.name, gpu_memory_bytes=p.total_memory, sms=p.multi_processor_count)
    return m


def header_only_standin(out, shape):
    """A model directory of `shape` whose model.safetensors has the real header (names, shapes, BF16)
    and no data (a sparse file of the right size): enough for the pre-flight and the memory plan."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    spec = dict(scale_standin.SHAPES[shape])
    family = spec.pop("family")
    model_dir, data_dir = Path(out, "model"), Path(out, "data")
    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    recs = scale_standin.gsm8k_records(24)
    for name, part in (("train", recs[:16]), ("test", recs[16:])):
        (data_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    template_name, specials, entries = scale_standin.FAMILY_TOKENS[family]
    corpus = Path(out, "corpus.txt")
    corpus.write_text("".join(r["question"] + "\n" + r["answer"] + "\n" for r in recs) + scale_standin.SYSTEM_PROMPT)
    tok = scale_standin.train_tokenizer(str(model_dir), str(corpus), specials, vocab_size=1024)
    ids = {k: tok.token_to_id(v) for k, v in entries.items() if v}
    config = AutoConfig.for_model(family, **spec, bos_token_id=ids.get("bos_token", ids["pad_token"]),
                                  eos_token_id=ids["eos_token"], pad_token_id=ids["pad_token"])
    config.use_sliding_window = False
    config.save_pretrained(model_dir)
    template = json.loads(Path(scale_standin.CASES).read_text())["templates"][template_name]
    (model_dir / "tokenizer_config.json").write_text(json.dumps({**entries, "chat_template": template}))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in model.state_dict().items():
        n = t.numel() * 2
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(model_dir / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)  # sparse: no data written
    return {"params": sum(p.numel() for p in model.parameters()), "model": str(model_dir), "data": str(data_dir)}


def summary(rep):
    lines = [f"Scale on {rep['machine'].get('gpu', rep['device'])} ({rep['machine']['cpu']}), torch "
             f"{rep['machine']['torch']}, transformers {rep['machine'].get('transformers')}, trl {rep['machine'].get('trl')}"]
    bw = rep.get("copy_bandwidth_bytes_per_s")
    if bw:
        lines.append(f"device-to-device copy: {bw / 1e12:.2f} TB/s (read + write)")
    for name, r in rep["parts"].items():
        if name.endswith("/generate"):
            line = f"{name}: {r['sequences']} x {r['new_tokens']} tokens after {r['prompt_tokens']}:"
            for mode in ("auto", "dynamic"):
                if f"unstuck_bf16_{mode}_tokens_per_s" not in r:
                    line += f" [{mode}: failed]" if mode in r.get("errors", {}) else ""
                    continue
                line += (f" [rollout.decode {mode}: bf16 {r[f'unstuck_bf16_{mode}_tokens_per_s']:.0f} tok/s "
                         f"({r[f'unstuck_bf16_{mode}_step_ms']:.2f} ms/step, "
                         f"{100 * r[f'unstuck_bf16_{mode}_bandwidth_fraction']:.1f}% of the bandwidth limit), fp32 "
                         f"{r[f'unstuck_fp32_{mode}_tokens_per_s']:.0f} tok/s "
                         f"({100 * r[f'unstuck_fp32_{mode}_bandwidth_fraction']:.1f}%), bf16/fp32 "
                         f"{r[f'unstuck_bf16_{mode}_tokens_per_s'] / r[f'unstuck_fp32_{mode}_tokens_per_s']:.2f}"
                         + (f", unstuck/transformers {r[f'ratio_{mode}_unstuck_over_transformers_bf16']:.2f}]"
                            if "transformers_bf16_tokens_per_s" in r else "]"))
            if "transformers_bf16_tokens_per_s" in r:
                line += f"; transformers bf16 {r['transformers_bf16_tokens_per_s']:.0f} tok/s"
            line += " (targets: unstuck/transformers >= 5, bandwidth >= 40%, bf16/fp32 >= 1)"
            lines.append(line)
        elif name.endswith("/grpo"):
            u = r["unstuck"]
            med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")  # noqa: E731
            line = (f"{name}: {r['work']}: unstuck bf16_sr step {med(u['step_s']):.2f} s (rollout {med(u['rollout_s']):.2f}, "
                    f"update {med(u['update_s']):.2f}), device peak {r['unstuck_device_peak_bytes'] / 2**30:.2f} GiB, plan "
                    f"{(u['plan_bytes'] or 0) / 2**30:.2f} GiB, training MFU {100 * r['unstuck_training_mfu']:.1f}% "
                    f"(target >= 35% at 1.5B)")
            if isinstance(r.get("trl"), dict):
                t = r["trl"]
                line += (f"; TRL step {med(t['step_s']):.2f} s (rollout {med(t['rollout_s']):.2f}, update "
                         f"{med(t['update_s']):.2f}), peak {(t['device_peak_bytes'] or 0) / 2**30:.2f} GiB; TRL/unstuck step "
                         f"{r['ratio_step_trl_over_unstuck']:.2f} (target >= 3)")
            elif r.get("trl"):
                line += f"; TRL {r['trl']}"
            lines.append(line)
        elif name.endswith("/plan"):
            for k in ("full", "offload", "lora16"):
                v = r[k]
                host = v["memory"].get("host_bytes", 0) if v["fits"] else 0
                lines.append(f"{name} {k} ({r['params'] / 1e9:.2f}B params): " +
                             (f"fits, planned peak {v['memory'].get('peak_bytes', 0) / 2**30:.1f} GiB" +
                              (f" on the device, {host / 2**30:.1f} GiB on the host" if host else "") if v["fits"]
                              else "refused: " + v["refusal"].splitlines()[0][:400]))
        elif name.endswith("/offload"):
            med = lambda xs: sorted(x for x in xs if x is not None)[len(xs) // 2] if xs else float("nan")  # noqa: E731
            lines.append(f"{name} ({r['params'] / 1e9:.2f}B params, {r['work']}): precision.offload optimizer, bf16_sr: "
                         f"steps {', '.join(f'{x:.1f}' for x in r['step_s'])} s (last: rollout {r['rollout_s'][-1]:.1f}, "
                         f"forward+backward {r['forward_backward_s'][-1]:.1f}, optimizer {r['optimizer_s'][-1]:.1f}), "
                         f"device peak {r['device_peak_bytes'] / 2**30:.1f} GiB (plan {(r['plan_device_peak_bytes'] or 0) / 2**30:.1f}"
                         f" + host {(r['plan_host_bytes'] or 0) / 2**30:.1f})")
    for f in rep["failed"]:
        lines.append(f"FAILED {f['part']}: {f['error'].splitlines()[-1] if f['error'] else ''}")
    if rep["skipped"]:
        lines.append("skipped (budget): " + ", ".join(rep["skipped"]))
    lines.append("seconds per part: " + ", ".join(f"{k} {v:.0f}" for k, v in rep["seconds"].items()))
    return "\n".join(lines)


DECODE_LABELS = {"dynamic": "dynamic (op by op)", "fixed": "fixed (op by op)", "auto": "graphs (`auto` on a GPU)",
                 "graphs": "graphs"}


def rollout_table(reports):
    """The markdown of the generate parts of saved scale.json reports, numbered as runs 1, 2, ... in the
    order given (docs/RESULTS-gpu-scale.md): one row per shape, decode mode and run."""
    lines = ["| shape | `rollout.decode` | run | BF16 tok/s | ms / step | of the bandwidth limit | FP32 tok/s | "
             "BF16 / FP32 |", "|---|---|---|---|---|---|---|---|"]
    machines, peers = [], []
    for run, rep in enumerate(reports, 1):
        m = rep["machine"]
        machines.append(f"run {run}: {m.get('gpu', 'no GPU named')} ({m.get('sms', '?')} SMs), host {m['cpu']} "
                        f"with {m['cpus']} CPUs, torch {m['torch']}")
        for part, g in rep["parts"].items():
            if not part.endswith("/generate"):
                continue
            shape = part.split("/")[0].split("-")[-1].upper()
            for mode in DECODE_LABELS:
                bf16, fp32 = g.get(f"unstuck_bf16_{mode}_tokens_per_s"), g.get(f"unstuck_fp32_{mode}_tokens_per_s")
                if bf16 is None:
                    continue
                lines.append(f"| {shape} | {DECODE_LABELS[mode]} | {run} | {bf16:,.0f} | "
                             f"{g[f'unstuck_bf16_{mode}_step_ms']:.2f} | "
                             f"{100 * g[f'unstuck_bf16_{mode}_bandwidth_fraction']:.1f}% | "
                             + (f"{fp32:,.0f} | {bf16 / fp32:.2f} |" if fp32 else "n/a | n/a |"))
            if g.get("transformers_bf16_tokens_per_s"):
                peers.append(f"{shape} run {run}: {g['transformers_bf16_tokens_per_s']:,.0f} tok/s")
    lines += ["", "transformers' `generate`, BF16: " + ("; ".join(peers) or "not measured") + ". Machines: "
              + "; ".join(machines) + "."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print the rollout table of saved scale.json "
                    "reports (markdown) and exit")
    ap.add_argument("--unstuck")
    ap.add_argument("--out")
    ap.add_argument("--budget", type=float, default=420, help="seconds for all parts")
    ap.add_argument("--shapes", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS)
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--generate-modes", default="auto,dynamic", help="rollout.decode modes bench generate times")
    ap.add_argument("--skip-hf", default="", help="shapes whose transformers generate is not run (measured before)")
    ap.add_argument("--skip", default="", help="parts not run, e.g. qwen2.5-0.5b/grpo")
    ap.add_argument("--require-all", action="store_true",
                    help="exit 1 unless every part ran (the CPU rehearsal as a test: none may be skipped for time)")
    ap.add_argument("--rehearse", action="store_true",
                    help="on this machine's CPU: 2 layers, 4 x 8 tokens generated, 2 x 2 x 8 GRPO")
    a = ap.parse_args()
    if a.table:
        sys.stdout.write(rollout_table([json.loads(Path(p).read_text()) for p in a.table]))
        return 0
    if not a.unstuck or not a.out:
        ap.error("--unstuck and --out are required (or --table)")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as e:
        print(f"gpu_scale: {e}: the stand-ins need torch, transformers and tokenizers", file=sys.stderr)
        return 77
    a.unstuck = str(Path(a.unstuck).resolve())
    a.shapes = a.shapes.split(",")
    a.generate_modes = a.generate_modes.split(",")
    a.skip_hf, a.skip = a.skip_hf.split(","), a.skip.split(",")
    if a.rehearse:
        a.device, a.layers, a.gen_batch, a.gen_prompt, a.gen_tokens, a.gen_repeats = "cpu", 2, 4, 16, 8, 1
        bench_scale.WORK["rehearse"] = dict(prompts=2, group=2, new_tokens=8, steps=2)
        a.grpo_work, a.need_generate, a.need_grpo = "rehearse", 10, 10
        a.offload_work, a.offload_shape, a.need_offload = "rehearse", "qwen2.5-0.5b", 10
    else:
        a.device, a.layers, a.gen_batch, a.gen_prompt, a.gen_tokens, a.gen_repeats = "cuda", None, 256, 64, 512, 1
        bench_scale.WORK["gpu"] = dict(prompts=16, group=8, new_tokens=256, steps=3)
        a.grpo_work, a.need_generate, a.need_grpo = "gpu", 60, 60
        bench_scale.WORK["offload"] = dict(prompts=4, group=4, new_tokens=128, steps=2)
        a.offload_work, a.offload_shape, a.need_offload = "offload", "qwen2.5-7b", 240
    s = Scale(a)
    rc = s.run()
    print(summary(s.report), flush=True)
    if a.require_all and (s.report["skipped"] or rc):
        print(f"gpu_scale: --require-all: failed {[f['part'] for f in s.report['failed']]}, skipped "
              f"{s.report['skipped']}", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
