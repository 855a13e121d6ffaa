"""TRL 1.16's own tool-calling loop, unchanged, on scripted model turns: the reference of the token and
mask parity test (tests/rollout/test_tools.cpp, TrlToolParity).

  trl_tool_loop.py OUT [qwen|llama]

Builds a Qwen2-style model directory with a byte-level BPE tokenizer (tests/train/example_standins.py),
gives it TRL's shipped Qwen2.5 chat template (trl/chat_templates/qwen2_5.jinja, with its tools
branch), renders the prompts with the tools of tool_corpus.py as GRPOTrainer does, then runs
GRPOTrainer._get_tool_suffix_ids and GRPOTrainer._tool_call_loop (called on a stand-in `self` that
holds what they read) with each row's turns scripted as token ids. With `llama`: a Llama-3-style
byte-level BPE tokenizer and TRL's shipped Llama 3.1 template, whose tool calls are bare JSON
{"name": ..., "parameters": ...} turns and whose tool results are ipython messages. Writes OUT/trl.json: per row the
prompt ids, the scripted turns, and TRL's completion ids and tool mask. Exit 77 without trl.
"""
import json
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from tool_schema_parity import module  # noqa: E402
TOOLS = ["multiply", "get_current_temperature"]
MAX_COMPLETION = 400

USER = ["What is 6 times 7?", "Weather in Paris, and 2 times 3?", "What is 2 + 3?", "Multiply 1 by 2.",
        "Multiply a lot."]
# Each row's turns: the first is what generation gave, the others come after each round of tools.
TURNS = [
    ['<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call><|im_end|>',
     "The product is 42.<|im_end|>"],
    ['Let me check.\n<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "Paris, France"}}\n'
     '</tool_call>\n<tool_call>\n{"name": "multiply", "arguments": {"a": 2}}\n</tool_call><|im_end|>',
     '<tool_call>\n{"name": "divide", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>',
     "Done: 22 degrees.<|im_end|>"],
    ["No tool is needed: 5.<|im_end|>"],
    ['<tool_call>\n{"name": "multiply", "arguments": {"a": 1</tool_call><|im_end|>'],
    # Long enough that the second round's results would pass max_completion_length: TRL drops them.
    ['<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 3}}\n</tool_call><|im_end|>',
     "step " * 190 + ' <tool_call>\n{"name": "multiply", "arguments": {"a": 11111, "b": 11111}}\n</tool_call><|im_end|>',
     "never sampled<|im_end|>"],
]
# The Llama 3.1 template's rows: a call is a whole turn of bare JSON, one per turn.
LLAMA_TURNS = [
    ['{"name": "multiply", "parameters": {"a": 6, "b": 7}}<|eot_id|>', "The product is 42.<|eot_id|>"],
    ['Let me check. {"name": "get_current_temperature", "parameters": {"location": "Paris, France"}}<|eot_id|>',
     '{"name": "multiply", "parameters": {"a": 2}}<|eot_id|>',
     '{"name": "divide", "parameters": {"a": 1, "b": 2}}<|eot_id|>',
     "Done: 22 degrees.<|eot_id|>"],
    ["No tool is needed: 5.<|eot_id|>"],
    ['{"name": "multiply", "parameters": {"a": 1}<|eot_id|>'],
    ['{"name": "multiply", "parameters": {"a": 3, "b": 3}}<|eot_id|>',
     "step " * 255 + '{"name": "multiply", "parameters": {"a": 11111, "b": 11111}}<|eot_id|>',
     "never sampled<|eot_id|>"],
]
LLAMA_PROBES = [
    '{"name": "multiply", "parameters": {"a": 6, "b": 7}}<|eot_id|>',
    '  {"name": "multiply", "parameters": {"a": 6, "b": 7}}<|eot_id|>',
    '  The answer is 42.  <|eot_id|>',
    'Let me call. {"name": "multiply", "parameters": {"a": 6, "b": 7}}<|eot_id|>',
    '{"name": "multiply", "parameters": {"a": 6, "b": 7}} trailing<|eot_id|>',
    '{"name": "multiply", "parameters": {"a": 6, "b": 7}}',
    '{"name": "multiply", "parameters": "x"}<|eot_id|>',
    '{"name": "multiply", "arguments": {"a": 6}}<|eot_id|>',
    '{"name":"multiply","parameters":{"a":6}}<|eot_id|>',
    '{"name": "multiply", "parameters": {"a": 6, "b": 7}<|eot_id|>',
    '{"parameters": {"a": 6}, "name": "multiply"}<|eot_id|>',
    '{"name": "multiply", "parameters": {"a": 6}, "extra": 1}<|eot_id|>',
    '{"name": "multiply", "parameters": null}<|eot_id|>',
    'x <|start_header_id|>y<|eot_id|>',
]

