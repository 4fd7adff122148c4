"""Entries and balances."""

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Entry:
    """Money moved from one account to another on a day."""

    day: date
    debit: str
    credit: str
    cents: int
    memo: str = ""


class Ledger:
    """Entries in the order they were added; balances computed on demand."""

    def __init__(self):
        self.entries = []

    def add(self, day, debit, credit, cents, memo=""):
        """Record ``cents`` moving into ``debit`` out of ``credit`` on ``day``."""
        if cents <= 0:
            raise ValueError("an entry moves a positive amount")
        if debit == credit:
            raise ValueError("an entry needs two different accounts")
        entry = Entry(day, debit, credit, cents, memo)
        self.entries.append(entry)
        return entry

    def balance(self, account, until=None):
        """Debits minus credits of ``account``, over the entries up to and including ``until``."""
        total = 0
        for e in self.entries:
            if until is not None and e.day > until:
                continue
            if e.debit == account:
                total += e.cents
            elif e.credit == account:
                total -= e.cents
        return total

    def accounts(self):
        """Every account named by an entry, sorted."""
        return sorted({e.debit for e in self.entries} | {e.credit for e in self.entries})

    def trial_balance(self):
        """Each account's balance; the balances of a ledger sum to zero."""
        return {name: self.balance(name) for name in self.accounts()}
