"""Checks `unstuck export --format fp8` against the same checkpoint's BF16 export (ModelExport tests).

usage: check_fp8_export.py FP8_DIR BF16_DIR

* config.json's quantization_config is a valid compressed-tensors QuantizationConfig (its own
  pydantic model parses it) describing weight-only FP8 E4M3 with a scale per output channel.
* Every linear layer's weight is stored as F8_E4M3 codes with a (rows, 1) BF16 scale, and code x scale
  equals the BF16 export's weight bit for bit; every other tensor is the BF16 export's, byte for byte.
* transformers (with compressed-tensors) loads the directory: its weights (decompressed, or kept as
  codes and scales, which are then decoded here) equal the BF16 export's exactly, and its logits on fixed tokens match the BF16 export's within 1e-2 x max(1, max |logit|)
  (the two load paths compute the same products in BF16; the tolerance covers their op order).
"""
import json
import sys

import torch
from compressed_tensors.quantization import QuantizationConfig
from safetensors import safe_open
from transformers import AutoModelForCausalLM


def tensors(d):
    index = f"{d}/model.safetensors.index.json"
    try:
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        with safe_open(f"{d}/{f}", "pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def main(fp8_dir, bf16_dir):
    bad = []
    qc = json.load(open(f"{fp8_dir}/config.json"))["quantization_config"]
    parsed = QuantizationConfig.model_validate(qc)
    w = parsed.config_groups["group_0"].weights
    if (parsed.format, w.num_bits, w.type, w.strategy, w.symmetric) != ("float-quantized", 8, "float", "channel", True):
        bad.append(f"quantization_config describes {parsed.format} {w.num_bits}-bit {w.type} {w.strategy}")
    coded, ref = tensors(fp8_dir), tensors(bf16_dir)
    linear = 0
    for name, want in ref.items():
        got = coded.get(name)
        if got is None:
            bad.append(f"{name}: missing")
            continue
        if got.dtype == torch.float8_e4m3fn:
            linear += 1
            scale = coded.get(name + "_scale")
            if scale is None or scale.dtype != torch.bfloat16 or tuple(scale.shape) != (got.shape[0], 1):
                bad.append(f"{name}: no (rows, 1) BF16 scale")
                continue
            decoded = (got.float() * scale.float()).to(torch.bfloat16)
            if not torch.equal(decoded.view(torch.int16), want.view(torch.int16)):
                n = (decoded.view(torch.int16) != want.view(torch.int16)).sum().item()
                bad.append(f"{name}: {n} elements of code x scale differ from the BF16 export")
        elif got.dtype != want.dtype or not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
            bad.append(f"{name}: not the BF16 export's bytes")
    if linear == 0:
        bad.append("no F8_E4M3 tensor")
    q = AutoModelForCausalLM.from_pretrained(fp8_dir, dtype=torch.bfloat16).eval()
    b = AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.bfloat16).eval()
    qs, bs = q.state_dict(), b.state_dict()
    for name, want in bs.items():
        got = qs.get(name)
        if got is not None and got.dtype == torch.float8_e4m3fn and name + "_scale" in qs:  # kept compressed
            got = (got.float() * qs[name + "_scale"].float()).to(want.dtype)
        if got is None or got.dtype != want.dtype:
            bad.append(f"transformers' {name}: {None if got is None else got.dtype}, not {want.dtype}")
        elif not torch.equal(got, want):
            n = (got != want).sum().item()
            i = (got != want).flatten().nonzero()[0].item()
            bad.append(f"transformers' {name}: {n} of {want.numel()} elements differ after decompression "
                       f"(first at {i}: {got.flatten()[i].item()!r} vs {want.flatten()[i].item()!r})")
    torch.manual_seed(0)
    tokens = torch.randint(0, b.config.vocab_size, (2, 12))
    with torch.no_grad():
        lq, lb = q(tokens).logits.float(), b(tokens).logits.float()
    diff, top = (lq - lb).abs().max().item(), lb.abs().max().item()
    print(f"fp8 export: {linear} FP8 tensors, code x scale = BF16 export bit for bit; "
          f"transformers logits max |diff| {diff:.3g} (max |logit| {top:.3g})")
    if diff > 1e-2 * max(1.0, top):
        bad.append(f"logits differ by {diff:.3g}")
    for line in bad:
        print("MISMATCH:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
