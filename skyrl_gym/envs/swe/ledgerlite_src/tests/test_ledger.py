import unittest
from datetime import date

from ledgerlite.ledger import Ledger


def sample():
    book = Ledger()
    book.add(date(2026, 1, 1), "cash", "equity", 100000, "opening")
    book.add(date(2026, 1, 5), "rent", "cash", 40000, "january rent")
    book.add(date(2026, 2, 1), "cash", "sales", 25000)
    return book


class TestLedger(unittest.TestCase):
    def test_balances_sum_to_zero(self):
        self.assertEqual(sum(sample().trial_balance().values()), 0)

    def test_balance_of_each_account(self):
        book = sample()
        self.assertEqual(book.balance("cash"), 85000)
        self.assertEqual(book.balance("equity"), -100000)

    def test_bad_entries(self):
        book = Ledger()
        with self.assertRaises(ValueError):
            book.add(date(2026, 1, 1), "cash", "cash", 100)
        with self.assertRaises(ValueError):
            book.add(date(2026, 1, 1), "cash", "sales", 0)

    def test_accounts_sorted(self):
        self.assertEqual(sample().accounts(), ["cash", "equity", "rent", "sales"])

    def test_balance_until_includes_that_day(self):
        book = sample()
        self.assertEqual(book.balance("cash", until=date(2026, 1, 5)), 60000)
        self.assertEqual(book.balance("cash", until=date(2026, 1, 4)), 100000)
