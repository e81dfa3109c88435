"""Text normalization (PROVISIONAL: the text-handling work replaces this, keeping the signature)."""

import unicodedata


def normalize(text: str) -> str:
    """Canonical form used for matching: NFKC, lower case, no spaces."""
    t = unicodedata.normalize("NFKC", text or "").lower()
    return "".join(t.split())
