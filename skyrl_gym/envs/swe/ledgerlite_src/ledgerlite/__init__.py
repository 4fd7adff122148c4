"""A small double-entry ledger."""

from ledgerlite.ledger import Entry, Ledger
from ledgerlite.money import format_cents, parse_amount

__all__ = ["Entry", "Ledger", "format_cents", "parse_amount"]
__version__ = "0.3.0"
