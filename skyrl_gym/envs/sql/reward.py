"""The text2sql reward: a format check over the model's own turns, then execution match.

The exact rule (``grade``), applied once, when the episode ends:

1. Only the model's turns are read, in order; the env's observations are not the model's text
   and are left out (a hint that shows the tags, such as ``<sql>``, can never count as the
   model's). Every turn but the last was answered by an observation. The turns are **well
   formed** when all of these hold, else the reward is **-1**:
   * exactly one ``<solution>`` and exactly one ``</solution>`` in all the turns, both in the
     same turn, the opening one first;
   * no ``think``, ``sql`` or ``observation`` tag (opening or closing, any case) inside the
     solution;
   * at least one ``<think>...</think>`` pair;
   * the model starts each turn after an observation by thinking: every turn after the first,
     up to the one with the solution, starts (after whitespace, any case) with ``<think>``; and
     an ``</observation>`` the model writes itself, before the solution, is followed in the
     same turn by ``<think>``.
   An episode that reaches ``max_turns`` without a solution is therefore malformed (-1).
2. The solution's text (stripped, and unwrapped from a ```` ```sql ```` fence if there is one)
   and the gold SQL are run on the database, each with the grading deadline (30 s).
3. The reward is **1** when both ran and their rows match, else **0**. Rows match when the
   two results, taken as sets of row tuples, are equal (``row_match="set"``, the published
   rule): row order and duplicate rows are ignored, column names are ignored, column order
   matters, and values compare with Python's ``==`` (so ``1 == 1.0``, and ``0.1 + 0.2`` is not
   ``0.3``). ``row_match="multiset"`` also counts duplicates. A predicted query that fails,
   times out or returns more than ``grade_max_rows`` rows scores 0.
4. If the *gold* SQL fails, the reward is 0 and ``Grade.grading_error`` says why: that is a data
   problem, not the model's, and the runtime can leave the episode out of training.

Rule 1 gives the published env's verdict on every episode of the published env (whose check
reads the model's turns and the observations joined, and whose observations hold no
``<solution>``), without letting an observation's text decide it.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from pathlib import Path

from skyrl_gym.envs.sql.executor import execute
from skyrl_gym.envs.sql.types import ExecutorLimits, Grade, QueryResult, QueryStatus, RowMatch

__all__ = ["check_format", "extract_solution", "rows_match", "grade"]

_SOLUTION = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)
_INNER_TAG = re.compile(r"</?(?:think|sql|observation)\b", re.IGNORECASE)
_THINK_PAIR = re.compile(r"<think>.*?</think>", re.DOTALL)
_OBSERVATION_END = re.compile(r"</observation>", re.IGNORECASE)
_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def _as_turns(turns: str | Sequence[str]) -> list[str]:
    return [turns] if isinstance(turns, str) else [t if isinstance(t, str) else "" for t in turns]


def _starts_with_think(text: str) -> bool:
    return text.lstrip().lower().startswith("<think>")


def check_format(turns: str | Sequence[str]) -> tuple[bool, str]:
    """``(True, "")`` when the model's ``turns`` are well formed (rule 1 above), else
    ``(False, why)``. ``turns`` holds the model's turns only, in order; a string is one turn."""
    turns = _as_turns(turns)
    text = "".join(turns)
    opens, closes = text.count("<solution>"), text.count("</solution>")
    if opens != 1 or closes != 1:
        return (
            False,
            f"expected exactly one <solution>...</solution>, found {opens} opening and {closes} closing tags",
        )
    last = next(i for i, turn in enumerate(turns) if "<solution>" in turn)
    turn = turns[last]
    head, _, tail = turn.partition("<solution>")
    if "</solution>" not in tail:
        if "</solution>" in text[: text.index("<solution>")]:
            return False, "</solution> comes before <solution>"
        return False, "</solution> is in a later turn than <solution>"
    inner = tail.partition("</solution>")[0]
    tag = _INNER_TAG.search(inner)
    if tag is not None:
        return False, f"the solution contains the tag {tag.group(0)!r}"
    if _THINK_PAIR.search(text) is None:
        return False, "no <think>...</think> in the model's turns"
    for n in range(1, last + 1):
        if not _starts_with_think(turns[n]):
            return False, f"turn {n + 1} follows an observation but does not start with <think>"
    for n, piece in enumerate([*turns[:last], head]):
        for match in _OBSERVATION_END.finditer(piece):
            if not _starts_with_think(piece[match.end() :]):
                return False, f"an </observation> written in turn {n + 1} is not followed by <think>"
    return True, ""


