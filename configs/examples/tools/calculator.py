"""The example's user tool (configs/examples/tools_qwen2.5.yaml): a calculator written as TRL and
transformers take tools, a typed Python function with a Google-style docstring, from which the
JSON schema the model sees is derived. It runs on Unstuck's tool workers, out of process.
"""
import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.USub: operator.neg}


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ZeroDivisionError("division by zero")
        if abs(left) > 10**30 or abs(right) > 10**30:
            raise ValueError("numbers above 10**30 are not supported")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    raise ValueError("only integers and + - * // % ( ) are allowed")


def calculate(expression: str) -> str:
    """
    Evaluates an integer arithmetic expression exactly.

    Args:
        expression: Integers with + - * // % and parentheses, for example "4213 * 587 - 1200".

    Returns:
        The value of the expression.
    """
    if len(expression) > 200:
        raise ValueError("the expression is longer than 200 characters")
    return str(_value(ast.parse(expression, mode="eval").body))
