"""Bugs put into the finished pocketlib, read by ``skyrl_gym/envs/swe/_make_bundle.py`` to write
``data/swesmith.jsonl``: task rows in SWE-smith's published shape.

SWE-smith makes a task by breaking a repository whose tests pass: each entry below names the
text to break (``bug``: the good text and the buggy text that replaces it, in the listed file),
a bug kind in SWE-smith's naming (``func_pm_op_change``: an operator changed in a function), and
the issue an agent sees. The bundle script applies each bug to the last commit of
``pocketlib.bundle``, takes the diff as the row's ``patch``, and runs the whole suite with and
without it: ``FAIL_TO_PASS`` are the tests the bug breaks, ``PASS_TO_PASS`` the rest.
"""

BUGS = [
    {
        "kind": "func_pm_op_change",
        "bug": [
            (
                "pocketlib/roman.py",
                "if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:",
                "if i + 1 < len(text) and _DIGITS[text[i + 1]] >= value:",
            )
        ],
        "problem_statement": """\
from_roman gets repeated numerals wrong

Numerals that repeat a letter come out too small:

    >>> from pocketlib.roman import from_roman
    >>> from_roman("III")
    1
    >>> from_roman("VIII")
    4

Expected 3 and 8. Subtractive pairs such as "IV" and "MCMXCIV" are still read correctly, so
`from_roman(to_roman(n)) == n` fails only for some n.
""",
    },
    {
        "kind": "func_pm_op_change",
        "bug": [
            (
                "pocketlib/versions.py",
                "width = max(len(left), len(right))",
                "width = min(len(left), len(right))",
            )
        ],
        "problem_statement": """\
versions.compare: "1.0" and "1.0.0" are not equal

A version with a trailing zero part should compare equal to the same version without it:

    >>> from pocketlib.versions import compare
    >>> compare("1.0", "1.0.0")
    -1

Expected 0. Versions with the same number of parts compare correctly.
""",
    },
]
