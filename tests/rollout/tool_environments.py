"""Environments for the ToolRunner tests (tests/rollout/test_tools.cpp). IncrementEnv is the
dataset-driven example of TRL 1.16's GRPO documentation ("Providing an external dataset"), unchanged
but for its full docstring; the others break TRL's contract one way each. `counters` is a TRL reward
function that reads the instances (environments=).
"""


class IncrementEnv:
    def reset(self, target, **kwargs) -> None:  # the row's `target` column arrives as a keyword argument
        self.counter = 0
        self.target = target

    def get_reward(self) -> float:
        return float(self.counter == self.target)

    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter


class GreetingEnv:
    """reset returns a string: TRL appends it to the last prompt message."""

    def reset(self, name, **kwargs) -> str:
        self.name = name
        return f" (You are talking to {name}.)"

    def _private(self) -> str:
        return "never a tool"

    def whoami(self) -> str:
        """
        Says who the user is.

        Returns:
            The user's name.
        """
        return self.name


class NoReset:
    def step(self, x: int) -> int:
        """
        Steps.

        Args:
            x: A number.
        """
        return x


class FailingReset:
    def reset(self, **kwargs) -> None:
        raise ValueError("no task for this row")


def counters(environments, trainer_state, target, **kwargs):
    """Each row's counter read off its instance, plus trainer_state.global_step / 100; None where the
    instance's target is not the row's `target` column (an instance of another row)."""
    return [float(e.counter) + trainer_state.global_step / 100 if e.target == t else None
            for e, t in zip(environments, target)]
