"""A middle-difficulty prompt pool for GRPO (issue 16, item 2; the "sanity test" design of arXiv
2510.26788): sample the base policy k times per training prompt at temperature 1, score each sample
with `unstuck reward score` (0/1: correct or not), and keep the prompts it solves between --lo and
--hi of the time. The pool is a task JSONL for `data.train_path`; the trainer cycles it.

    .venv/bin/python scripts/paper_pool.py --model runs/sft-countdown/model --records 2000 --k 8 \
        --out runs/pool/countdown_mid.jsonl

The base is sampled with transformers (the model directory is a Llama checkpoint) on its weights
rounded to BF16, as the paper runs start (grpo.round_base_to_bf16), with FP32 compute; prompts are
BOS + the SentencePiece ids of the record's prompt (data.prompt_template `{prompt}`). It prints the
histogram of per-prompt solve rates and the mean, to compare with `unstuck eval --k`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="base policy directory (model.safetensors, config.json)")
    ap.add_argument("--data", default="data/countdown/train.jsonl", help="task records to sample from")
    ap.add_argument("--tokenizer", default="data/countdown/tokenizer.model", help="SentencePiece model of the task")
    ap.add_argument("--records", type=int, default=2000, help="first N records of --data to sample")
    ap.add_argument("--k", type=int, default=8, help="samples per prompt")
    ap.add_argument("--lo", type=float, default=0.2, help="keep prompts solved at least this often")
    ap.add_argument("--hi", type=float, default=0.8, help="... and at most this often")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256, help="prompts sampled together")
    ap.add_argument("--unstuck", default="build/unstuck")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of the sampler")
    ap.add_argument("--device", default="cpu", help="torch device of the sampler (cpu, cuda)")
    ap.add_argument("--out", required=True, help="JSONL pool to write")
    ap.add_argument("--json", help="also write the pool's statistics (histogram, rates, kept) to this file")
    a = ap.parse_args()
    import sentencepiece as spm
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval().to(a.device)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    records = [json.loads(l) for l in open(a.data) if l.strip()][:a.records]
    bos, eos = sp.bos_id(), sp.eos_id()
    scored = []
    for start in range(0, len(records), a.batch):
        chunk = records[start:start + a.batch]
        ids = [[bos] + sp.encode(r["prompt"]) for r in chunk]
        width = max(map(len, ids))
        pad = eos if eos >= 0 else 0
        inp = torch.tensor([[pad] * (width - len(x)) + x for x in ids])  # left padding
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.no_grad():
            out = model.generate(input_ids=inp.to(a.device), attention_mask=mask.to(a.device), do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=a.max_new_tokens, num_return_sequences=a.k,
                                 eos_token_id=eos, pad_token_id=pad)
        for i, seq in enumerate(out[:, width:].cpu().tolist()):
            if eos in seq:
                seq = seq[:seq.index(eos)]
            scored.append(dict(chunk[i // a.k], completion=sp.decode(seq)))
        print(f"paper_pool.py: sampled {min(start + a.batch, len(records))}/{len(records)} prompts", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(src, "w") as f:
            for s in scored:
                f.write(json.dumps(s) + "\n")
        r = subprocess.run([a.unstuck, "reward", "score", "--input", src, "--output", dst, "--format-reward", "0"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"paper_pool.py: error: unstuck reward score failed: {r.stderr.strip()}")
        rewards = [json.loads(l)["reward"] for l in open(dst) if l.strip()]
    solved = np.array(rewards, dtype=float).reshape(len(records), a.k).mean(axis=1)
    keep = [rec for rec, s in zip(records, solved) if a.lo <= s <= a.hi]
    if not keep:
        sys.exit(f"paper_pool.py: error: no prompt of the first {len(records)} in {a.data} is solved between "
                 f"{a.lo} and {a.hi} of the time over {a.k} samples; nothing to train on")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".tmp", "w") as f:
        for rec in keep:
            f.write(json.dumps(rec) + "\n")
    os.replace(a.out + ".tmp", a.out)
    hist = np.bincount(np.rint(solved * a.k).astype(int), minlength=a.k + 1)
    middle = (solved >= a.lo) & (solved <= a.hi)
    if a.json:
        stats = {"model": a.model, "data": a.data, "records": len(records), "k": a.k, "lo": a.lo, "hi": a.hi,
                 "seed": a.seed, "histogram": [int(h) for h in hist], "mean_solve_rate": float(solved.mean()),
                 f"pass_at_{a.k}": float((solved > 0).mean()), "kept": len(keep),
                 "kept_mean_solve_rate": float(solved[middle].mean()), "pool": a.out}
        with open(a.json + ".tmp", "w") as f:
            json.dump(stats, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    print(f"paper_pool.py: per-prompt solve rate over {a.k} samples (count of prompts by correct samples 0..{a.k}): "
          + " ".join(str(int(h)) for h in hist))
    print(f"paper_pool.py: mean solve rate {solved.mean():.3f}, pass@{a.k} {(solved > 0).mean():.3f}; "
          f"kept {len(keep)} of {len(records)} prompts with rate in [{a.lo}, {a.hi}] (their mean "
          f"{solved[middle].mean():.3f}) -> {a.out}")

