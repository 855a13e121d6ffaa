"""A TRL-style reward function that reads the conversation: with tools, TRL's GRPOTrainer gives
reward functions each completion as messages (the assistant turns with their tool_calls, then the
tool messages). Used by ToolsRun.RewardFunctionsReceiveTheConversation (tests/train/test_tools_run.cpp).
And a verl-style one (read_the_product) for ToolsRun.VerlFunctionsReadTheWholeResponse: verl's reward
managers give compute_score the whole multi-turn response as solution_str, the tools' results in it.

Scores 1.0 when some assistant turn called multiply(a, b) and the tool message answering that call
holds a * b; 0.0 otherwise. A completion that is not a list of message dicts raises (the test expects
no reward error).
"""


def used_the_product(prompts, completions, **kwargs):
    scores = []
    for messages in completions:
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise TypeError(f"the completion is not a list of messages: {messages!r}")
        score = 0.0
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            answers = messages[i + 1:i + 1 + len(m["tool_calls"])]
            for call, answer in zip(m["tool_calls"], answers):
                f = call["function"]
                if answer["role"] != "tool" or answer["name"] != f["name"] or f["name"] != "multiply":
                    continue
                args = f["arguments"]
                if isinstance(args, dict) and answer["content"] == str(args.get("a", 0) * args.get("b", 0)):
                    score = 1.0
        scores.append(score)
    return scores


def read_the_product(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when solution_str holds a multiply(a, b) call and, after it, the product a * b (the tool's
    result); 0.0 otherwise."""
    import json
    import re
    for m in re.finditer(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", solution_str, flags=re.S):
        try:
            call = json.loads(m.group(1))
            args = call["arguments"]
            if call["name"] == "multiply" and str(args["a"] * args["b"]) in solution_str[m.end():]:
                return 1.0
        except (ValueError, KeyError, TypeError):
            continue
    return 0.0
