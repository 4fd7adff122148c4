from pocketlib.text import slugify, truncate


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


def test_slugify_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_truncate():
    assert truncate("abcdefgh", 5) == "ab..."
    assert truncate("abc", 5) == "abc"


def test_slugify_collapses_runs():
    assert slugify("Hello,  World!") == "hello-world"
    assert slugify("--a__b--") == "a-b"
