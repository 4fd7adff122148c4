"""Calendar arithmetic for the proleptic Gregorian calendar."""

_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    """True for leap years: divisible by 4, except centuries not divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """Number of days in ``month`` (1-12) of ``year``."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1-12, got {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS[month - 1]


def day_of_year(year, month, day):
    """1 for January 1st, up to 365 or 366."""
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"{year}-{month}-{day} is not a date")
    return sum(days_in_month(year, m) for m in range(1, month)) + day
