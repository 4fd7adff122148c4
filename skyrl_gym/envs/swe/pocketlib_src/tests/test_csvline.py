import pytest

from pocketlib.csvline import split_line


def test_plain_fields():
    assert split_line("a,b,c") == ["a", "b", "c"]


def test_quoted_separator():
    assert split_line('x,"y,z"') == ["x", "y,z"]


def test_empty_fields():
    assert split_line(",,") == ["", "", ""]


def test_unterminated_quote():
    with pytest.raises(ValueError):
        split_line('"abc')


def test_doubled_quotes_inside_quoted_field():
    assert split_line('"say ""hi""",2') == ['say "hi"', "2"]
