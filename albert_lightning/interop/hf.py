"""The map between our model and ``transformers.AlbertForPreTraining`` folders: ``export_hf`` and ``import_hf``.

Parameter names are already transformers' (see model.py), so the map is: drop the tied duplicates on export
(transformers 5 writes ``predictions.decoder.{weight,bias}`` nowhere and re-ties them on load), restore them on
import, and translate config.json and the text normalisation (``tokenizer_settings``). transformers itself is a
test extra, never imported here: weights are written with ``safetensors`` and the tokenizer files as JSON.
"""

from __future__ import annotations

import functools
import json
import shutil
import uuid
import warnings
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from albert_lightning.checkpoints import load_checkpoint, load_weights
from albert_lightning.heads import HEADS, MultipleChoice, SequenceClassifier, SpanExtractor
from albert_lightning.interop.hf_tokenizer import SPECIAL_IDS, write_tokenizer, write_wordpiece_tokenizer
from albert_lightning.model import TIED_WEIGHTS, AlbertConfig, AlbertForPreTraining, with_tied_weights
from albert_lightning.model_config import ACTIVATIONS
from pipelines.algorithms.textnorm import Normalizer, hf_normalizer, normalizer_of, tokenizer_settings
from pipelines.algorithms.vocabulary import load_vocabulary
from pipelines.algorithms.wordpiece import WordPieceVocab

__all__ = [
    "EXPORT_FILES",
    "check_export_target",
    "export_hf",
    "hf_config",
    "hf_normalizer",
    "import_hf",
    "normalizer_of",
    "read_hf",
    "tokenizer_settings",
]

PRETRAINING = "AlbertForPreTraining"
# What an export of each network loads as in transformers: the pretraining model or a fine-tuned task model.
ARCHITECTURES = {
    AlbertForPreTraining: PRETRAINING,
    SequenceClassifier: HEADS["classification"],
    SpanExtractor: HEADS["span"],
    MultipleChoice: HEADS["choice"],
}
# Every file an export writes (``_write_model``, ``hf_tokenizer.write_tokenizer``): a folder holding nothing else is
# an earlier export, which a new one may replace; any other name is someone's file, and the folder is left alone.
EXPORT_FILES = frozenset(
    [
        "config.json",
        "model.safetensors",
        "spiece.model",
        "vocab.txt",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
    ]
)
# Buffers that transformers < 4.31 saved with the weights; they carry nothing.
_IGNORED = {"albert.embeddings.position_ids", "albert.embeddings.token_type_ids"}
# Released checkpoints are AlbertForMaskedLM: no SOP head, and no pooler when saved by transformers >= 4.
# Importing one keeps those freshly initialised (with a warning), as transformers does for new heads.
_OPTIONAL = ("sop_classifier.", "albert.pooler.")


def hf_config(config: AlbertConfig, dtype: torch.dtype = torch.float32, architecture: str = PRETRAINING) -> dict:
    """Returns the config.json dict that ``transformers.AlbertConfig`` reads for our ``config``.

    Raises:
        ValueError: for sharing "attention"/"ffn", which transformers' ALBERT cannot express.
    """
    groups = {"all": config.num_hidden_groups, "none": config.num_hidden_layers}  # "none" = L groups of 1
    if config.sharing not in groups:
        raise ValueError(f"sharing={config.sharing!r} has no transformers layout; export needs 'all' or 'none'")
    hf = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "sharing"}
    return hf | {
        "architectures": [architecture],
        "model_type": "albert",
        "num_hidden_groups": groups[config.sharing],
        "position_embedding_type": "absolute",
        "bos_token_id": SPECIAL_IDS["[CLS]"],
        "eos_token_id": SPECIAL_IDS["[SEP]"],
        "tie_word_embeddings": True,
        "dtype": str(dtype).removeprefix("torch."),
    }


