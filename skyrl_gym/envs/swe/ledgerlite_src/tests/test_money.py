import unittest

from ledgerlite.money import format_cents, parse_amount


class TestParseAmount(unittest.TestCase):
    def test_whole_and_cents(self):
        self.assertEqual(parse_amount("12"), 1200)
        self.assertEqual(parse_amount("12.34"), 1234)

    def test_thousands_separators(self):
        self.assertEqual(parse_amount("1,234.56"), 123456)

    def test_negative(self):
        self.assertEqual(parse_amount("-3.10"), -310)
        self.assertEqual(parse_amount("(3.10)"), -310)

    def test_rejects_text(self):
        for bad in ("", "abc", "1.234", "1.2.3"):
            with self.assertRaises(ValueError):
                parse_amount(bad)

    def test_one_decimal_digit_means_tens_of_cents(self):
        self.assertEqual(parse_amount("12.5"), 1250)
        self.assertEqual(parse_amount("0.1"), 10)


class TestFormatCents(unittest.TestCase):
    def test_positive(self):
        self.assertEqual(format_cents(123456), "1,234.56")
        self.assertEqual(format_cents(5), "0.05")

    def test_round_trip(self):
        for cents in (0, 7, 1200, 99999):
            self.assertEqual(parse_amount(format_cents(cents)), cents)

    def test_negative_amounts_keep_their_cents(self):
        self.assertEqual(format_cents(-5), "-0.05")
        self.assertEqual(format_cents(-123456), "-1,234.56")
