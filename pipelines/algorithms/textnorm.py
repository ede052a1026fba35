"""Text normalisation that matches ``transformers.AlbertTokenizer``'s defaults (pure).

AlbertTokenizer (do_lower_case=True, keep_accents=False) normalises with: ``\u0060\u0060`` and ``''`` → ``"``,
NFKD, removal of marks (Unicode categories Mn, Mc, Me, as the tokenizers library's StripAccents), lower-casing,
then SentencePiece's own charsmap (none: our model is trained with the identity rule), and splits on whitespace.
We apply the same steps before SentencePiece, so the ids our pipeline writes equal what that tokenizer gives for
the raw text with our ``spiece.model``.

``chinese_script`` converts Chinese text to one script first (OpenCC's ``t2s`` or ``s2t``), so that 漢語 and 汉语
are one word to the vocabulary and the model. AlbertTokenizer has no such step: the switch travels in the exported
tokenizer_config.json (``chinese_script``), which ``hf_normalizer`` reads back, so fine-tuning from an export
converts as pretraining did; a user of ``transformers`` alone converts the text first (docs/your-corpus.md).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHINESE_SCRIPTS", "Normalizer", "hf_normalizer", "normalizer_of", "tokenizer_settings"]

# chinese_script → the OpenCC configuration that converts to it ("keep": no conversion)
_OPENCC_CONFIGS = {"keep": None, "simplified": "t2s", "traditional": "s2t"}
CHINESE_SCRIPTS = tuple(_OPENCC_CONFIGS)

# Unicode's White_Space set, which the tokenizers library splits on; str.split() also splits on \x1c-\x1f.
_WHITESPACE = re.compile(r"[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


@dataclass(frozen=True)
class Normalizer:
    """AlbertTokenizer-compatible normalisation; the two switches mirror its ``do_lower_case``/``keep_accents``."""

    lower_case: bool = True  # AlbertTokenizer's do_lower_case
    strip_accents: bool = True  # not AlbertTokenizer's keep_accents
    chinese_script: str = "keep"  # keep | simplified | traditional: Chinese characters converted by OpenCC first

    def __post_init__(self) -> None:
        if self.chinese_script not in CHINESE_SCRIPTS:
            raise ValueError(f"chinese_script={self.chinese_script!r}: choose one of {', '.join(CHINESE_SCRIPTS)}")

    def __call__(self, text: str) -> str:
        """Returns ``text`` normalised, with runs of whitespace collapsed to one space and the ends stripped."""
        if self.chinese_script != "keep":
            text = _converter(self.chinese_script)(text)
        text = text.replace("``", '"').replace("''", '"')
        if self.strip_accents:
            decomposed = unicodedata.normalize("NFKD", text)
            text = "".join(c for c in decomposed if not unicodedata.category(c).startswith("M"))
        if self.lower_case:
            text = text.lower()
        return " ".join(part for part in _WHITESPACE.split(text) if part)


@functools.cache
def _converter(script: str) -> Callable[[str], str]:
    # Imported here: OpenCC is the optional extra `zh`. Cached per process, a pure function of its pinned tables.
    try:
        import opencc
    except ImportError as err:
        raise ImportError(f"chinese_script={script!r} needs OpenCC: pip install -e '.[zh]'") from err
    return opencc.OpenCC(_OPENCC_CONFIGS[script]).convert


def tokenizer_settings(normalizer: Normalizer) -> dict[str, bool | str]:
    """AlbertTokenizer's switches (tokenizer_config.json) that normalise as ``normalizer`` does, and our
    ``chinese_script`` when it converts (transformers keeps a key it does not know, and ignores it)."""
    settings: dict[str, bool | str] = {"do_lower_case": normalizer.lower_case}
    settings["keep_accents"] = not normalizer.strip_accents
    if normalizer.chinese_script != "keep":
        settings["chinese_script"] = normalizer.chinese_script
    return settings


def normalizer_of(settings: dict) -> Normalizer:
    """The inverse of ``tokenizer_settings``; a switch ``settings`` lacks has AlbertTokenizer's default, ours too.

    Raises:
        ValueError: a ``chinese_script`` that is not one of ``CHINESE_SCRIPTS``.
    """
    defaults = tokenizer_settings(Normalizer())
    return Normalizer(
        lower_case=settings.get("do_lower_case", defaults["do_lower_case"]),
        strip_accents=not settings.get("keep_accents", defaults["keep_accents"]),
        chinese_script=settings.get("chinese_script", "keep"),
    )


def hf_normalizer(folder: str | Path) -> Normalizer:
    """How a Hugging Face folder's tokenizer normalises text: its tokenizer_config.json, else the defaults; for a
    folder with a WordPiece ``vocab.txt`` and no ``spiece.model``, no case or accent change (the vocabulary's own).

    ``folder`` may also name the tokenizer_config.json itself.

    Raises:
        ValueError: naming the file, when it is not a JSON object.
    """
    path = Path(folder)
    path = path if path.suffix == ".json" else path / "tokenizer_config.json"
    settings = {}
    if path.exists():
        try:
            settings = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not JSON ({err})") from err
        if not isinstance(settings, dict):
            raise ValueError(f"{path}: not a JSON object")
    if (path.parent / "vocab.txt").is_file() and not (path.parent / "spiece.model").is_file():
        # A BERT vocab.txt folder: BertTokenizer lower-cases and strips accents itself (wordpiece.py), so the
        # text before it keeps its case and accents; only the script conversion is ours to repeat.
        return Normalizer(lower_case=False, strip_accents=False, chinese_script=settings.get("chinese_script", "keep"))
    return normalizer_of(settings)