def extract_solution(text: str) -> str | None:
    """The SQL inside the first ``<solution>...</solution>``, unwrapped from a code fence."""
    match = _SOLUTION.search(text)
    if match is None:
        return None
    sql = match.group(1).strip()
    fenced = _FENCE.match(sql)
    return fenced.group(1).strip() if fenced else sql


def rows_match(predicted: tuple[tuple, ...], gold: tuple[tuple, ...], mode: RowMatch = "set") -> bool:
    """Whether two results match under ``mode`` (see the module docstring, rule 3)."""
    if mode == "set":
        return set(predicted) == set(gold)
    if mode == "multiset":
        return Counter(predicted) == Counter(gold)
    raise ValueError(f"unknown row_match {mode!r}; use 'set' or 'multiset'")


# Gold results are the same for every sample of a prompt: keep the recent ones.
_GOLD_CACHE_SIZE = 256
_gold_cache: OrderedDict[tuple, QueryResult] = OrderedDict()
_gold_lock = threading.Lock()


def _gold_result(db_file: Path, gold_sql: str, limits: ExecutorLimits) -> QueryResult:
    try:
        stat = db_file.stat()
        key: tuple | None = (str(db_file), stat.st_mtime_ns, stat.st_size, gold_sql, limits)
    except OSError:
        key = None
    if key is not None:
        with _gold_lock:
            hit = _gold_cache.get(key)
            if hit is not None:
                _gold_cache.move_to_end(key)
                return hit
    result = execute(
        db_file, gold_sql, limits=limits, timeout_s=limits.grade_timeout_s, max_rows=limits.grade_max_rows
    )
    if key is not None and result.ok:
        with _gold_lock:
            _gold_cache[key] = result
            while len(_gold_cache) > _GOLD_CACHE_SIZE:
                _gold_cache.popitem(last=False)
    return result


def grade(
    turns: str | Sequence[str],
    gold_sql: str,
    db_file: str | Path,
    *,
    limits: ExecutorLimits | None = None,
    row_match: RowMatch = "set",
) -> Grade:
    """Score the model's ``turns`` (its turns only, in order) against ``gold_sql`` on ``db_file``
    (the rule above)."""
    limits = limits or ExecutorLimits()
    ok, why = check_format(turns)
    solution = extract_solution("".join(_as_turns(turns)))
    if not ok:
        return Grade(-1.0, False, why, solution)
    assert solution is not None  # a well-formed trajectory has a solution
    db_file = Path(db_file)
    predicted = execute(
        db_file, solution, limits=limits, timeout_s=limits.grade_timeout_s, max_rows=limits.grade_max_rows
    )
    gold = _gold_result(db_file, gold_sql, limits)
    if not gold.ok or gold.more_rows:
        why = gold.message or f"the gold result has more than {limits.grade_max_rows} rows"
        return Grade(
            0.0, True, "", solution, predicted, grading_error=f"gold SQL failed ({gold.status}): {why}"
        )
    if predicted.status is not QueryStatus.OK or predicted.more_rows:
        return Grade(0.0, True, "", solution, predicted)
    return Grade(
        1.0 if rows_match(predicted.rows, gold.rows, row_match) else 0.0, True, "", solution, predicted
    )
