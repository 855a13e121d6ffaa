"""Reference LoRA models for tests/model/test_lora.cpp, built by transformers + peft.

usage: peft_lora.py make ROOT
       peft_lora.py check ROOT VARIANT ADAPTER_DIR
       peft_lora.py check_logits ROOT VARIANT ADAPTER_DIR LOGITS_FILE

For each variant (a Llama without biases, a Qwen2 with q/k/v biases and tied embeddings) writes
ROOT/<variant>/base (the FP32 base model), ROOT/<variant>/adapter (peft's save_pretrained of a
LoraConfig with gaussian A and, so that the adapters matter, B drawn from N(0, 0.05^2) instead of
peft's zeros), ROOT/<variant>/merged (merge_and_unload) and ROOT/<variant>/reference.safetensors:
the tokens (as F32), a fixed weight R of the logits, peft's FP32 logits and the gradients of
loss = sum(logits * R) with respect to every lora_A / lora_B (named as in the adapter file).

`check` loads ADAPTER_DIR (one unstuck wrote) with peft's PeftModel.from_pretrained onto the variant's
base and requires its logits of the reference tokens within 1e-6 x max |logit| of the reference.

PiSSA: ROOT/<variant>/pissa_adapter is peft's init_lora_weights="pissa" adapter of the same base (A0,
B0), ROOT/<variant>/pissa_residual the base it leaves (W - s B0 A0). `check_logits` loads ADAPTER_DIR
onto the variant's original base and requires its logits of LOGITS_FILE's tokens within 1e-5 x max
|logit| of LOGITS_FILE's logits (ours).

Fast PiSSA: ROOT/<variant>/spectral_base is the base with every linear layer of the blocks replaced by
a matrix of the same shape and known, fast-decaying spectrum (singular values 0.5 * 0.25^i, random
singular vectors), where a randomized SVD converges; ROOT/<variant>/pissa_niter_adapter and
pissa_niter_residual are peft's init_lora_weights="pissa_niter_4" adapter of it and the residual.
"""
import copy
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
        pissa_base = copy.deepcopy(base)
        spectral = copy.deepcopy(base)
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
        pissa = get_peft_model(pissa_base, LoraConfig(lora_dropout=0.0, init_lora_weights="pissa", **lora))
        pissa.save_pretrained(f"{d}/pissa_adapter")
        pissa.unload().save_pretrained(f"{d}/pissa_residual")
        with torch.no_grad():
            for n, p in spectral.model.layers.named_parameters():
                if p.dim() == 2:
                    out_f, in_f = p.shape
                    k = min(out_f, in_f)
                    u = torch.linalg.qr(torch.randn(out_f, k, generator=g))[0]
                    v = torch.linalg.qr(torch.randn(in_f, k, generator=g))[0]
                    p.copy_(u @ torch.diag(0.5 * 0.25 ** torch.arange(k, dtype=torch.float32)) @ v.T)
        spectral.save_pretrained(f"{d}/spectral_base")
        torch.manual_seed(5)  # svd_lowrank's test vectors come from torch's global generator
        fast = get_peft_model(spectral, LoraConfig(lora_dropout=0.0, init_lora_weights="pissa_niter_4", **lora))
        fast.save_pretrained(f"{d}/pissa_niter_adapter")
        fast.unload().save_pretrained(f"{d}/pissa_niter_residual")


def compare(root, name, adapter_dir, want_file, what, tolerance):
    """peft's logits of want_file's tokens with ADAPTER_DIR on the variant's base against its logits."""
    cls = VARIANTS[name][0]
    want = load_file(want_file)
    model = PeftModel.from_pretrained(cls.from_pretrained(f"{root}/{name}/base", dtype=torch.float32), adapter_dir).eval()
    with torch.no_grad():
        logits = model(want["tokens"].long()).logits.float()
    err = ((logits - want["logits"]).abs().max() / want["logits"].abs().max()).item()
    print(f"{name}: peft on {what}: logits max |diff| / max |logit| = {err:.2e}")
    return 0 if err <= tolerance else 1


def check(root, name, adapter_dir):
    return compare(root, name, adapter_dir, f"{root}/{name}/reference.safetensors", "the adapter unstuck wrote", 1e-6)


def check_logits(root, name, adapter_dir, logits_file):
    return compare(root, name, adapter_dir, logits_file, "the original base with the converted adapter", 1e-5)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:5]))
    elif len(sys.argv) == 6 and sys.argv[1] == "check_logits":
        sys.exit(check_logits(*sys.argv[2:6]))
    else:
        sys.exit(__doc__)
