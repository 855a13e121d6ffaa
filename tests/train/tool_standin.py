"""A policy that calls a tool, for the tools run test (tests/train/test_tools_run.cpp).

  tool_standin.py OUT

Writes OUT/model: a Qwen2-shaped model (random start, the keys of tests/train/example_standins.py)
with a byte-level BPE tokenizer trained here, the chat template chatml_tools.jinja, then fine-tuned
with transformers on conversations in which the assistant calls multiply(a, b) of
tests/rollout/tool_corpus.py, reads its result and answers \\boxed{a*b}; and OUT/data/{train,test}.jsonl
(question: "What is a times b?", answer: "#### a*b"). Prints the fine-tune's last loss.
"""
import json
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "rollout"))
import example_standins  # noqa: E402
from tool_corpus import multiply  # noqa: E402


def messages(a, b):
    call = {"type": "function", "function": {"name": "multiply", "arguments": {"a": a, "b": b}}}
    return [{"role": "user", "content": f"What is {a} times {b}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "multiply", "content": str(a * b)},
            {"role": "assistant", "content": f"The answer is \\boxed{{{a * b}}}."}]


def main():
    try:
        import jinja2  # noqa: F401
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    out = sys.argv[1]
    model_dir, data_dir = os.path.join(out, "model"), os.path.join(out, "data")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(HERE, "chatml_tools.jinja")) as f:
        template = f.read()
    pairs = [(a, b) for a in range(2, 30) for b in range(2, 30)]
    random.Random(0).shuffle(pairs)
    train, test = pairs[:600], pairs[600:620]
    for name, rows in (("train", train), ("test", test)):
        with open(os.path.join(data_dir, name + ".jsonl"), "w") as f:
            for a, b in rows:
                f.write(json.dumps({"question": f"What is {a} times {b}?", "answer": f"#### {a * b}"}) + "\n")
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    entries = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    # The corpus: the rendered conversations, so the template's text takes few tokens.
    from transformers.utils import get_json_schema
    tools = [get_json_schema(multiply)]
    corpus_file = os.path.join(out, "corpus.txt")
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    render = env.from_string(template)
    with open(corpus_file, "w") as f:
        for a, b in train[:200]:
            f.write(render.render(tools=tools, messages=messages(a, b)) + "\n")
    example_standins.MAX_POSITIONS = 1024
    vocab, ids = example_standins.train_bpe(model_dir, corpus_file, specials, entries, "gsm8k")
    example_standins.make_model(model_dir, "gsm8k", "real", vocab, ids)
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({**entries, "chat_template": template, "model_max_length": 1024}, f, indent=2)
    print(f"{vocab}-token vocabulary; last loss {fine_tune(model_dir, train, tools)}")
    return 0


def fine_tune(model_dir, pairs, tools):
    from transformers import AutoTokenizer, Qwen2ForCausalLM
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = Qwen2ForCausalLM.from_pretrained(model_dir)
    texts = [tok.apply_chat_template(messages(a, b), tools=tools, tokenize=False) for a, b in pairs]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss = None
    for step in range(250):
        batch = [tok.encode(texts[(step * 8 + i) % len(texts)]) for i in range(8)]
        width = max(len(x) for x in batch)
        ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x in batch])
        labels = torch.tensor([x + [-100] * (width - len(x)) for x in batch])
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.float().save_pretrained(model_dir, safe_serialization=True)
    return round(loss.item(), 4)


if __name__ == "__main__":
    sys.exit(main())
