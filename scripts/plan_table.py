#!/usr/bin/env python3
"""The memory plan per rank of GRPO at real model shapes and world sizes, as committed data, and the
table docs/DISTRIBUTED.md shows from it.

  scripts/plan_table.py --run docs/results/plan-per-rank/plan.json [--unstuck build/unstuck]
  scripts/plan_table.py --table DATA.json

Each model's config.json is written with transformers' own config classes (Qwen2Config,
LlamaConfig: the published shapes of Qwen2.5-0.5B/1.5B/7B/32B and Llama-3.1-8B/70B, no weights);
each plan is `unstuck config plan --config configs/grpo/countdown.yaml --model DIR --world-size
1,8,16,64 --gpu-memory 80GB --prompt-tokens 512 --json` with the work below, full-parameter and
with LoRA rank 64. The plan is the same code a run's start-up checks against the device (it
depends on the commit, not on the machine)."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_meta import commit, run_or_table, write_data  # noqa: E402

CONFIG = "configs/grpo/countdown.yaml"
WORLDS = "1,8,16,64"
GPU = "80GB"
PROMPT_TOKENS = 512
# The work: 64 prompts x 8 completions of up to 1024 tokens, bf16_sr, activation checkpointing,
# 4 sequences per forward (the micro-batch), the config's reference policy and KL.
WORK = ["precision.mode=bf16_sr", "grpo.prompts_per_step=64", "grpo.group_size=8", "rollout.max_new_tokens=1024",
        "model.activation_checkpointing=true", "grpo.logprob_chunk_rows=4"]
VARIANTS = [("full-parameter", []), ("LoRA rank 64", ["lora.rank=64"])]
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
# (name, family, config keys as the published config.json has them)
MODELS = [
    ("Qwen2.5-0.5B", "qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)),
    ("Qwen2.5-1.5B", "qwen2", dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                   num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True)),
    ("Qwen2.5-7B", "qwen2", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False)),
    ("Llama-3.1-8B", "llama", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)),
    ("Qwen2.5-32B", "qwen2", dict(vocab_size=152064, hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
                                  num_attention_heads=40, num_key_value_heads=8, tie_word_embeddings=False)),
    ("Llama-3.1-70B", "llama", dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                    num_attention_heads=64, num_key_value_heads=8, tie_word_embeddings=False)),
]


def write_model(family, keys, out):
    from transformers import LlamaConfig, Qwen2Config
    if family == "qwen2":
        cfg = Qwen2Config(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, **keys)
    else:
        cfg = LlamaConfig(max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                          rope_scaling=dict(LLAMA31_ROPE), **keys)
    os.makedirs(out, exist_ok=True)
    cfg.save_pretrained(out)


def run(a):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, family, keys in MODELS:
            model_dir = os.path.join(tmp, name)
            write_model(family, keys, model_dir)
            for variant, extra in VARIANTS:
                cmd = [a.unstuck, "config", "plan", "--config", CONFIG, "--model", model_dir, "--world-size", WORLDS,
                       "--gpu-memory", GPU, "--prompt-tokens", str(PROMPT_TOKENS), "--json"] + WORK + extra
                out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"plan_table: {name} {variant}: {out.stderr.strip()}")
                plan = json.loads(out.stdout)
                rows.append(dict(model=name, variant=variant, plans=plan["plans"], gpu_bytes=plan["gpu_bytes"]))
                print(f"{name} ({variant}): " + ", ".join(
                    f"W={p['world_size']} {p['peak_bytes'] / 2**30:.1f} GiB" for p in rows[-1]["plans"]))
    data = dict(command=" ".join(["scripts/plan_table.py", "--run", a.run]), commit=commit(),
                date=datetime.date.today().isoformat(), config=CONFIG, work=WORK, prompt_tokens=PROMPT_TOKENS,
                worlds=WORLDS, gpu=GPU, models=[dict(name=n, family=f, config=k) for n, f, k in MODELS], rows=rows)
    write_data(a.run, data)


def table(data, path):
    worlds = [int(w) for w in data["worlds"].split(",")]
    lines = [f"`{data['command']}` ({path}), commit {data['commit']}, {data['date']}: the plan's peak per rank "
             f"(GiB) of `{data['config']}` with {' '.join(data['work'])}, prompts of {data['prompt_tokens']} "
             f"tokens, on GPUs of {data['gpu']} (10^9 bytes; over it: **bold**); `dist.shard` is `optimizer` "
             "(ZeRO-1) in every row:", "",
             "| model | training | " + " | ".join(f"{w} GPU{'s' if w > 1 else ''}" for w in worlds) + " |",
             "|---|---|" + "---:|" * len(worlds)]
    for r in data["rows"]:
        cells = []
        for p in r["plans"]:
            gib = f"{p['peak_bytes'] / 2**30:.1f}"
            cells.append(gib if p["fits"] else f"**{gib}**")
        lines.append(f"| {r['model']} | {r['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="plan every model and world size and write the data here")
    p.add_argument("--unstuck", default=os.path.join(ROOT, "build", "unstuck"), help="the unstuck binary")
    return run_or_table(p, run, lambda data, path, a: table(data, path))


if __name__ == "__main__":
    sys.exit(main())
