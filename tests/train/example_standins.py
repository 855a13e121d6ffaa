"""Stand-ins for the example configs' end-to-end test (tests/train/test_example_configs.cpp).

  example_standins.py OUT KIND STANDIN [MAX_POSITIONS]
    KIND     gsm8k (for configs/examples/gsm8k_qwen2.5.yaml) or math (configs/examples/math_llama3.yaml)
    STANDIN  real      the real family: Qwen2ForCausalLM (attention biases, tied embeddings) or
                       LlamaForCausalLM with Llama 3's rope scaling, and a byte-level BPE
                       tokenizer.json trained here with `tokenizers` (Qwen2 / Llama 3 style)
             llama-sp  a LlamaForCausalLM and a SentencePiece tokenizer.model trained here (what a
                       build without tokenizer.json / Qwen2 support can run)

MAX_POSITIONS (default 512) is the model's max_position_embeddings.
Writes OUT/model (config.json, model.safetensors, the tokenizer, tokenizer_config.json with the
family's chat template, written in its style for the tests) and OUT/data/{train,test}.jsonl: 20
records in the dataset's own format (GSM8K: question / answer "... #### n"; MATH: problem /
solution "... \\boxed{...}") plus one training record whose prompt is too long for the model.
Prints the number of records written and the tokenizer's vocabulary size.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "..", "tokenizer", "chat_template_cases.json")
MAX_POSITIONS = 512


def gsm8k_records():
    out = []
    for i in range(20):
        a, b, c = 3 + i, 5 + 2 * i, 2 + i % 4
        total = (a + b) * c
        question = (f"Tom has {a} apples and buys {b} more. He then packs them into {c} times as many "
                    f"bags as before. How many apples in total if each bag holds the same? Answer {total}.")
        answer = (f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n"
                  f"Times {c} gives {a + b} * {c} = <<{a + b}*{c}={total}>>{total}.\n#### {total}")
        out.append({"question": question, "answer": answer})
    return out


def math_records():
    out = []
    for i in range(20):
        a, b = 2 + i, 3 + i
        if i % 2:
            problem = f"Compute $\\frac{{1}}{{{a}}} + \\frac{{1}}{{{b}}}$."
            solution = (f"Over a common denominator, $\\frac{{{a + b}}}{{{a * b}}}$, so the answer is "
                        f"$\\boxed{{\\frac{{{a + b}}}{{{a * b}}}}}$.")
        else:
            problem = f"What is ${a} \\times {b}$?"
            solution = f"We have ${a} \\times {b} = {a * b}$, so the answer is $\\boxed{{{a * b}}}$."
        out.append({"problem": problem, "solution": solution, "level": f"Level {1 + i % 5}", "type": "Algebra"})
    return out


def family(kind):
    """(template name in the cases file, special tokens, tokenizer_config special entries)."""
    if kind == "gsm8k":  # Qwen2.5: ChatML, no BOS, <|im_end|> ends a turn
        return "chatml_qwen25", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], \
            {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    return "llama3", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                      "<|eot_id|>"], \
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}


def train_sentencepiece(model_dir, corpus_file, specials):
    import sentencepiece as spm

    # The conventions of `unstuck tokenizer train`: ids 0-3 pad/unk/bos/eos, identity normalization,
    # newline and tab as pieces, so any prompt of the corpus round-trips.
    spm.SentencePieceTrainer.train(
        input=corpus_file, model_prefix=os.path.join(model_dir, "tokenizer"), model_type="char",
        vocab_size=4000, hard_vocab_limit=False, character_coverage=1.0, normalization_rule_name="identity",
        add_dummy_prefix=False, remove_extra_whitespaces=False, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        user_defined_symbols=specials + ["\n", "\t"], minloglevel=2)
    os.remove(os.path.join(model_dir, "tokenizer.vocab"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    return sp.get_piece_size(), {"bos": 2, "eos": 3, "pad": 0}


def train_bpe(model_dir, corpus_file, specials, special_entries, kind):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    # The pre-tokenizer split patterns of Qwen2 and Llama 3 (contractions, letters, 1-3 digits,
    # punctuation, newlines, spaces), then GPT-2's byte-level mapping.
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    if kind == "math":
        split = split.replace(r"\p{N}|", r"\p{N}{1,3}|")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus_file], trainer)
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    bos = special_entries["bos_token"] or specials[0]
    return tok.get_vocab_size(), {"bos": tok.token_to_id(bos), "eos": tok.token_to_id(special_entries["eos_token"])}


def make_model(model_dir, kind, standin, vocab, special_ids):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    shape = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS,
                 rms_norm_eps=1e-6)
    if standin == "real" and kind == "gsm8k":  # Qwen2.5's keys: q/k/v biases, tied embeddings
        config = Qwen2Config(**shape, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                             bos_token_id=special_ids["bos"], eos_token_id=special_ids["eos"])
        model = Qwen2ForCausalLM(config)
    elif standin == "real":  # Llama 3.x's keys: rope scaling "llama3", untied
        config = LlamaConfig(**shape, rope_theta=500000.0, tie_word_embeddings=False,
                             rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                             bos_token_id=special_ids["bos"], eos_token_id=special_ids["eos"])
        model = LlamaForCausalLM(config)
    else:
        config = LlamaConfig(**shape, rope_theta=10000.0, tie_word_embeddings=False,
                             bos_token_id=special_ids["bos"], eos_token_id=special_ids["eos"],
                             pad_token_id=special_ids["pad"])
        model = LlamaForCausalLM(config)
    model.float().save_pretrained(model_dir, safe_serialization=True)


def main():
    out, kind, standin = sys.argv[1], sys.argv[2], sys.argv[3]
    global MAX_POSITIONS
    if len(sys.argv) > 4:
        MAX_POSITIONS = int(sys.argv[4])
    model_dir, data_dir = os.path.join(out, "model"), os.path.join(out, "data")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    records = gsm8k_records() if kind == "gsm8k" else math_records()
    prompt_key = "question" if kind == "gsm8k" else "problem"
    overlong = dict(records[0])
    overlong[prompt_key] = "Read this carefully. " * 200 + records[0][prompt_key]
    with open(os.path.join(data_dir, "train.jsonl"), "w") as f:
        for r in records[:16] + [overlong]:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(data_dir, "test.jsonl"), "w") as f:
        for r in records[16:]:
            f.write(json.dumps(r) + "\n")

    template_name, specials, special_entries = family(kind)
    with open(CASES, encoding="utf-8") as f:
        template = json.load(f)["templates"][template_name]
    corpus_file = os.path.join(out, "corpus.txt")
    with open(corpus_file, "w", encoding="utf-8") as f:
        for r in records + [overlong]:
            for v in r.values():
                f.write(v + "\n")
        f.write("system user assistant You are a helpful assistant. Please reason step by step, and put "
                "your final answer within \\boxed{}.\n")
    if standin == "real":
        vocab, special_ids = train_bpe(model_dir, corpus_file, specials, special_entries, kind)
    else:
        vocab, special_ids = train_sentencepiece(model_dir, corpus_file, specials)
    make_model(model_dir, kind, standin, vocab, special_ids)
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({**special_entries, "chat_template": template, "model_max_length": MAX_POSITIONS}, f, indent=2)
    print(f"{len(records) + 1} records, vocabulary {vocab}")


if __name__ == "__main__":
    main()
