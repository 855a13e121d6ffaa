#!/usr/bin/env python3
"""Stand-ins for the models people post-train: a Hugging Face model directory built by
transformers from a public config (random weights, fixed seed), a byte-level BPE tokenizer.json
trained here with `tokenizers` (the embedding padded to the real vocabulary size), the family's chat
template, and GSM8K-style records. Used by scripts/bench_scale.py (full shapes) and by the memory
plan test (tests/train/memory_plan_test.sh: the full vocabulary and width, few layers).

  scale_standin.py OUT [--shape qwen2.5-0.5b] [--layers N] [--records 32] [--dtype bf16] [--tokenizer-vocab full]

--tokenizer-vocab: the tokenizer's regular tokens (default 2048); `full` trains as many as the family's
real tokenizer has (Qwen2/Qwen3: 151,643 and the specials, 151,646 ids here; Llama 3: 128,000): on the
records' text and a soup of pseudo-words drawn with a fixed seed, so the merges reach the real count
and the vocabulary and merges tables weigh what the real ones weigh in memory.

Writes OUT/model (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) and
OUT/data/{train,test}.jsonl; prints one JSON line {"params": ..., "vocab": ..., "tokenizer_vocab": ...}.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "..", "tests", "tokenizer", "chat_template_cases.json")

# The public config.json numbers of each model (hub model cards); only what the shape needs.
SHAPES = {
    "qwen2.5-0.5b": dict(family="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=32768),
    "qwen2.5-1.5b": dict(family="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=32768),
    "qwen2.5-7b": dict(family="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=32768),
    "qwen3-0.6b": dict(family="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       max_position_embeddings=40960),
    "llama-3.2-1b": dict(family="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         tie_word_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5,
                         max_position_embeddings=131072,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
}

# The regular (BPE) tokens of each family's real tokenizer.
FULL_VOCAB = {"qwen2": 151643, "qwen3": 151643, "llama": 128000}

# Chat template (tests/tokenizer/chat_template_cases.json), special tokens, tokenizer_config entries.
FAMILY_TOKENS = {
    "qwen2": ("chatml_qwen25", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "qwen3": ("chatml_qwen3", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
              {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "llama": ("llama31", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                          "<|eot_id|>"],
              {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>"}),
}

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


def gsm8k_records(n):
    """GSM8K's format: a word problem, a worked answer ending in '#### <number>'."""
    out = []
    for i in range(n):
        a, b, c = 3 + i, 5 + 2 * i, 2 + i % 4
        total = (a + b) * c
        question = (f"Tom has {a} apples and buys {b} more. He packs them into boxes and then makes {c} times "
                    f"as many boxes, each as full as before. How many apples does he have in the end?")
        answer = (f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n"
                  f"Times {c} gives {a + b} * {c} = <<{a + b}*{c}={total}>>{total}.\n#### {total}")
        out.append({"question": question, "answer": answer})
    return out


def train_tokenizer(model_dir, corpus_file, specials, vocab_size):
    """Byte-level BPE with Qwen2's pre-tokenizer split (transformers and Unstuck both read it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus_file], trainer)
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    return tok


def pseudo_words(f, count, seed=0):
    """`count` pseudo-words (letters, digits, punctuation, some accented letters) with a fixed seed:
    enough distinct pairs for a BPE trainer to reach a real tokenizer's merge count."""
    import random
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéèàüöñçß"
    line = []
    for i in range(count):
        n = rng.choice((2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 9, 11))
        word = "".join(rng.choice(letters) for _ in range(n))
        line.append(word if rng.random() < 0.9 else word + rng.choice(".,;:!?"))
        if len(line) == 16:
            f.write(" ".join(line) + "\n")
            line = []
    f.write(" ".join(line) + "\n")


def build(out, shape_name, layers=None, records=32, dtype="bf16", seed=0, device="cpu", tokenizer_vocab=2048):
    """`device`: where transformers draws the random weights (cuda: seconds instead of a minute at 1.5B).
    `tokenizer_vocab`: the BPE tokens to train, or "full" for the family's real count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if shape_name not in SHAPES:
        sys.exit(f"scale_standin: unknown --shape {shape_name!r} (known: {', '.join(SHAPES)})")
    shape = dict(SHAPES[shape_name])
    family = shape.pop("family")
    if layers:
        shape["num_hidden_layers"] = layers
    model_dir, data_dir = os.path.join(out, "model"), os.path.join(out, "data")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    recs = gsm8k_records(records + 8)
    with open(os.path.join(data_dir, "train.jsonl"), "w") as f:
        for r in recs[:records]:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(data_dir, "test.jsonl"), "w") as f:
        for r in recs[records:]:
            f.write(json.dumps(r) + "\n")

    template_name, specials, entries = FAMILY_TOKENS[family]
    with open(CASES, encoding="utf-8") as f:
        template = json.load(f)["templates"][template_name]
    corpus_file = os.path.join(out, "corpus.txt")
    with open(corpus_file, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(r["question"] + "\n" + r["answer"] + "\n")
        f.write("system user assistant You are a helpful assistant. " + SYSTEM_PROMPT + "\n")
        if tokenizer_vocab == "full":  # the records' words merge first (they repeat), then the soup's
            for _ in range(64):
                for r in recs:
                    f.write(r["question"] + "\n" + r["answer"] + "\n")
            pseudo_words(f, 1_500_000, seed)
    regular = FULL_VOCAB[family] if tokenizer_vocab == "full" else int(tokenizer_vocab)
    tok = train_tokenizer(model_dir, corpus_file, specials, vocab_size=regular + len(specials))
    if tokenizer_vocab == "full" and tok.get_vocab_size() != regular + len(specials):
        sys.exit(f"scale_standin: the tokenizer reached {tok.get_vocab_size()} ids, not {regular + len(specials)}")
    os.remove(corpus_file)
    ids = {k: tok.token_to_id(v) for k, v in entries.items() if v}
    bos = ids.get("bos_token", ids["pad_token"])

    torch.manual_seed(seed)
    model_type = {"qwen2": "qwen2", "qwen3": "qwen3", "llama": "llama"}[family]
    config = AutoConfig.for_model(model_type, **shape, bos_token_id=bos, eos_token_id=ids["eos_token"],
                                  pad_token_id=ids["pad_token"])
    if family == "qwen2":
        config.use_sliding_window = False
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[dtype]
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({**entries, "chat_template": template, "model_max_length": shape["max_position_embeddings"]}, f,
                  indent=2)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "vocab": shape["vocab_size"], "tokenizer_vocab": tok.get_vocab_size(),
            "layers": shape["num_hidden_layers"], "shape": shape_name, "model": model_dir, "data": data_dir}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the public config (CI)")
    ap.add_argument("--records", type=int, default=32, help="training records (8 more go to the test split)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "fp16"], help="weights as saved")
    ap.add_argument("--tokenizer-vocab", default="2048",
                    help="BPE tokens to train, or full: the family's real count (Qwen2: 151,643)")
    a = ap.parse_args()
    print(json.dumps(build(a.out, a.shape, a.layers, a.records, a.dtype, tokenizer_vocab=a.tokenizer_vocab)))


if __name__ == "__main__":
    main()
