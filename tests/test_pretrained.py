"""Reading a start (``interop/pretrained.py``): a checkpoint is read once and no model is built for it, and every
load of what was read into a model (fine-tuning's, continued pretraining's, ``import_hf``'s, export's) is the one
checked load, refusing in one line naming the file any key the model lacks or the start does not name."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from albert_lightning.checkpoints import load_pretraining_checkpoint
from albert_lightning.interop.hf import import_hf
from albert_lightning.interop.pretrained import Start, load_pretrained, read_start
from albert_lightning.model import TIED_WEIGHTS, AlbertConfig, AlbertForPreTraining
from pipelines.algorithms.textnorm import Normalizer

SHA = "ab" * 32


def tiny() -> AlbertForPreTraining:
    torch.manual_seed(0)
    return AlbertForPreTraining(AlbertConfig.preset("tiny"))


def checkpoint(path: Path, model: AlbertForPreTraining, drop: tuple[str, ...] = (), extra: dict | None = None) -> Path:
    """A pretraining checkpoint of ``model`` without the tensors ``drop`` names and with those of ``extra``."""
    state = {f"model.{k}": v for k, v in model.state_dict().items() if k not in drop} | (extra or {})
    hyper_parameters = {"config": asdict(model.config), "spiece_sha256": SHA, "normalizer": {"lower_case": False}}
    torch.save({"state_dict": state, "hyper_parameters": hyper_parameters}, path)
    return path


@pytest.mark.parametrize("drop", [(), tuple(TIED_WEIGHTS)], ids=["both-tied-names", "one-tied-name"])
def test_read_start_reads_a_checkpoint_once_and_builds_no_model(tmp_path, monkeypatch, drop):
    model = tiny()
    path = checkpoint(tmp_path / "last.ckpt", model, drop)
    reads, load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda f, *args, **kwargs: reads.append(f) or load(f, *args, **kwargs))

    def no_model(*args, **kwargs):
        raise AssertionError("read_start built a model")

    monkeypatch.setattr("albert_lightning.checkpoints.AlbertForPreTraining", no_model)
    monkeypatch.setattr("albert_lightning.interop.pretrained.AlbertForPreTraining", no_model)
    start = read_start(path)
    assert reads == [path]
    assert (start.config, start.missing, start.spiece_sha256) == (model.config, [], SHA)
    assert start.normalizer == Normalizer(lower_case=False)
    assert start.state.keys() == model.state_dict().keys()  # both names of a tied pair, however it was saved
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(start.state[name], tensor, rtol=0, atol=0)


BAD_KEYS = [
    (("albert.pooler.weight",), {}, r"missing keys \['albert\.pooler\.weight'\], unexpected keys \[\]"),
    ((), {"model.albert.extra": torch.zeros(1)}, r"missing keys \[\], unexpected keys \['albert\.extra'\]"),
]


@pytest.mark.parametrize(("drop", "extra", "says"), BAD_KEYS, ids=["missing", "unexpected"])
@pytest.mark.parametrize("reader", [load_pretrained, load_pretraining_checkpoint])
def test_a_checkpoint_whose_keys_are_not_the_models_is_refused_in_one_line(tmp_path, reader, drop, extra, says):
    path = checkpoint(tmp_path / "last.ckpt", tiny(), drop, extra)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: {says}$"):
        reader(path)


def test_load_into_takes_only_the_heads_a_start_names_as_missing():
    model = tiny()
    head = sorted(k for k in model.state_dict() if k.startswith("sop_classifier."))
    state = {k: v for k, v in model.state_dict().items() if k not in head}
    unnamed = Start("somewhere/hf", model.config, state, [], Normalizer(), None)
    with pytest.raises(ValueError, match=rf"^somewhere/hf: missing keys {re.escape(str(head))}, unexpected keys"):
        unnamed.load_into(AlbertForPreTraining(model.config))

    named = Start("somewhere/hf", model.config, state, head, Normalizer(), None)
    fresh = AlbertForPreTraining(model.config)
    initialised = {k: v.clone() for k, v in fresh.state_dict().items() if k in head}
    named.load_into(fresh)
    for name, tensor in fresh.state_dict().items():  # the named head keeps the new model's initialisation
        torch.testing.assert_close(tensor, initialised.get(name, state.get(name)), rtol=0, atol=0)


def test_load_into_names_the_start_on_a_tensor_of_another_shape_in_one_line():
    model = tiny()
    start = Start(
        "somewhere/hf",
        model.config,
        model.state_dict() | {"albert.pooler.bias": torch.zeros(3)},
        [],
        Normalizer(),
        None,
    )
    with pytest.raises(ValueError, match=r"^somewhere/hf: .*size mismatch for albert\.pooler\.bias") as e:
        start.load_into(AlbertForPreTraining(model.config))
    assert "\n" not in str(e.value)


def test_import_hf_loads_through_the_same_check(tmp_path, monkeypatch):
    # read_hf checks a folder's keys itself; the load after it must refuse what slips past, not drop it silently.
    model = tiny()
    state = {k: v for k, v in model.state_dict().items() if k != "albert.pooler.weight"}
    monkeypatch.setattr("albert_lightning.interop.hf.read_hf", lambda folder: (model.config, state, []))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path))}: missing keys \['albert\.pooler\.weight'\]"):
        import_hf(tmp_path)
