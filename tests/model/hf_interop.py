"""Hugging Face side of the model interoperability tests (tests/model/test_model_io.cpp).

  hf_interop.py make DIR   build a small random LlamaForCausalLM, save_pretrained(DIR), and write
                           DIR/hf_logits.json with fixed tokens and transformers' FP32 logits
  hf_interop.py check DIR  load DIR (written by Unstuck) with transformers and compare its logits on
                           the tokens in DIR/unstuck_logits.json; exit 1 on a mismatch
"""
import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

TOKENS = [[1, 5, 9, 17, 33, 2, 60, 44, 8, 3, 12, 7], [4, 4, 20, 31, 59, 0, 1, 2, 3, 10, 11, 50]]
TOLERANCE = 1e-4  # max |difference| of FP32 logits (|logits| are O(1) here)


def make(out_dir):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=61, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=2, eos_token_id=3, pad_token_id=0)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():  # larger weights than the 0.02 default, so the logits are not all ~0
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model.save_pretrained(out_dir, safe_serialization=True)
    with torch.no_grad():
        logits = model(torch.tensor(TOKENS)).logits.float()
    with open(f"{out_dir}/hf_logits.json", "w") as f:
        json.dump({"tokens": TOKENS, "logits": logits.tolist()}, f)


def check(model_dir):
    with open(f"{model_dir}/unstuck_logits.json") as f:
        expected = json.load(f)
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor(expected["tokens"])).logits.float()
    diff = (logits - torch.tensor(expected["logits"])).abs().max().item()
    print(f"max |transformers - unstuck| = {diff:.3g}")
    sys.exit(0 if diff <= TOLERANCE else 1)


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