def export_hf(
    model: nn.Module,
    config: AlbertConfig,
    folder: str | Path,
    spiece_model: str | None = None,
    normalizer: Normalizer | None = None,
) -> Path:
    """Writes a folder transformers loads with no missing keys: as ``AlbertForPreTraining``, or for a network of
    ``heads`` as its task model (``AlbertForQuestionAnswering``, ...).

    Args:
        model: the model to export (its encoder's config must equal ``config``).
        config: its configuration; sharing must be "all" or "none".
        folder: output folder, created if needed; an existing one is replaced only if empty or an earlier
            export (``check_export_target``).
        spiece_model: path of the SentencePiece model or WordPiece vocab.txt (its tokenizer_config.json beside
            it), or of a folder holding one; when given, the tokenizer files are written too, so that
            ``AutoTokenizer.from_pretrained`` loads AlbertTokenizer (or BertTokenizer).
        normalizer: how the pretraining text was normalised (None: the defaults); the tokenizer files repeat it.

    Returns the folder. Raises ValueError if the config does not match the model or has no transformers form,
    FileExistsError (and touches nothing) if ``folder`` holds anything an export does not write.
    """
    encoder_config = model.config if isinstance(model, AlbertForPreTraining) else model.albert.config
    if config != encoder_config:
        raise ValueError(f"export_hf: config {config} is not the model's {encoder_config}")
    if spiece_model is not None:
        vocab = load_vocabulary(spiece_model, config.vocab_size, "the checkpoint")
        if isinstance(vocab, WordPieceVocab):
            write = functools.partial(write_wordpiece_tokenizer, vocab)
        else:
            write = functools.partial(write_tokenizer, vocab.sp, Path(vocab.source))
    folder = Path(folder)
    check_export_target(folder)
    # Written beside the target and renamed when complete: a failed export never leaves a folder that looks
    # like a model (config.json + weights without their tokenizer, say).
    tmp = folder.with_name(f".tmp-{uuid.uuid4().hex}-{folder.name}")
    tmp.mkdir(parents=True)
    try:
        _write_model(model, config, tmp)
        if spiece_model is not None:
            write(tmp, config.max_position_embeddings, normalizer or Normalizer())
        _replace(folder, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def check_export_target(folder: str | Path) -> None:
    """Checks that an export may write ``folder``: it is absent, empty, or an earlier export (only ``EXPORT_FILES``).

    Raises:
        FileExistsError: naming the folder and what in it an export would not have written.
    """
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_symlink() or not folder.is_dir():
        raise FileExistsError(f"{folder}: exists and is not a folder; export writes a new folder there, choose another")
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in EXPORT_FILES or not _plain_file(p))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise FileExistsError(
            f"{folder}: holds files an export does not write ({shown}); export replaces only an empty folder or an "
            "earlier export, so give an empty or new folder"
        )


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _replace(folder: Path, new: Path) -> None:
    """Puts ``new`` in ``folder``'s place by renames: the old folder is set aside and deleted only once ``new``
    is there, and put back if that fails."""
    check_export_target(folder)  # again: the writing took time, and someone may have put a file there meanwhile
    if not folder.exists():
        new.rename(folder)
        return
    old = folder.with_name(f".old-{uuid.uuid4().hex}-{folder.name}")
    folder.rename(old)
    try:
        new.rename(folder)
    except BaseException:
        old.rename(folder)
        raise
    shutil.rmtree(old)


