"""Hugging Face side of the model-family parity tests (tests/model/test_families.cpp).

  hf_families.py make DIR    for every variant in VARIANTS, build a tiny random-weight model with
                             transformers, save it to DIR/<name> (dtype and sharding as listed) and
                             write DIR/<name>/reference.json: prompts, transformers' FP32 logits on
                             them, and its greedy continuation of NEW_TOKENS tokens
  hf_families.py check DIR   for every DIR/<name>/unstuck_logits.json (written by Unstuck next to an
                             exported model), load DIR/<name> with transformers and compare logits;
                             print one line per model, exit 1 on any mismatch

The variants cover every feature Unstuck computes: Llama (untied / tied, GQA, explicit head_dim,
attention biases, rope_scaling llama3 / linear / yarn), Qwen2 (q/k/v biases), Qwen3 (q/k norms) and
Mistral (sliding window shorter than the sequence); FP32 and BF16 checkpoints, single and sharded.
"""
import json
import os
import sys

import torch
import transformers

NEW_TOKENS = 64
PROMPTS = [[1, 5, 9, 17, 33, 2, 60, 44], [4, 4, 20, 31, 59, 0, 1, 2], [7, 70, 12, 3, 90, 11, 8, 41]]
REL_TOLERANCE = 1e-4  # max |difference| of FP32 logits, relative to max |logit|

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=1,
            eos_token_id=2, pad_token_id=None)

# name: (config class, extra config keys, saved dtype, max_shard_size or None)
VARIANTS = {
    "llama_untied": ("LlamaConfig", dict(tie_word_embeddings=False), torch.float32, None),
    "llama_tied_head_dim_llama3": ("LlamaConfig", dict(
        tie_word_embeddings=True, head_dim=24, eos_token_id=[2, 3],
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=32)), torch.bfloat16, "20KB"),
    "llama_bias_linear": ("LlamaConfig", dict(attention_bias=True, num_key_value_heads=1,
                                              rope_scaling=dict(rope_type="linear", factor=2.0)), torch.float32, None),
    "llama_yarn": ("LlamaConfig", dict(rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                         original_max_position_embeddings=32)), torch.float32, None),
    "qwen2_tied": ("Qwen2Config", dict(tie_word_embeddings=True, rope_theta=1000000.0), torch.float32, "30KB"),
    "qwen3_head_dim": ("Qwen3Config", dict(head_dim=32, tie_word_embeddings=True), torch.bfloat16, None),
    "mistral_window": ("MistralConfig", dict(sliding_window=16, head_dim=16), torch.float32, None),
}


def build(kind, extra):
    keys = dict(BASE)
    keys.update(extra)
    rope = keys.pop("rope_scaling", None)
    config = getattr(transformers, kind)(**keys)
    if rope is not None:  # transformers 5 keeps the scaling inside rope_parameters
        config.rope_parameters = dict(config.rope_parameters, **rope)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # larger weights than the 0.02 default, so the logits are not all ~0
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.5)
            else:  # norms: around 1, not exactly 1, so a missing norm shows
                p.uniform_(0.5, 1.5)
    return model


def greedy(model, prompts):
    ids = torch.tensor(prompts)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[:, ids.shape[1]:].tolist()


def make(root):
    for name, (kind, extra, dtype, shard) in VARIANTS.items():
        torch.manual_seed(len(name))
        model = build(kind, extra)
        out_dir = os.path.join(root, name)
        saved = model.to(dtype)
        kwargs = {"max_shard_size": shard} if shard else {}
        saved.save_pretrained(out_dir, **kwargs)
        model = transformers.AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
        model.config._attn_implementation = "eager"
        with torch.no_grad():
            logits = model(torch.tensor(PROMPTS)).logits.float()
        with open(os.path.join(out_dir, "reference.json"), "w") as f:
            json.dump({"prompts": PROMPTS, "logits": logits.tolist(), "greedy": greedy(model, PROMPTS),
                       "sharded": bool(shard), "dtype": str(dtype)}, f)


def check(root):
    ok = True
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "unstuck_logits.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            expected = json.load(f)
        model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(root, name), dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(torch.tensor(expected["tokens"])).logits.float()
        want = torch.tensor(expected["logits"])
        rel = (logits - want).abs().max().item() / want.abs().max().item()
        good = rel <= REL_TOLERANCE and type(model).__name__ == expected["architecture"]
        ok = ok and good
        print(f"{name}: {type(model).__name__} max |transformers - unstuck| / max |logit| = {rel:.3g}"
              f" {'ok' if good else 'MISMATCH'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
