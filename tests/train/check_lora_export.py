"""Checks a LoRA run's `unstuck export --format peft` and `--format merged` (ModelExport tests).

usage: check_lora_export.py BASE_DIR PEFT_DIR MERGED_DIR OURS_JSON

OURS_JSON holds {"tokens": [...], "logits_file": path of float32 (T, V) logits}: Unstuck's forward
of the base plus the run's adapters (unmerged) on those tokens.

* peft's PeftModel.from_pretrained(base, PEFT_DIR) (transformers, FP32) gives those logits within
  1e-5 x max |logit| (the same products, another order of FP32 sums);
* transformers' load of MERGED_DIR (W + s B A in FP32) gives them within 1e-5 x max |logit|.
Prints both differences; exits 1 on a miss.
"""
import json
import sys

import numpy as np
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

TOL = 1e-5


def main(base_dir, peft_dir, merged_dir, ours_json):
    ours = json.load(open(ours_json))
    tokens = torch.tensor([ours["tokens"]])
    want = torch.from_numpy(np.fromfile(ours["logits_file"], dtype=np.float32)).view(len(ours["tokens"]), -1)
    scale = max(1.0, want.abs().max().item())
    bad = []
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        adapted = PeftModel.from_pretrained(base, peft_dir).eval()
        got = adapted(tokens).logits[0].float()
        d_peft = (got - want).abs().max().item() / scale
        merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
        got = merged(tokens).logits[0].float()
        d_merged = (got - want).abs().max().item() / scale
    print(f"lora export: peft logits max |diff| / max |logit| {d_peft:.3g}, merged {d_merged:.3g} "
          f"(limit {TOL:g}; max |logit| {scale:.3g})")
    if not d_peft <= TOL:
        bad.append(f"peft: {d_peft}")
    if not d_merged <= TOL:
        bad.append(f"merged: {d_merged}")
    for b in bad:
        print("FAIL", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
