"""The bundled problems (written for this project): statement, hidden tests, reference.

Each entry: ``id``, ``statement``, ``kind`` (``stdin`` or ``functional``), ``func`` and
``starter`` for functional ones, ``tests`` as ``(input, expected output)`` pairs (functional:
arguments as JSON lines, return value as JSON), and ``reference``, a solution used only by the
test suite to show that every problem is solvable. Every fifth problem is in the test split.
"""

from __future__ import annotations

from typing import Any

PROBLEMS: list[dict[str, Any]] = [
    {
        "id": "sum-of-evens",
        "kind": "stdin",
        "statement": "The first line holds n, the second n integers. Print the sum of the even ones.",
        "tests": [
            ("5\n1 2 3 4 5\n", "6\n"),
            ("3\n1 3 5\n", "0\n"),
            ("4\n-2 -4 10 7\n", "4\n"),
            ("1\n0\n", "0\n"),
        ],
        "reference": "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(x for x in xs if x % 2 == 0))\n",
    },
    {
        "id": "reverse-words",
        "kind": "stdin",
        "statement": "Read one line of words and print them in reverse order, separated by single spaces.",
        "tests": [
            ("hello world\n", "world hello\n"),
            ("a b c d\n", "d c b a\n"),
            ("  single  \n", "single\n"),
        ],
        "reference": "print(' '.join(reversed(input().split())))\n",
    },
    {
        "id": "fizzbuzz",
        "kind": "stdin",
        "statement": (
            "Read n and print the numbers 1 to n, one per line, but print Fizz for multiples of 3, "
            "Buzz for multiples of 5 and FizzBuzz for multiples of both."
        ),
        "tests": [
            ("5\n", "1\n2\nFizz\n4\nBuzz\n"),
            ("1\n", "1\n"),
            ("15\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz\n"),
        ],
        "reference": (
            "n = int(input())\nfor i in range(1, n + 1):\n"
            "    s = ('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')\n"
            "    print(s or i)\n"
        ),
    },
    {
        "id": "max-subarray",
        "kind": "stdin",
        "statement": (
            "The first line holds n, the second n integers. Print the largest sum of a non-empty "
            "run of consecutive numbers."
        ),
        "tests": [("9\n-2 1 -3 4 -1 2 1 -5 4\n", "6\n"), ("3\n-5 -1 -3\n", "-1\n"), ("4\n1 2 3 4\n", "10\n")],
        "reference": (
            "input()\nxs = list(map(int, input().split()))\nbest = cur = xs[0]\n"
            "for x in xs[1:]:\n    cur = max(x, cur + x)\n    best = max(best, cur)\nprint(best)\n"
        ),
    },
    {
        "id": "count-vowels",
        "kind": "stdin",
        "statement": "Read one line of text and print how many vowels (a, e, i, o, u, any case) it holds.",
        "tests": [("Hello World\n", "3\n"), ("rhythm\n", "0\n"), ("AEIOU aeiou\n", "10\n")],
        "reference": "print(sum(c in 'aeiou' for c in input().lower()))\n",
    },
    {
        "id": "gcd-lcm",
        "kind": "stdin",
        "statement": "Read two positive integers a and b on one line. Print their gcd and lcm separated by a space.",
        "tests": [("12 18\n", "6 36\n"), ("7 5\n", "1 35\n"), ("100 10\n", "10 100\n")],
        "reference": "import math\na, b = map(int, input().split())\ng = math.gcd(a, b)\nprint(g, a * b // g)\n",
    },
    {
        "id": "palindromes",
        "kind": "stdin",
        "statement": (
            "The first line holds t, then t lines follow. For each line print YES if it reads the "
            "same backwards when only letters and digits count and case is ignored, else NO."
        ),
        "tests": [
            ("3\nRacecar\nhello\nA man, a plan, a canal: Panama\n", "YES\nNO\nYES\n"),
            ("1\nab\n", "NO\n"),
            ("2\nx\nNoon\n", "YES\nYES\n"),
        ],
        "reference": (
            "t = int(input())\nfor _ in range(t):\n"
            "    s = [c.lower() for c in input() if c.isalnum()]\n"
            "    print('YES' if s == s[::-1] else 'NO')\n"
        ),
    },
    {
        "id": "transpose",
        "kind": "stdin",
        "statement": (
            "The first line holds r and c, then r lines of c integers (a matrix). Print its "
            "transpose: c lines of r integers separated by spaces."
        ),
        "tests": [
            ("2 3\n1 2 3\n4 5 6\n", "1 4\n2 5\n3 6\n"),
            ("1 1\n7\n", "7\n"),
            ("3 1\n1\n2\n3\n", "1 2 3\n"),
        ],
        "reference": (
            "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\n"
            "for j in range(c):\n    print(' '.join(m[i][j] for i in range(r)))\n"
        ),
    },
    {
        "id": "second-largest",
        "kind": "stdin",
        "statement": (
            "The first line holds n, the second n integers. Print the second largest distinct "
            "value, or NONE if all values are equal."
        ),
        "tests": [("5\n3 1 4 1 5\n", "4\n"), ("3\n2 2 2\n", "NONE\n"), ("4\n10 9 10 8\n", "9\n")],
        "reference": (
            "input()\nvals = sorted(set(map(int, input().split())))\n"
            "print(vals[-2] if len(vals) > 1 else 'NONE')\n"
        ),
    },
    {
        "id": "run-length",
        "kind": "stdin",
        "statement": (
            "Read a string of lowercase letters and print its run-length encoding: each run of "
            "equal letters as the letter followed by the run's length (aaabcc -> a3b1c2)."
        ),
        "tests": [
            ("aaabcc\n", "a3b1c2\n"),
            ("a\n", "a1\n"),
            ("zzzzzzzzzzzz\n", "z12\n"),
            ("abab\n", "a1b1a1b1\n"),
        ],
        "reference": (
            "import itertools\ns = input().strip()\n"
            "print(''.join(f'{k}{len(list(g))}' for k, g in itertools.groupby(s)))\n"
        ),
    },
    {
        "id": "count-primes",
        "kind": "stdin",
        "statement": "Read n (1 <= n <= 200000) and print how many primes are at most n.",
        "tests": [("10\n", "4\n"), ("1\n", "0\n"), ("100\n", "25\n"), ("100000\n", "9592\n")],
        "reference": (
            "n = int(input())\nsieve = bytearray([1]) * (n + 1)\nsieve[0:2] = b'\\x00\\x00'[: n + 1]\n"
            "for i in range(2, int(n ** 0.5) + 1):\n"
            "    if sieve[i]:\n        sieve[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))\n"
            "print(sum(sieve))\n"
        ),
    },
    {
        "id": "brackets",
        "kind": "stdin",
        "statement": (
            "The first line holds t, then t lines of brackets ()[]{}. For each print YES if it is "
            "balanced and properly nested, else NO."
        ),
        "tests": [
            ("3\n()[]{}\n([)]\n{[()]}\n", "YES\nNO\nYES\n"),
            ("1\n((\n", "NO\n"),
            ("2\n[]\n]\n", "YES\nNO\n"),
        ],
        "reference": (
            "pairs = {')': '(', ']': '[', '}': '{'}\n"
            "for _ in range(int(input())):\n    st = []\n    ok = True\n"
            "    for ch in input().strip():\n"
            "        if ch in pairs:\n            if not st or st.pop() != pairs[ch]:\n                ok = False\n                break\n"
            "        else:\n            st.append(ch)\n"
            "    print('YES' if ok and not st else 'NO')\n"
        ),
    },
    {
        "id": "most-frequent-word",
        "kind": "stdin",
        "statement": (
            "Read one line of lowercase words. Print the most frequent word and its count, "
            "separated by a space; on a tie print the alphabetically smallest word."
        ),
        "tests": [("the cat and the hat\n", "the 2\n"), ("b a\n", "a 1\n"), ("x y y x z\n", "x 2\n")],
        "reference": (
            "from collections import Counter\nc = Counter(input().split())\n"
            "w = min(c, key=lambda k: (-c[k], k))\nprint(w, c[w])\n"
        ),
    },
    {
        "id": "two-sum",
        "kind": "stdin",
        "statement": (
            "The first line holds n and a target, the second n integers. Exactly one pair of "
            "positions i < j has values summing to the target: print i and j (1-based)."
        ),
        "tests": [("4 9\n2 7 11 15\n", "1 2\n"), ("3 6\n3 2 4\n", "2 3\n"), ("2 6\n3 3\n", "1 2\n")],
        "reference": (
            "n, t = map(int, input().split())\nxs = list(map(int, input().split()))\nseen = {}\n"
            "for j, x in enumerate(xs):\n    if t - x in seen:\n        print(seen[t - x] + 1, j + 1)\n        break\n"
            "    seen.setdefault(x, j)\n"
        ),
    },
    {
        "id": "stairs",
        "kind": "stdin",
        "statement": "Read n (1 <= n <= 90). Print in how many ways one can climb n stairs taking 1 or 2 at a time.",
        "tests": [("1\n", "1\n"), ("2\n", "2\n"), ("5\n", "8\n"), ("50\n", "20365011074\n")],
        "reference": "n = int(input())\na, b = 1, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n",
    },
    {
        "id": "average",
        "kind": "stdin",
        "statement": "The first line holds n, the second n integers. Print their mean with exactly two decimals.",
        "tests": [("3\n1 2 4\n", "2.33\n"), ("2\n5 5\n", "5.00\n"), ("4\n1 2 3 4\n", "2.50\n")],
        "reference": "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.2f}')\n",
    },
    {
        "id": "anagram",
        "kind": "functional",
        "func": "is_anagram",
        "starter": "class Solution:\n    def is_anagram(self, s: str, t: str) -> bool:\n        ...",
        "statement": "Return whether t is an anagram of s (the same letters, each as often).",
        "tests": [('"listen"\n"silent"', "true"), ('"rat"\n"car"', "false"), ('"a"\n"ab"', "false")],
        "reference": (
            "class Solution:\n    def is_anagram(self, s: str, t: str) -> bool:\n"
            "        return sorted(s) == sorted(t)\n"
        ),
    },
    {
        "id": "merge-intervals",
        "kind": "functional",
        "func": "merge_intervals",
        "starter": "class Solution:\n    def merge_intervals(self, intervals: list[list[int]]) -> list[list[int]]:\n        ...",
        "statement": (
            "Given intervals [start, end], merge all overlapping ones (touching counts as "
            "overlapping) and return them sorted by start."
        ),
        "tests": [
            ("[[1,3],[2,6],[8,10],[15,18]]", "[[1,6],[8,10],[15,18]]"),
            ("[[1,4],[4,5]]", "[[1,5]]"),
            ("[[6,8],[1,3]]", "[[1,3],[6,8]]"),
        ],
        "reference": (
            "class Solution:\n    def merge_intervals(self, intervals):\n        out = []\n"
            "        for s, e in sorted(intervals):\n"
            "            if out and s <= out[-1][1]:\n                out[-1][1] = max(out[-1][1], e)\n"
            "            else:\n                out.append([s, e])\n        return out\n"
        ),
    },
    {
        "id": "binary-search",
        "kind": "functional",
        "func": "search",
        "starter": "class Solution:\n    def search(self, nums: list[int], target: int) -> int:\n        ...",
        "statement": "nums is sorted ascending with distinct values. Return the index of target, or -1.",
        "tests": [("[-1,0,3,5,9,12]\n9", "4"), ("[-1,0,3,5,9,12]\n2", "-1"), ("[5]\n5", "0")],
        "reference": (
            "import bisect\nclass Solution:\n    def search(self, nums, target):\n"
            "        i = bisect.bisect_left(nums, target)\n"
            "        return i if i < len(nums) and nums[i] == target else -1\n"
        ),
    },
    {
        "id": "roman",
        "kind": "functional",
        "func": "roman_to_int",
        "starter": "def roman_to_int(s: str) -> int:\n    ...",
        "statement": "Convert a Roman numeral (I, V, X, L, C, D, M, with subtractive pairs such as IV) to an integer.",
        "tests": [('"III"', "3"), ('"LVIII"', "58"), ('"MCMXCIV"', "1994")],
        "reference": (
            "def roman_to_int(s):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
            "    total = 0\n    for a, b in zip(s, s[1:] + ' '):\n"
            "        total += -v[a] if b != ' ' and v[a] < v[b] else v[a]\n    return total\n"
        ),
    },
    {
        "id": "rotate",
        "kind": "functional",
        "func": "rotate",
        "starter": "def rotate(nums: list[int], k: int) -> list[int]:\n    ...",
        "statement": "Return nums rotated right by k steps (k may exceed the length; an empty list stays empty).",
        "tests": [
            ("[1,2,3,4,5,6,7]\n3", "[5,6,7,1,2,3,4]"),
            ("[1,2]\n5", "[2,1]"),
            ("[]\n2", "[]"),
            ("[9]\n0", "[9]"),
        ],
        "reference": (
            "def rotate(nums, k):\n    if not nums:\n        return []\n    k %= len(nums)\n"
            "    return nums[-k:] + nums[:-k] if k else list(nums)\n"
        ),
    },
    {
        "id": "longest-unique",
        "kind": "functional",
        "func": "longest_unique",
        "starter": "class Solution:\n    def longest_unique(self, s: str) -> int:\n        ...",
        "statement": "Return the length of the longest substring of s without repeated characters.",
        "tests": [('"abcabcbb"', "3"), ('"bbbbb"', "1"), ('"pwwkew"', "3"), ('""', "0")],
        "reference": (
            "class Solution:\n    def longest_unique(self, s):\n        last, start, best = {}, 0, 0\n"
            "        for i, c in enumerate(s):\n            if last.get(c, -1) >= start:\n                start = last[c] + 1\n"
            "            last[c] = i\n            best = max(best, i - start + 1)\n        return best\n"
        ),
    },
    {
        "id": "coin-change",
        "kind": "functional",
        "func": "coin_change",
        "starter": "class Solution:\n    def coin_change(self, coins: list[int], amount: int) -> int:\n        ...",
        "statement": "Return the fewest coins (unlimited supply of each value) that sum to amount, or -1 if impossible.",
        "tests": [("[1,2,5]\n11", "3"), ("[2]\n3", "-1"), ("[1]\n0", "0"), ("[186,419,83,408]\n6249", "20")],
        "reference": (
            "class Solution:\n    def coin_change(self, coins, amount):\n        inf = amount + 1\n"
            "        best = [0] + [inf] * amount\n        for a in range(1, amount + 1):\n"
            "            for c in coins:\n                if c <= a and best[a - c] + 1 < best[a]:\n"
            "                    best[a] = best[a - c] + 1\n"
            "        return best[amount] if best[amount] < inf else -1\n"
        ),
    },
    {
        "id": "mean-and-range",
        "kind": "functional",
        "func": "mean_and_range",
        "starter": "def mean_and_range(nums: list[int]) -> list[float]:\n    ...",
        "statement": "Return [mean, max - min] of a non-empty list of numbers.",
        "tests": [("[1,2,3,4]", "[2.5, 3]"), ("[10]", "[10.0, 0]"), ("[1,2]", "[1.5, 1]")],
        "reference": "def mean_and_range(nums):\n    return [sum(nums) / len(nums), max(nums) - min(nums)]\n",
    },
    {
        "id": "top-k-frequent",
        "kind": "functional",
        "func": "top_k_frequent",
        "starter": "class Solution:\n    def top_k_frequent(self, nums: list[int], k: int) -> list[int]:\n        ...",
        "statement": (
            "Return the k most frequent values of nums, most frequent first; equally frequent "
            "values in ascending order."
        ),
        "tests": [("[1,1,1,2,2,3]\n2", "[1,2]"), ("[4,4,5,5,6]\n2", "[4,5]"), ("[7]\n1", "[7]")],
        "reference": (
            "from collections import Counter\nclass Solution:\n    def top_k_frequent(self, nums, k):\n"
            "        c = Counter(nums)\n        return sorted(c, key=lambda x: (-c[x], x))[:k]\n"
        ),
    },
]
