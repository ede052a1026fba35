"""Text normalisation that matches ``transformers.AlbertTokenizer``'s defaults (pure).

AlbertTokenizer (do_lower_case=True, keep_accents=False) normalises with: ``\u0060\u0060`` and ``''`` → ``"``,
NFKD, removal of combining marks (Unicode category Mn), lower-casing, then SentencePiece's own charsmap, and
splits on whitespace. We apply the same steps before SentencePiece, so the ids our pipeline writes equal what
that tokenizer gives for the raw text with our ``spiece.model``.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = ["Normalizer"]


@dataclass(frozen=True)
class Normalizer:
    """AlbertTokenizer-compatible normalisation; the two switches mirror its ``do_lower_case``/``keep_accents``."""

    lower_case: bool = True  # AlbertTokenizer's do_lower_case
    strip_accents: bool = True  # not AlbertTokenizer's keep_accents

    def __call__(self, text: str) -> str:
        """Returns ``text`` normalised, with runs of whitespace collapsed to one space and the ends stripped."""
        text = text.replace("``", '"').replace("''", '"')
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) != "Mn")
        if self.lower_case:
            text = text.lower()
        return " ".join(text.split())
