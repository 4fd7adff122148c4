"""Amounts of money as integer cents."""


def parse_amount(text):
    """Cents from a decimal amount: "12", "12.5", "1,234.56", "-3.10" or "(3.10)" (negative)."""
    s = text.strip().replace(",", "")
    negative = False
    if s.startswith("(") and s.endswith(")"):
        negative, s = True, s[1:-1]
    if s.startswith("-"):
        negative, s = not negative, s[1:]
    whole, _, frac = s.partition(".")
    if not whole.isdigit() or (frac and not frac.isdigit()) or len(frac) > 2:
        raise ValueError(f"not an amount: {text!r}")
    cents = int(whole) * 100 + int(frac.ljust(2, "0") or 0)
    return -cents if negative else cents


def format_cents(cents):
    """The amount as text with two decimals and thousands separators: -123456 -> "-1,234.56"."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{frac:02d}"
