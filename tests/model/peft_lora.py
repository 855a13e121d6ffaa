"""Reference LoRA models for tests/model/test_lora.cpp, built by transformers + peft.

usage: peft_lora.py make ROOT
       peft_lora.py check ROOT VARIANT ADAPTER_DIR

For each variant (a Llama without biases, a Qwen2 with q/k/v biases and tied embeddings) writes
ROOT/<variant>/base (the FP32 base model), ROOT/<variant>/adapter (peft's save_pretrained of a
LoraConfig with gaussian A and, so that the adapters matter, B drawn from N(0, 0.05^2) instead of
peft's zeros), ROOT/<variant>/merged (merge_and_unload) and ROOT/<variant>/reference.safetensors:
the tokens (as F32), a fixed weight R of the logits, peft's FP32 logits and the gradients of
loss = sum(logits * R) with respect to every lora_A / lora_B (named as in the adapter file).

`check` loads ADAPTER_DIR (one unstuck wrote) with peft's PeftModel.from_pretrained onto the variant's
base and requires its logits of the reference tokens within 1e-6 x max |logit| of the reference.
"""
import os
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

VARIANTS = {
    "llama": (LlamaForCausalLM, LlamaConfig(vocab_size=160, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
              dict(r=4, lora_alpha=8, target_modules="all-linear", use_rslora=False)),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(vocab_size=160, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
              dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"], use_rslora=True)),
}


def make(root):
    for name, (cls, cfg, lora) in VARIANTS.items():
        d = os.path.join(root, name)
        torch.manual_seed(1234)
        base = cls(cfg).float().eval()
        base.save_pretrained(f"{d}/base")
        model = get_peft_model(base, LoraConfig(lora_dropout=0.0, init_lora_weights="gaussian", **lora))
        g = torch.Generator().manual_seed(99)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        model.save_pretrained(f"{d}/adapter")
        tokens = torch.randint(0, cfg.vocab_size, (2, 11), generator=g)
        weight = torch.randn(2, 11, cfg.vocab_size, generator=g)
        logits = model(tokens).logits.float()
        (logits * weight).sum().backward()
        ref = {"tokens": tokens.float(), "weight": weight, "logits": logits.detach().contiguous()}  # F32: read by io
        for n, p in model.named_parameters():
            if "lora_" in n:  # base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
                ref[n.replace(".default", "")] = p.grad.detach().contiguous()
        save_file(ref, f"{d}/reference.safetensors")
        model.merge_and_unload().save_pretrained(f"{d}/merged")


def check(root, name, adapter_dir):
    cls = VARIANTS[name][0]
    d = os.path.join(root, name)
    ref = load_file(f"{d}/reference.safetensors")
    model = PeftModel.from_pretrained(cls.from_pretrained(f"{d}/base", dtype=torch.float32), adapter_dir).eval()
    with torch.no_grad():
        logits = model(ref["tokens"].long()).logits.float()
    err = ((logits - ref["logits"]).abs().max() / ref["logits"].abs().max()).item()
    print(f"{name}: peft on the adapter unstuck wrote: logits max |diff| / max |logit| = {err:.2e}")
    return 0 if err <= 1e-6 else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:5]))
    else:
        sys.exit(__doc__)
