"""Text normalisation that matches ``transformers.AlbertTokenizer``'s defaults (pure).

AlbertTokenizer (do_lower_case=True, keep_accents=False) normalises with: ``\u0060\u0060`` and ``''`` → ``"``,
NFKD, removal of marks (Unicode categories Mn, Mc, Me, as the tokenizers library's StripAccents), lower-casing,
then SentencePiece's own charsmap (none: our model is trained with the identity rule), and splits on whitespace.
We apply the same steps before SentencePiece, so the ids our pipeline writes equal what that tokenizer gives for
the raw text with our ``spiece.model``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Normalizer", "hf_normalizer", "normalizer_of", "tokenizer_settings"]

# Unicode's White_Space set, which the tokenizers library splits on; str.split() also splits on \x1c-\x1f.
_WHITESPACE = re.compile(r"[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


@dataclass(frozen=True)
class Normalizer:
    """AlbertTokenizer-compatible normalisation; the two switches mirror its ``do_lower_case``/``keep_accents``."""

    lower_case: bool = True  # AlbertTokenizer's do_lower_case
    strip_accents: bool = True  # not AlbertTokenizer's keep_accents

    def __call__(self, text: str) -> str:
        """Returns ``text`` normalised, with runs of whitespace collapsed to one space and the ends stripped."""
        text = text.replace("``", '"').replace("''", '"')
        if self.strip_accents:
            decomposed = unicodedata.normalize("NFKD", text)
            text = "".join(c for c in decomposed if not unicodedata.category(c).startswith("M"))
        if self.lower_case:
            text = text.lower()
        return " ".join(part for part in _WHITESPACE.split(text) if part)


def tokenizer_settings(normalizer: Normalizer) -> dict[str, bool]:
    """AlbertTokenizer's switches (tokenizer_config.json) that normalise as ``normalizer`` does."""
    return {"do_lower_case": normalizer.lower_case, "keep_accents": not normalizer.strip_accents}


def normalizer_of(settings: dict) -> Normalizer:
    """The inverse of ``tokenizer_settings``; a switch ``settings`` lacks has AlbertTokenizer's default, ours too."""
    defaults = tokenizer_settings(Normalizer())
    return Normalizer(
        lower_case=settings.get("do_lower_case", defaults["do_lower_case"]),
        strip_accents=not settings.get("keep_accents", defaults["keep_accents"]),
    )


def hf_normalizer(folder: str | Path) -> Normalizer:
    """How a Hugging Face folder's tokenizer normalises text: its tokenizer_config.json, else the defaults.

    ``folder`` may also name the tokenizer_config.json itself.

    Raises:
        ValueError: naming the file, when it is not a JSON object.
    """
    path = Path(folder)
    path = path if path.suffix == ".json" else path / "tokenizer_config.json"
    if not path.exists():
        return normalizer_of({})
    try:
        settings = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not JSON ({err})") from err
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: not a JSON object")
    return normalizer_of(settings)
