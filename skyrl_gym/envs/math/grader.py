"""A math answer checker: are two final answers the same value?

``answers_equal(pred, truth)`` understands integers and decimals with thousands separators,
currency and units around a number, percentages, fractions (``3/4``, ``\\frac{3}{4}``,
``\\frac34``, ``\\dfrac``, ``\\tfrac``), mixed numbers (``1\\frac{1}{2}``), simple arithmetic
(``2\\cdot 3``, ``10^{2}``, ``1e3``), ``\\boxed{...}`` and ``\\text{...}`` wrappers, ``x = 5``
assignments and tuples/lists compared element by element. Values are compared exactly with
``fractions.Fraction`` (decimals are exact: ``0.1 + 0.2 == 0.3``). Anything that is not a number
is compared as a normalized string (spaces, ``\\left``/``\\right``, ``\\!`` dropped).

The checker never raises on a model's text: unparsable input compares as a string.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

__all__ = [
    "answers_equal",
    "extract_boxed",
    "extract_gsm8k_answer",
    "parse_number",
    "normalize_answer",
    "safe_eval",
]

_MAX_POWER = 64
_MAX_LEN = 512


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        rest = text[start:].split(maxsplit=1)  # "\boxed 5"
        return rest[1].split("$")[0].strip() if len(rest) > 1 else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


_GSM8K_RE = re.compile(r"####\s*\$?\s*(-?\s*\$?[0-9][0-9.,]*)")


def extract_gsm8k_answer(text: str) -> str | None:
    """The number after the last ``####`` marker (GSM8K's answer format), or ``None``."""
    matches = _GSM8K_RE.findall(text)
    if not matches:
        return None
    value = re.sub(r"[\s,$]", "", matches[-1]).rstrip(".")
    return value or None


def _strip_wrappers(s: str) -> str:
    s = s.strip()
    boxed = extract_boxed(s)
    if boxed is not None:
        s = boxed
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox|operatorname)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(left|right|displaystyle|,|!|;|:| )", "", s)
    s = s.replace("\\%", "%").replace("\\$", "$")
    s = re.sub(r"^[A-Za-z]\w*\s*=\s*", "", s)  # "x = 5" -> "5"
    s = s.rstrip(".").strip()
    return s


def _frac_to_slash(s: str) -> str:
    # \frac{a}{b}, \dfrac{a}{b}, \frac ab, \frac34 -> ((a)/(b))
    pattern = re.compile(r"\\[dt]?frac\s*(\{[^{}]*\}|\d)\s*(\{[^{}]*\}|\d)")
    for _ in range(8):
        new = pattern.sub(lambda m: f"(({m.group(1).strip('{}')})/({m.group(2).strip('{}')}))", s)
        if new == s:
            break
        s = new
    return s


def safe_eval(expr: str) -> Fraction | None:
    """Evaluate +, -, *, /, ^ over exact numbers; ``None`` if ``expr`` is anything else."""
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError):
        return None

    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = ev(node.operand)
            return v if isinstance(node.op, ast.UAdd) else -v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div):
                return a / b
            if isinstance(node.op, ast.Pow) and b.denominator == 1 and abs(b) <= _MAX_POWER:
                return a**b.numerator
        raise ValueError("unsupported")

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, OverflowError, RecursionError, TypeError):
        return None


def parse_number(text: str) -> Fraction | None:
    """The exact value of a numeric answer, or ``None`` when it is not one."""
    if not isinstance(text, str) or len(text) > _MAX_LEN:
        return None
    s = _strip_wrappers(text)
    percent = s.endswith("%")
    s = s.rstrip("%").strip()
    s = s.replace("$", "").replace("€", "").replace("£", "")
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)  # thousands separators
    s = re.sub(r"\s*(?:[a-zA-Z]+\.?\s*)+$", "", s) if re.match(r"^-?[\d.]", s) else s  # "5 apples"
    s = re.sub(r"(\d)\s*\\[dt]?frac", r"\1+\\frac", s)  # mixed number 1\frac{1}{2}
    s = _frac_to_slash(s)
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("×", "*").replace("÷", "/")
    s = s.replace("^", "**").replace("{", "(").replace("}", ")")
    s = re.sub(r"(\d)\s*\(", r"\1*(", s)
    s = re.sub(r"(\d(?:\.\d+)?)[eE]([+-]?\d+)", r"(\1*10**(\2))", s)
    if not s or not re.fullmatch(r"[\d\s.+\-*/()]+", s):
        return None
    value = safe_eval(s)
    if value is None:
        return None
    return value / 100 if percent else value


def normalize_answer(text: str) -> str:
    """A canonical string for non-numeric answers (case, spaces and wrappers removed)."""
    s = _strip_wrappers(text)
    s = _frac_to_slash(s)
    s = re.sub(r"\\sqrt\s*(\d)", r"\\sqrt{\1}", s)
    return re.sub(r"\s+", "", s).lower()


def _split_tuple(s: str) -> list[str] | None:
    s = _strip_wrappers(s)
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and "," in s:
        inner = s[1:-1]
        depth, parts, cur = 0, [], ""
        for ch in inner:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return [p.strip() for p in parts]
    return None


def answers_equal(pred: str | None, truth: str | int | float | None) -> bool:
    """True when ``pred`` and ``truth`` denote the same answer (see the module docstring)."""
    if pred is None or truth is None:
        return False
    pred, truth = str(pred), str(truth)
    if len(pred) > 4 * _MAX_LEN:
        return False
    pt, tt = _split_tuple(pred), _split_tuple(truth)
    if pt is not None and tt is not None:
        return len(pt) == len(tt) and all(answers_equal(a, b) for a, b in zip(pt, tt, strict=True))
    a, b = parse_number(pred), parse_number(truth)
    if a is not None and b is not None:
        return a == b
    if a is not None or b is not None:
        # "50%" vs "0.5" handled above; one side numeric, the other not: different answers
        return False
    return normalize_answer(pred) == normalize_answer(truth)
