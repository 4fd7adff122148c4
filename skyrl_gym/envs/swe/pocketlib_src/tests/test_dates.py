import pytest

from pocketlib.dates import day_of_year, days_in_month, is_leap_year


def test_ordinary_leap_years():
    assert is_leap_year(2024) and not is_leap_year(2023)


def test_days_in_month():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 4) == 30


def test_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)


def test_century_years():
    assert not is_leap_year(1900)
    assert is_leap_year(2000)


def test_day_of_year_in_1900():
    assert day_of_year(1900, 3, 1) == 60
    assert day_of_year(2000, 3, 1) == 61
