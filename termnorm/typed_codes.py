"""Codes as coders type them: the text compared, whether a query reads as a code, and the start of a typed code
(:mod:`termnorm.search` reads codes with these; the module docstring there says what is code-like)."""

from __future__ import annotations

import re
import unicodedata

#: A code as coders type it (after NFKC and lower case): see :mod:`termnorm.search`'s docstring.
CODE_LIKE = re.compile(r"^[a-z]?\d{1,6}(?:[.x][0-9a-z]*)?(?:/\d*)?(?:[+*].*)?$")

#: A nearest-code fallback keeps at least this many code characters: an ICD-10 category (``E11``) or an
#: ICD-9-CM-3 subcategory (``06.3``). Shorter prefixes (``E1``, ``06``) span unrelated chapters.
MIN_NEAREST = 3


def code_text(text: str) -> str:
    """A code or query as compared: NFKC (full-width ``０６．３１``), no surrounding spaces, lower case."""
    return unicodedata.normalize("NFKC", text or "").strip().lower()


def is_code_like(query: str) -> bool:
    """True when ``query`` reads as a code (:data:`CODE_LIKE`).

    >>> [is_code_like(q) for q in ("06.31", "E11.900", "I10xx", "T2DM", "PCI", "2型糖尿病")]
    [True, True, True, False, False, False]
    """
    return CODE_LIKE.match(code_text(query)) is not None


def code_head(text: str, n: int) -> str:
    """The start of a typed code that holds its first ``n`` key characters (:func:`termnorm.vocabulary.code_key`).

    >>> code_head("E11.900", 5), code_head("06.3199", 4)
    ('E11.90', '06.31')
    """
    seen = 0
    for i, ch in enumerate(text):
        if seen == n:
            return text[:i]
        if ch.isascii() and ch.isalnum():
            seen += 1
    return text
