"""The bug-fix history of ledgerlite, read by ``skyrl_gym/envs/swe/_make_bundle.py``.

A ``unittest`` project run by ``tox`` (or ``python -m unittest discover``), so its tests are
methods of ``TestCase`` classes, named ``Class.method`` below. Same shape as pocketlib's spec:
each task's ``fix`` is the fixed text and the buggy text it replaces, ``tests`` the tests that
came with the fix.
"""

TASKS = [
    {
        "name": "one-decimal-digit",
        "problem_statement": """\
parse_amount reads "12.5" as 12.05

    >>> from ledgerlite.money import parse_amount
    >>> parse_amount("12.5")
    1205

A single decimal digit means tens of cents: "12.5" is 12 euros 50 cents, so the result should be
1250 (and "0.1" should be 10, not 1).
""",
        "fix": [("ledgerlite/money.py", 'int(frac.ljust(2, "0") or 0)', "int(frac or 0)")],
        "tests": {"tests/test_money.py": ["TestParseAmount.test_one_decimal_digit_means_tens_of_cents"]},
    },
    {
        "name": "negative-format",
        "problem_statement": """\
format_cents prints negative amounts wrong

`format_cents(-5)` gives "-1.95" and `format_cents(-123456)` gives "-1,235.44"; they should be
"-0.05" and "-1,234.56". Positive amounts are fine.
""",
        "fix": [
            (
                "ledgerlite/money.py",
                """\
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{frac:02d}"
""",
                """\
    whole, frac = divmod(cents, 100)
    return f"{whole:,}.{frac:02d}"
""",
            )
        ],
        "tests": {"tests/test_money.py": ["TestFormatCents.test_negative_amounts_keep_their_cents"]},
    },
    {
        "name": "balance-until",
        "problem_statement": """\
Ledger.balance(until=day) leaves out the entries of that day

The docstring says the balance covers the entries up to and including `until`, but an entry
dated exactly `until` is not counted: with rent paid on 2026-01-05,
`balance("cash", until=date(2026, 1, 5))` still shows the cash before the rent.
""",
        "fix": [("ledgerlite/ledger.py", "e.day > until", "e.day >= until")],
        "tests": {"tests/test_ledger.py": ["TestLedger.test_balance_until_includes_that_day"]},
    },
]
