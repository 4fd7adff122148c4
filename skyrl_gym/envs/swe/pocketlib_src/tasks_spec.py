"""The bug-fix history of pocketlib, read by ``skyrl_gym/envs/swe/_make_bundle.py``.

The tree next to this file is the *fixed* library with its full test suite. Each task below
names a real bug (``fix``: the fixed text and the buggy text it replaces, in the listed file)
and the tests that came with its fix (``tests``: test functions per file). The bundle script
starts from the tree with every bug put back and every task's tests taken out, then commits the
fixes one task at a time: the commit before a task's fix is its ``base_commit``, the fix is its
gold ``patch`` and the tests are its ``test_patch``.
"""

TASKS = [
    {
        "name": "merge-touching",
        "problem_statement": """\
intervals.merge does not merge touching intervals

Closed intervals that share an end point should be merged, but they are kept apart:

    >>> from pocketlib.intervals import merge
    >>> merge([(1, 3), (3, 5)])
    [(1, 3), (3, 5)]

Expected `[(1, 5)]`; a chain such as `[(1, 2), (2, 3), (3, 4)]` should become `[(1, 4)]`.
""",
        "fix": [
            (
                "pocketlib/intervals.py",
                "if result and start <= result[-1][1]:",
                "if result and start < result[-1][1]:",
            )
        ],
        "tests": {
            "tests/test_intervals.py": ["test_merge_touching_intervals", "test_merge_chain_of_touching"]
        },
    },
    {
        "name": "version-compare",
        "problem_statement": """\
versions.compare orders 1.10 before 1.9

`compare("1.10.0", "1.9.0")` returns -1, and so `latest(["1.9", "1.10"])` returns "1.9".
The parts of a version should be compared as numbers, not as text.
""",
        "fix": [
            (
                "pocketlib/versions.py",
                """\
    left = [int(p) for p in a.split(".")]
    right = [int(p) for p in b.split(".")]
    width = max(len(left), len(right))
    left += [0] * (width - len(left))
    right += [0] * (width - len(right))
""",
                """\
    left = a.split(".")
    right = b.split(".")
    width = max(len(left), len(right))
    left += ["0"] * (width - len(left))
    right += ["0"] * (width - len(right))
""",
            )
        ],
        "tests": {"tests/test_versions.py": ["test_compare_multi_digit_parts", "test_latest_multi_digit"]},
    },
    {
        "name": "lru-get-recency",
        "problem_statement": """\
LRUCache.get does not count as a use

After reading a key with `get`, it is still evicted first:

    cache = LRUCache(2)
    cache.put("a", 1); cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)   # evicts "a", but "b" is the least recently used

`keys()` shows the wrong order after a `get` as well.
""",
        "fix": [
            (
                "pocketlib/lru.py",
                """\
            return default
        self._items.move_to_end(key)
        return self._items[key]
""",
                """\
            return default
        return self._items[key]
""",
            )
        ],
        "tests": {"tests/test_lru.py": ["test_get_refreshes_recency", "test_keys_order_after_get"]},
    },
    {
        "name": "csv-doubled-quotes",
        "problem_statement": '''\
csvline.split_line mangles doubled quotes

In a quoted field, `""` stands for one quote character (RFC 4180), but

    >>> split_line('"say ""hi""",2')

returns `['say hi', '2']` instead of `['say "hi"', '2']`.
''',
        "fix": [
            (
                "pocketlib/csvline.py",
                """\
            if ch == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    field.append('"')
                    i += 1
                else:
                    quoted = False
""",
                """\
            if ch == '"':
                quoted = False
""",
            )
        ],
        "tests": {"tests/test_csvline.py": ["test_doubled_quotes_inside_quoted_field"]},
    },
    {
        "name": "roman-subtractive",
        "problem_statement": """\
from_roman ignores subtractive notation

`from_roman("IV")` gives 6 and `from_roman("MCMXCIV")` gives 2216. A smaller digit before a
larger one must be subtracted, so that `from_roman(to_roman(n)) == n` holds.
""",
        "fix": [
            (
                "pocketlib/roman.py",
                """\
    for i, ch in enumerate(text):
        value = _DIGITS[ch]
        if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:
            total -= value
        else:
            total += value
""",
                """\
    for ch in text:
        total += _DIGITS[ch]
""",
            )
        ],
        "tests": {"tests/test_roman.py": ["test_from_roman_subtractive", "test_round_trip"]},
    },
    {
        "name": "leap-centuries",
        "problem_statement": """\
is_leap_year is wrong for century years

`is_leap_year(1900)` returns True. The Gregorian rule is: divisible by 4, except centuries,
which are leap years only when divisible by 400 (so 2000 is one, 1900 is not).
`day_of_year(1900, 3, 1)` is off by one because of this.
""",
        "fix": [
            (
                "pocketlib/dates.py",
                "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
                "    return year % 4 == 0\n",
            )
        ],
        "tests": {"tests/test_dates.py": ["test_century_years", "test_day_of_year_in_1900"]},
    },
    {
        "name": "median-even",
        "problem_statement": """\
median of an even number of values is wrong

`median([4, 1, 3, 2])` returns 3; it should be 2.5, the mean of the two middle values.
""",
        "fix": [
            (
                "pocketlib/stats.py",
                """\
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
""",
                """\
    return ordered[mid]
""",
            )
        ],
        "tests": {"tests/test_stats.py": ["test_median_even"]},
    },
    {
        "name": "slugify-runs",
        "problem_statement": """\
slugify leaves repeated and trailing separators

    >>> slugify("Hello,  World!")
    'hello---world-'

A run of punctuation or spaces should become a single separator, and the slug should not
start or end with one: `'hello-world'`.
""",
        "fix": [
            (
                "pocketlib/text.py",
                """\
    slug = re.sub(r"[^a-z0-9]+", sep, ascii_text.lower())
    return slug.strip(sep)
""",
                """\
    return re.sub(r"[^a-z0-9]", sep, ascii_text.lower())
""",
            )
        ],
        "tests": {"tests/test_text.py": ["test_slugify_collapses_runs"]},
    },
]
