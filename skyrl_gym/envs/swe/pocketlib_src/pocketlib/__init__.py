"""pocketlib: small pure-Python helpers."""

__version__ = "0.1.0"
