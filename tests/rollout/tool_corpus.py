"""Tool functions written as TRL and transformers users write them, for the schema parity test
(tool_schema_parity.py) and the tool-calling tests. Each is a plain function with type hints and a
Google-style docstring; some are built to break the derivation (see BROKEN)."""
import enum
from typing import Any, Dict, List, Literal, Optional, Tuple, Union


def multiply(a: int, b: int) -> int:
    """
    Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product of the two integers.
    """
    return a * b


def get_current_temperature(location: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> float:
    """
    Get the current temperature at a location.

    Args:
        location: The location to get the temperature for, in the format "City, Country"
        unit: The unit to return the temperature in.
    Returns:
        The current temperature at the specified location in the specified units, as a float.
    """
    return 22.0 if unit == "celsius" else 71.6


def python(code: str) -> str:
    """Run Python code and return what it prints.

    Args:
        code (str): The program. Its standard output is the result;
            an exception's last line is returned instead.
    """
    return code


def drink(beverage: str, sugar: Optional[int] = None):
    """
    A function that drinks a beverage

    Args:
        beverage: The beverage to drink (choices: ["tea", "coffee"])
        sugar: Spoons of sugar, if any
    """
    return beverage


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


def paint(color: Color, layers: Union[int, float], tags: list[str], weights: Dict[str, float]) -> None:
    """Paints something.

    Args:
        color: The color.
        layers: How many layers.
        tags: Labels to attach.
        weights: A weight per label.
    """


def span(bounds: Tuple[int, str], anything: Any, maybe: int | str | None = 3, nested: List[list[int]] = None):
    """Several kinds of hints at once.

    Args:
        bounds: A pair.
        anything: Whatever it is.
        maybe: An int or a string.
        nested: Lists of lists.
    Raises:
        ValueError: never.
    """


def lookup(key: str, mode: Literal[1, "two", True] = 1) -> dict[str, int]:
    """Looks up a key.

    Args:
        key: The key,
             written on two lines.
        mode (int or str): How to look.

    Returns:
        A mapping
        on two lines.
    """
    return {key: 1}


async def fetch_page(url: str) -> str:
    """Fetch a page (an async tool: TRL awaits it).

    Args:
        url: The address.
    """
    return "<html>" + url + "</html>"


def no_args() -> str:
    """Returns the time of day."""
    return "noon"


def custom_return(x: float) -> Color:
    """A return hint without a description.

    Args:
        x: A number.
    """
    return Color.RED


class Calculator:
    def add(self, a: float, b: float) -> float:
        """Adds two numbers.

        Args:
            a: First.
            b: Second.
        """
        return a + b


calculator_add = Calculator().add
calculator_add_unbound = Calculator.add


# Functions whose schema cannot be derived: both derivations must refuse them.
def undocumented(x: int):
    return x


def untyped(x, y: int):
    """Missing a hint.

    Args:
        x: one
        y: two
    """


def undescribed(x: int, y: int):
    """Describes one argument only.

    Args:
        x: one
    """


class Opaque:
    pass


def custom_class(x: Opaque):
    """A custom class.

    Args:
        x: something
    """


def single_tuple(x: Tuple[int]):
    """A one-element tuple.

    Args:
        x: something
    """


TOOLS = ["multiply", "get_current_temperature", "python", "drink", "paint", "span", "lookup", "fetch_page",
         "no_args", "custom_return", "calculator_add", "calculator_add_unbound"]
BROKEN = ["undocumented", "untyped", "undescribed", "custom_class", "single_tuple"]


def sleepy(seconds: float) -> str:
    """Sleeps, for the timeout test (not in TOOLS).

    Args:
        seconds: How long.
    """
    import time
    time.sleep(seconds)
    return "awake"
