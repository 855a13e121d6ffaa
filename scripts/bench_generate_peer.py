"""Generation throughput of Unstuck's rollout engine against transformers' `generate`, same work.

Both sides sample B sequences x N new tokens (temperature 1, no top-k/top-p, KV cache, no EOS so
every sequence generates all N tokens) from a random model of `unstuck bench generate`'s shape
(dim 128, 4 layers, 4 heads, SwiGLU 384, vocabulary 32), prompts of P tokens, in fp32 and bf16, on
each thread count. Measurements are interleaved (unstuck, transformers, unstuck, ...) so a loaded
machine slows both alike; each side warms up first. Prints medians, ranges and the ratio
transformers_seconds / unstuck_seconds (> 1: Unstuck is faster). Installs nothing.

  .venv/bin/python scripts/bench_generate_peer.py --unstuck build/unstuck --threads 1,2 --repeats 5
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def hf_model(dtype, new_tokens, prompt_tokens):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=max(128, prompt_tokens + new_tokens), rms_norm_eps=1e-5,
                         rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=None, pad_token_id=0)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).to(dtype).eval()


def hf_seconds(model, prompts, new_tokens):
    kwargs = dict(do_sample=True, temperature=1.0, top_k=None, top_p=None, max_new_tokens=new_tokens,
                  min_new_tokens=new_tokens, use_cache=True, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model.generate(prompts, attention_mask=torch.ones_like(prompts), **kwargs)
        seconds = time.perf_counter() - t0
    assert out.shape == (prompts.shape[0], prompts.shape[1] + new_tokens), out.shape
    return seconds


def unstuck_seconds(binary, dtype, threads, args):
    cmd = [binary, "bench", "generate", "--json", "--dtype", dtype, "--threads", str(threads),
           "--sequences", str(args.sequences), "--new-tokens", str(args.new_tokens),
           "--prompt-tokens", str(args.prompt_tokens), "--repeats", "1", "--no-recompute"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return result[dtype]["kv_seconds"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--unstuck", default="build/unstuck", help="the unstuck binary")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per side and setting")
    p.add_argument("--sequences", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args()

    torch.manual_seed(1)
    prompts = torch.randint(4, 32, (args.sequences, args.prompt_tokens))
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for name in args.dtypes.split(","):
            model = hf_model(dtypes[name], args.new_tokens, args.prompt_tokens)
            hf_seconds(model, prompts, min(4, args.new_tokens))  # warm-up
            ours, theirs = [], []
            for _ in range(args.repeats):  # interleaved: a busy moment slows both sides
                ours.append(unstuck_seconds(args.unstuck, name, threads, args))
                theirs.append(hf_seconds(model, prompts, args.new_tokens))
            ratios = [t / o for o, t in zip(ours, theirs)]
            rows.append({"threads": threads, "dtype": name, "unstuck_s": ours, "transformers_s": theirs,
                         "ratio_median": statistics.median(theirs) / statistics.median(ours),
                         "paired_ratios": ratios})
    if args.json:
        print(json.dumps({"sequences": args.sequences, "new_tokens": args.new_tokens,
                          "prompt_tokens": args.prompt_tokens, "torch": torch.__version__, "rows": rows}))
        return
    import transformers
    print(f"generation: {args.sequences} sequences x {args.new_tokens} new tokens (prompt {args.prompt_tokens}), "
          f"{args.repeats} interleaved runs per side; transformers {transformers.__version__}, torch {torch.__version__}\n")
    print(f"{'threads':>7} {'dtype':>5} {'unstuck s (median, range)':>28} {'transformers s (median, range)':>32} "
          f"{'ratio':>6} {'paired ratios (min-max)':>24}")
    for r in rows:
        o, t = r["unstuck_s"], r["transformers_s"]
        print(f"{r['threads']:>7} {r['dtype']:>5} {statistics.median(o):>10.3f} ({min(o):.3f}-{max(o):.3f})      "
              f"{statistics.median(t):>10.3f} ({min(t):.3f}-{max(t):.3f})        {r['ratio_median']:>6.2f} "
              f"{min(r['paired_ratios']):>12.2f}-{max(r['paired_ratios']):.2f}")
    print("\nratio = transformers median seconds / unstuck median seconds; target >= 2")


if __name__ == "__main__":
    main()
