"""Loaders: vocabularies, labelled mentions and keyword lists from the files coders have.

>>> vocab = load_vocabulary("icd10_beijing_clinical_v601.xlsx")      # doctest: +SKIP
>>> dev = load_labelled("dev.json", vocab)                            # doctest: +SKIP
>>> dev.missing[:1]          # gold names not in v601, reported, kept  # doctest: +SKIP

Malformed input raises :class:`termnorm.errors.DataFormatError` naming the
file, the 1-based row and the problem.
"""

from .keywords import load_keywords
from .labelled import load_labelled, split_terms
from .sources import ALL_FORMATS, LABELLED_FORMATS, VOCAB_FORMATS, sniff_format
from .vocab_loaders import load_vocabulary, normalize_concept_id

__all__ = [
    "ALL_FORMATS",
    "LABELLED_FORMATS",
    "VOCAB_FORMATS",
    "load_keywords",
    "load_labelled",
    "load_vocabulary",
    "normalize_concept_id",
    "sniff_format",
    "split_terms",
]