# Single assistant turns for parse_response (the messages reward functions get): trimming, the last
# stretch of text, <think>, several calls, null or non-object arguments, malformed and unclosed blocks.
PROBES = [
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 1}}\n</tool_call><|im_end|>',
    '  Hello there.  \n<|im_end|>',
    'Hi\n\n<tool_call>\n{"name": "multiply", "arguments": {"a": 1}}\n</tool_call>\nafter text<|im_end|>',
    'A<tool_call>{"name": "m", "arguments": {"a": 1}}</tool_call> mid <tool_call>{"name": "n"}</tool_call><|im_end|>',
    '<think>\nhmm, 6*7\n</think>\n\nAnswer 42<|im_end|>',
    '<think>\nuse the tool\n</think>\n<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call><|im_end|>',
    'cut at the limit',
    '<tool_call>\n{"name": "m", "arguments": "6, 7"}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "m", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\n{"name": "n", "arguments": null}\n</tool_call>\n<|im_end|>',
    'text <b> &amp; <|endoftext|> more<|im_end|>',
    '<tool_call>[1, 2]</tool_call><|im_end|>',
    '<tool_call>{"arguments": {}}</tool_call><|im_end|>',
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 1',
    'x <tool_call>{"name": "m", "arguments": {}}</tool_call> <|im_start|>user<|im_end|>',
]


def main():
    out = sys.argv[1]
    llama = len(sys.argv) > 2 and sys.argv[2] == "llama"
    try:
        import trl  # noqa: F401
        from trl.chat_template_utils import (add_response_schema, llama3_1_chat_template, parse_response,
                                             qwen2_5_chat_template)
        from trl.trainer.grpo_trainer import GRPOTrainer
        from transformers import AutoTokenizer
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    os.makedirs(out, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/train/example_standins.py"), out,
                    "math" if llama else "gsm8k", "real"],
                   check=True, stdout=subprocess.DEVNULL)
    model_dir = os.path.join(out, "model")
    config_path = os.path.join(model_dir, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["chat_template"] = llama3_1_chat_template if llama else qwen2_5_chat_template
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    tok = add_response_schema(AutoTokenizer.from_pretrained(model_dir))
    corpus = module(os.path.join(HERE, "tool_corpus.py"), "tool_corpus")
    tools = [getattr(corpus, n) for n in TOOLS]
    prompts = [[{"role": "user", "content": u}] for u in USER]
    prompt_ids = [tok.apply_chat_template(p, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
                  for p in prompts]
    turns = [[tok.encode(t, add_special_tokens=False) for t in row] for row in (LLAMA_TURNS if llama else TURNS)]
    later = {i: list(row[1:]) for i, row in enumerate(turns)}

    def generate_single_turn(ids, images, fields, num_generations=1, has_tool_images=False):
        rows = [next(i for i, p in enumerate(prompt_ids) if list(x[:len(p)]) == p) for x in ids]
        out_ids = [later[r].pop(0) for r in rows]
        return out_ids, [[-0.5] * len(x) for x in out_ids]

    me = types.SimpleNamespace(
        tools=tools, _sync_tool_dicts=[{f.__name__: f for f in tools} for _ in prompts],
        _async_tool_dicts=[{} for _ in prompts], max_tool_calling_iterations=sys.maxsize, use_vllm=False,
        model=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=4096)), _is_vlm=False,
        max_completion_length=MAX_COMPLETION, environment_factories=None, _tokenizer=tok, processing_class=tok,
        chat_template=None, chat_template_kwargs={}, _generate_single_turn=generate_single_turn)
    me._get_tool_suffix_ids = lambda messages: GRPOTrainer._get_tool_suffix_ids(me, messages)
    completion_ids = [list(row[0]) for row in turns]
    completions = [[parse_response(tok, ids, prefix=prompt_ids[i], tools=tools)] for i, ids in enumerate(completion_ids)]
    logprobs = [[-0.5] * len(x) for x in completion_ids]
    tool_mask, completions, completion_ids, logprobs, calls, failures, _ = GRPOTrainer._tool_call_loop(
        me, [list(p) for p in prompts], prompt_ids, completion_ids, completions, logprobs, None, {})
    result = {"model_dir": model_dir, "tools": TOOLS, "corpus": os.path.join(HERE, "tool_corpus.py"),
              "max_completion_length": MAX_COMPLETION, "tool_calls": calls, "tool_failures": failures,
              "rows": [{"user": USER[i], "prompt_ids": prompt_ids[i], "turns": turns[i],
                        "completion_ids": completion_ids[i], "tool_mask": tool_mask[i], "logprobs": logprobs[i],
                        "messages": completions[i]}
                       for i in range(len(USER))]}
    probe_ids = [tok.encode(t, add_special_tokens=False) for t in (LLAMA_PROBES if llama else PROBES)]
    result["parsed"] = [{"ids": ids, "message": parse_response(tok, ids, prefix=prompt_ids[0], tools=tools)}
                        for ids in probe_ids]
    with open(os.path.join(out, "trl.json"), "w") as f:
        json.dump(result, f)
    print(f"{len(USER)} rows, {calls} tool calls, {failures} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
