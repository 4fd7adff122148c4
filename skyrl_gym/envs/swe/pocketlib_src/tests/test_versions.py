import pytest

from pocketlib.versions import compare, latest, parse


def test_parse():
    assert parse("1.2.3") == (1, 2, 3)


def test_parse_rejects_text():
    with pytest.raises(ValueError):
        parse("1.x")


def test_compare_single_digits():
    assert compare("1.2", "1.3") == -1
    assert compare("2.0", "1.9") == 1
    assert compare("1.0", "1.0.0") == 0


def test_compare_multi_digit_parts():
    assert compare("1.10.0", "1.9.0") == 1
    assert compare("0.9", "0.10") == -1


def test_latest_multi_digit():
    assert latest(["1.2", "1.10", "1.9"]) == "1.10"