def _write_model(model: nn.Module, config: AlbertConfig, folder: Path) -> None:
    # isinstance: FSDP2 swaps a sharded module's class for a subclass of it
    architecture = next(name for kind, name in ARCHITECTURES.items() if isinstance(model, kind))
    # One copy of each tied tensor, under transformers' name; AlbertForQuestionAnswering's encoder has no pooler.
    dropped = ("albert.pooler.",) if architecture == HEADS["span"] else ()
    weights = {
        name: _full(tensor).detach().cpu().contiguous()
        for name, tensor in model.state_dict().items()
        if name not in TIED_WEIGHTS and not (dropped and name.startswith(dropped))
    }
    hf = hf_config(config, weights["albert.embeddings.word_embeddings.weight"].dtype, architecture)
    if architecture == HEADS["classification"]:
        hf["num_labels"] = model.classifier.out_features
    (folder / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of an FSDP2-sharded parameter (a DTensor), or the tensor itself."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def import_hf(folder: str | Path) -> AlbertForPreTraining:
    """Reads a transformers ALBERT folder (config.json + model.safetensors, its shards, or pytorch_model.bin) into
    our model; a pytorch_model.bin is read weights-only (``checkpoints.load_checkpoint``).

    A released checkpoint (saved as AlbertForMaskedLM) has no SOP head and maybe no pooler; those are then
    freshly initialised, with a warning. Every other missing, unexpected or mis-shaped tensor is an error.

    Raises:
        FileNotFoundError: if the folder has no config.json or no weights.
        ValueError: naming the file, for keys or shapes that do not match our model.
    """
    config, state, missing = read_hf(folder)
    if missing:
        warnings.warn(f"{folder} has no {missing}; they keep their random init", stacklevel=2)
    model = AlbertForPreTraining(config)
    load_weights(model, state, missing, str(folder))  # only the optional heads read_hf names may be missing
    return model


def read_hf(folder: str | Path) -> tuple[AlbertConfig, dict[str, torch.Tensor], list[str]]:
    """Reads a transformers ALBERT folder: its config, its tensors under our names (both names of a tied pair),
    and the optional heads it lacks (``import_hf``'s rules, without building the model's weights).

    Raises:
        FileNotFoundError: if the folder has no config.json or no weights.
        ValueError: naming the file, for keys or shapes that do not match our model.
    """
    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
    config = _config_from_hf(json.loads(config_file.read_text()), config_file)
    weights_file, state = _read_weights(folder)
    state = {name: tensor for name, tensor in state.items() if name not in _IGNORED}
    state = with_tied_weights(state, str(weights_file))
    with torch.device("meta"):  # shapes only
        expected = {name: t.shape for name, t in AlbertForPreTraining(config).state_dict().items()}
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    if [name for name in missing if not name.startswith(_OPTIONAL)] or unexpected:
        raise ValueError(f"{weights_file}: missing keys {missing}, unexpected keys {unexpected}")
    for name, tensor in state.items():
        if tensor.shape != expected[name]:
            raise ValueError(
                f"{weights_file}: {name} has shape {list(tensor.shape)}, {config_file} implies {list(expected[name])}"
            )
    return config, state, missing


def _config_from_hf(hf: dict, path: Path) -> AlbertConfig:
    if hf.get("model_type", "albert") != "albert":
        raise ValueError(f"{path}: model_type {hf['model_type']!r} is not albert")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{path}: only absolute position embeddings are supported")
    act = hf.get("hidden_act", "gelu_new")  # transformers' default, and AlbertConfig's, when the key is absent
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise ValueError(f"{path}: hidden_act {act!r} is not supported (only {', '.join(ACTIVATIONS)})")
    names = {f.name for f in fields(AlbertConfig)} - {"sharing"}
    return AlbertConfig(**{k: v for k, v in hf.items() if k in names}, sharing="all")


def _read_weights(folder: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    index = folder / "model.safetensors.index.json"
    if index.exists():  # sharded by transformers for big models
        shards = _shard_names(index)
        return index, {k: v for shard in shards for k, v in load_file(folder / shard).items()}
    for name in ("model.safetensors", "pytorch_model.bin"):
        path = folder / name
        if path.exists() and name.endswith(".bin"):
            return path, load_checkpoint(path)  # a pickle: read weights-only, a type beyond tensors refused
        if path.exists():
            return path, load_file(path)
    raise FileNotFoundError(f"{folder} has neither model.safetensors nor pytorch_model.bin")


def _shard_names(index: Path) -> list[str]:
    """The shard files a ``model.safetensors.index.json`` names, each a plain file name beside it: a path (a
    folder, ``..``, an absolute one) would read a file from elsewhere.

    Raises:
        ValueError: one line naming the index and the first name that is not a file name in its folder.
    """
    index_json = json.loads(index.read_text())
    weight_map = index_json.get("weight_map") if isinstance(index_json, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError(f"{index}: no weight_map of tensor names to shard files")
    for name in weight_map.values():
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
            raise ValueError(f"{index}: weight_map names {name!r}, not a file in {index.parent}; refusing to read it")
    return sorted(set(weight_map.values()))
