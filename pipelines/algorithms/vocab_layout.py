"""ALBERT's special-id layout in ``spiece.model`` and the one loader that checks it (pure).

The vocab stage writes the layout and checks the model it trained with ``spiece_from_proto``; the instances stage
reads the model the same way (from its bytes, so a remote path works); the training-time masker
(``albert_lightning.pretraining.data``), fine-tuning (``evaluation.finetuning``, which the evaluate stage runs)
and the Hugging Face export (``interop.hf``) read it through ``load_spiece``. So a model trained with other ids
fails loudly instead of silently masking with the wrong token. Usage::

    sp = load_spiece("data/vocab/spiece.model")
    ids = sp.encode(Normalizer()(text))
"""

from __future__ import annotations

import os

import sentencepiece as spm

__all__ = [
    "CLS_ID",
    "CONTROL_SYMBOLS",
    "MASK_ID",
    "NUM_SPECIAL",
    "PAD_ID",
    "SEP_ID",
    "SPECIAL_PIECES",
    "UNK_ID",
    "load_spiece",
    "spiece_from_proto",
]

# The ids of google-research/albert's released vocabularies, which transformers.AlbertTokenizer assumes.
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
NUM_SPECIAL = len(SPECIAL_PIECES)
# SentencePiece places control symbols right after pad/unk when bos/eos are disabled (-1).
CONTROL_SYMBOLS = SPECIAL_PIECES[2:]


def spiece_from_proto(data: bytes, source: str) -> spm.SentencePieceProcessor:
    """Returns a processor for the serialised model ``data`` after checking ALBERT's id layout.

    Args:
        data: the bytes of a ``.model`` file.
        source: the file's name, used in error messages.

    Raises:
        ValueError: naming ``source`` when the bytes are not a model or the layout differs.
    """
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except (RuntimeError, OSError) as err:
        raise ValueError(f"{source}: not a SentencePiece model ({err})") from err
    problems = _layout_problems(sp)
    if problems:
        expected = ", ".join(f"{piece}={i}" for i, piece in enumerate(SPECIAL_PIECES))
        raise ValueError(f"{source}: not ALBERT's id layout ({expected}, no bos/eos): {'; '.join(problems)}")
    return sp


def load_spiece(
    path: str | os.PathLike, vocab_size: int | None = None, model: str = "the model"
) -> spm.SentencePieceProcessor:
    """Loads a local ``spiece.model`` and checks ALBERT's id layout (for remote paths use ``spiece_from_proto``).

    Args:
        path: the ``spiece.model`` file.
        vocab_size: the piece count of the network that will read its ids; None checks the layout only.
        model: what that network is, for the error (e.g. a checkpoint's path).

    Raises:
        ValueError: naming ``path`` when the layout is not ``<pad>``=0, ``<unk>``=1, ``[CLS]``=2, ``[SEP]``=3,
            ``[MASK]``=4 with no bos/eos pieces, or when its piece count is not ``vocab_size`` (naming ``model``).
    """
    with open(path, "rb") as f:
        sp = spiece_from_proto(f.read(), os.fspath(path))
    if vocab_size is not None and sp.get_piece_size() != vocab_size:
        raise ValueError(f"{path}: {sp.get_piece_size()} pieces, but {model} has vocab_size {vocab_size}")
    return sp


def _layout_problems(sp: spm.SentencePieceProcessor) -> list[str]:
    if sp.get_piece_size() <= NUM_SPECIAL:
        return [f"only {sp.get_piece_size()} pieces"]
    problems = [
        f"id {i} is {sp.id_to_piece(i)!r}, expected {piece!r}"
        for i, piece in enumerate(SPECIAL_PIECES)
        if sp.id_to_piece(i) != piece
    ]
    if not sp.is_unknown(UNK_ID):
        problems.append(f"id {UNK_ID} is not the unknown piece")
    problems += [f"id {i} is not a control symbol" for i in (PAD_ID, CLS_ID, SEP_ID, MASK_ID) if not sp.is_control(i)]
    if sp.bos_id() != -1 or sp.eos_id() != -1:
        problems.append(f"bos_id={sp.bos_id()} eos_id={sp.eos_id()}, expected -1 (ALBERT adds [CLS]/[SEP] itself)")
    return problems
