"""A TRL environment_factory class for the tools test (ToolsRun.AnEnvironmentOwnsItsStateAndReward in
tests/train/test_tools_run.cpp), written as TRL 1.16's documentation writes them: reset(**row) takes
the dataset row's columns and returns the rest of the question (the record's prompt is "What is";
TRL appends the string reset returns to the last prompt message), the public method multiply is the
policy's tool (the same name, hints and docstring as tests/rollout/tool_corpus.py's, which the
stand-in policy learned to call), and get_reward() scores the rollout from the instance's own state:
the number of products it computed (so a row's reward counts its own calls only when each row has its
own instance). LongWinded's reset returns more than the context holds for every row without a `short`
column (unstuck's own check names it in training, evaluation and `unstuck generate`). `abstain` is a TRL reward function that returns None (not applicable) for every
completion, so a row's reward is the environment's alone, as TRL's nansum of the sources makes it.
`products_seen` reads the instances TRL passes reward functions as `environments` (the form of TRL's
grpo_2048 example, reward_score(environments, **kwargs)): each row's products; an instance that is
not this file's MultiplyEnv, or a count of instances other than of completions, scores None.
"""


class MultiplyEnv:
    def reset(self, a, b, answer, **kwargs) -> str | None:
        self.answer = int(answer)
        self.products = []
        return f" {a} times {b}?"

    def get_reward(self) -> float:
        return float(len(self.products))

    def multiply(self, a: int, b: int) -> int:
        """
        Multiplies two integers.

        Args:
            a: The first integer.
            b: The second integer.

        Returns:
            The product of the two integers.
        """
        self.products.append(a * b)
        return a * b


class LongWinded(MultiplyEnv):
    def reset(self, short=False, **kwargs) -> str | None:
        self.products = []
        return None if short else " Think it over." * 400


def abstain(completions, **kwargs):
    return [None for _ in completions]


def products_seen(environments, completions, **kwargs):
    if len(environments) != len(completions):
        return [None for _ in completions]
    return [float(len(e.products)) if isinstance(e, MultiplyEnv) else None for e in environments]
