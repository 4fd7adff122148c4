"""Text helpers."""

import re
import unicodedata


def slugify(text, sep="-"):
    """A lowercase ASCII slug: runs of other characters become one ``sep``, none at the ends."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", sep, ascii_text.lower())
    return slug.strip(sep)


def truncate(text, width, ellipsis="..."):
    """``text`` cut to at most ``width`` characters, ending in ``ellipsis`` when cut."""
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    return text[: width - len(ellipsis)] + ellipsis
