"""Checkpoints are read without running code: export, the ablation report and resuming refuse one that names any,
full file or sharded folder, and so do the readers of a Hugging Face folder's pytorch_model.bin; neither kind of
folder has a shard read from outside it. A sharded save cut off part-way never replaces the checkpoint before it.

The hostile checkpoint is a pretraining checkpoint whose unpickling in full would create a file, ``pwned``; each
reader must refuse it with one line naming the file and what it names, and ``pwned`` must not appear.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import pickle
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import lightning.pytorch.strategies.model_parallel as lightning_model_parallel
import pytest
import torch
import torch.distributed.checkpoint as dcp

from albert_lightning.checkpoints import load_checkpoint
from albert_lightning.interop.export import main as export_main
from albert_lightning.interop.hf import export_hf, import_hf
from albert_lightning.interop.pretrained import load_pretrained, read_start
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from tests.conftest import DISTRIBUTED_ENV
from tests.test_pretraining import REPO, cli_in_process, fit_args, fit_in_process, fit_subprocess, write_subset


class Touch:
    """Unpickled, it creates ``path`` (through ``getattr(PosixPath, "touch")``): code where data should be."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


class MakeDir:
    """Unpickled, it creates the folder ``path`` through ``os.mkdir``, a function of a module torch blocks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (str(self.path),))


def hostile(path: Path, payload: object) -> Path:
    """Writes a tiny model's pretraining checkpoint that also holds ``payload``."""
    model = AlbertForPreTraining(AlbertConfig.preset("tiny"))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": state, "hyper_parameters": {"config": asdict(model.config)}, "x": payload}, path)
    return path


@pytest.fixture(scope="module")
def shards(pipeline_run, tmp_path_factory) -> Path:
    return write_subset(pipeline_run.shards, tmp_path_factory.mktemp("safe") / "shards", 20)


def test_the_hostile_checkpoint_runs_its_code_when_unpickled_in_full(tmp_path: Path) -> None:
    path = hostile(tmp_path / "last.ckpt", Touch(tmp_path / "pwned"))
    torch.load(path, weights_only=False)  # what export did: the file's code ran
    assert (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("payload", "named"), [(Touch, "getattr"), (MakeDir, "posix.mkdir")])
def test_load_checkpoint_refuses_code_naming_the_file_and_the_type(tmp_path: Path, payload: type, named: str) -> None:
    path = hostile(tmp_path / "last.ckpt", payload(tmp_path / "pwned"))
    with pytest.raises(ValueError, match=rf"^{path}: holds {named}, which no checkpoint of this project does") as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "pwned").exists()


def test_the_export_command_refuses_a_hostile_checkpoint_in_one_line(tmp_path: Path) -> None:
    path = hostile(tmp_path / "last.ckpt", Touch(tmp_path / "pwned"))
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    command = [sys.executable, "-m", "albert_lightning.export", "--checkpoint", str(path), "--output"]
    done = subprocess.run([*command, str(tmp_path / "export")], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-4000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"export: error: {path}: holds getattr, "), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no pwned, no export


def test_the_ablation_report_refuses_a_hostile_run_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "baseline"
    path = hostile(run / "pretrain" / "seed-1" / "checkpoints" / "last.ckpt", Touch(tmp_path / "pwned"))
    (run / "eval" / "seed-1").mkdir(parents=True)
    (run / "eval" / "seed-1" / "metrics.json").write_text("{}\n")  # a finished run: it is read
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    command = [sys.executable, "-m", "albert_lightning.ablation_report", "--runs", str(tmp_path / "runs")]
    done = subprocess.run(
        [*command, "--output", str(tmp_path / "report")], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr[-4000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ablation_report: error: {path}: holds getattr, "), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no pwned, no report


def test_resuming_from_a_hostile_checkpoint_is_refused_before_the_run_starts(shards: Path, tmp_path: Path) -> None:
    path = hostile(tmp_path / "elsewhere" / "last.ckpt", Touch(tmp_path / "pwned"))
    root = tmp_path / "run"
    done = fit_subprocess(fit_args(root, shards, 4, 2, f"--ckpt_path={path}"), check=False)
    assert done.returncode == 1, done.stderr[-4000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"fit: error: {path}: holds getattr, which no checkpoint"), done.stderr[-4000:]
    assert not (tmp_path / "pwned").exists()
    assert not root.exists()  # nothing ran: not even the config Lightning saves at setup


def test_resuming_last_checks_the_runs_last_checkpoint(shards: Path, tmp_path: Path) -> None:
    path = hostile(tmp_path / "checkpoints" / "last.ckpt", Touch(tmp_path / "pwned"))
    with pytest.raises(ValueError, match=rf"^{path}: holds getattr"):
        with cli_in_process(fit_args(tmp_path, shards, 4, 2, "--ckpt_path=last")):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]  # no pwned, no config.yaml


def test_lightnings_own_load_is_weights_only_too(shards: Path, tmp_path: Path, monkeypatch) -> None:
    # Without the check before the run, Lightning's restore reads the file: it must refuse it the same way.
    monkeypatch.setattr("albert_lightning.pretraining.cli.check_resumed_checkpoints", lambda trainer, ckpt_path: None)
    path = hostile(tmp_path / "elsewhere" / "last.ckpt", Touch(tmp_path / "pwned"))
    with pytest.raises(ValueError, match=rf"^{path}: holds getattr"):
        with cli_in_process(fit_args(tmp_path / "run", shards, 4, 2, f"--ckpt_path={path}")):
            pass
    assert not (tmp_path / "pwned").exists()


# ------------------------------------------------------------------------ sharded checkpoints (DCP folders)


def dcp_folder(folder: Path, state: dict) -> Path:
    """A sharded checkpoint folder of ``state`` as torch.distributed.checkpoint writes one, with a meta.pt."""
    dcp.save(state, checkpoint_id=folder, no_dist=True)
    torch.save({"global_step": 1}, folder / "meta.pt")
    return folder


def test_a_sharded_index_naming_code_is_refused_before_the_run_starts(shards: Path, tmp_path: Path) -> None:
    # torch.distributed.checkpoint unpickles .metadata in full, with no weights-only mode of its own.
    folder = dcp_folder(tmp_path / "elsewhere" / "last.ckpt", {"state_dict": {"w": torch.ones(2)}})
    (folder / ".metadata").write_bytes(pickle.dumps(Touch(tmp_path / "pwned")))
    with pytest.raises(ValueError, match=rf"^{folder / '.metadata'}: holds pathlib.Path.touch, which no checkpoint"):
        with cli_in_process(fit_args(tmp_path / "run", shards, 4, 2, f"--ckpt_path={folder}")):
            pass
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "run").exists()


def test_a_sharded_value_naming_code_is_refused_in_one_line(tmp_path: Path) -> None:
    # A value that is not a tensor (an optimizer's hyper-parameters) is a torch.save'd blob in a shard.
    folder = dcp_folder(tmp_path / "last.ckpt", {"state_dict": {"w": torch.ones(2), "x": Touch(tmp_path / "pwned")}})
    with pytest.raises(ValueError, match=rf"^{folder} \(state_dict.x\): holds getattr, which no checkpoint"):
        load_checkpoint(folder)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("shard", "error"),
    [
        ("../outside.distcp", "names a shard '../outside.distcp' that is not a file of the folder; refused"),
        ("/etc/passwd", "names a shard '/etc/passwd' that is not a file of the folder; refused"),
        ("gone.distcp", "names the shard gone.distcp, which the folder lacks; was it written completely?"),
    ],
)
def test_a_sharded_index_naming_a_file_outside_its_folder_or_missing_is_refused(
    tmp_path: Path, shard: str, error: str
) -> None:
    folder = dcp_folder(tmp_path / "last.ckpt", {"state_dict": {"w": torch.ones(2)}})
    (tmp_path / "outside.distcp").write_bytes((folder / "__0_0.distcp").read_bytes())
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    for index, info in metadata.storage_data.items():
        metadata.storage_data[index] = dataclasses.replace(info, relative_path=shard)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    index = folder / ".metadata"
    with pytest.raises(ValueError, match=rf"^{re.escape(f'{index}: {error}')}$"):
        load_checkpoint(folder)


def test_a_folder_without_an_index_is_not_taken_for_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "last.ckpt").mkdir()
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'last.ckpt' / 'meta.pt'}: not a readable checkpoint"):
        load_checkpoint(tmp_path / "last.ckpt")


def test_a_sharded_save_cut_off_leaves_the_checkpoint_before_it_whole(
    shards: Path, tmp_path: Path, monkeypatch
) -> None:
    # Lightning writes a sharded checkpoint into its folder in place: cut off after the shards, before meta.pt,
    # the folder would hold step 2's weights under step 1's loop state and read as whole.
    save, saved = lightning_model_parallel._distributed_checkpoint_save, []

    def cut_off_after_the_second_saves_shards(state: dict, path: Path) -> None:
        save(state, path)
        saved.append({k: v.full_tensor().clone() for k, v in state["state_dict"].items()})
        if len(saved) == 2:
            raise RuntimeError("node pre-empted")

    monkeypatch.setattr(lightning_model_parallel, "_distributed_checkpoint_save", cut_off_after_the_second_saves_shards)
    every_step = [
        "--trainer.strategy.init_args.save_distributed_checkpoint=true",
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.filename=kept",
        "--trainer.callbacks.enable_version_counter=false",
    ]
    with pytest.raises(RuntimeError, match="node pre-empted"):
        with cli_in_process(fit_args(tmp_path, shards, 4, 2, *every_step)):
            pass
    kept = load_checkpoint(tmp_path / "checkpoints" / "kept.ckpt")
    assert kept["global_step"] == 1 and kept["state_dict"].keys() == saved[0].keys()
    assert all(torch.equal(kept["state_dict"][k], saved[0][k]) for k in saved[0])
    assert not all(torch.equal(saved[1][k], saved[0][k]) for k in saved[0])  # step 2's weights were another's


def test_a_real_sharded_checkpoint_reads_as_the_trained_weights_and_resumes(shards: Path, tmp_path: Path) -> None:
    save = "--trainer.strategy.init_args.save_distributed_checkpoint=true"
    trained = fit_in_process(fit_args(tmp_path, shards, 4, 2, save))
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in last.iterdir()) == [".metadata", "__0_0.distcp", "meta.pt"]
    checkpoint = load_checkpoint(last)
    assert checkpoint["global_step"] == 2
    assert {f"model.{k}" for k in trained} == checkpoint["state_dict"].keys()
    assert all(torch.equal(checkpoint["state_dict"][f"model.{k}"], v) for k, v in trained.items())
    model, _ = load_pretrained(last)  # evaluate --checkpoint and --model.init_from read it as they read a file
    assert all(torch.equal(model.state_dict()[k], v) for k, v in trained.items())
    export_main(["--params", str(tmp_path / "none.yaml"), "--checkpoint", str(last), "--output", str(tmp_path / "hf")])
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "model.safetensors"]
    with cli_in_process(fit_args(tmp_path, shards, 4, 3, save, f"--ckpt_path={last}")) as cli:
        assert cli.trainer.global_step == 3
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt"]  # no partial left


def test_a_real_checkpoint_loads_weights_only_resumes_and_exports(shards: Path, tmp_path: Path) -> None:
    with cli_in_process(fit_args(tmp_path, shards, 4, 2)):
        pass
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.serialization.get_unsafe_globals_in_checkpoint(last) == []  # nothing beyond torch's defaults
    assert load_checkpoint(last)["global_step"] == 2
    with cli_in_process(fit_args(tmp_path, shards, 4, 3, f"--ckpt_path={last}")) as cli:
        assert cli.trainer.global_step == 3
    # No params file: the repository's params.yaml would add its spiece.model, a vocabulary of another size
    export_main(
        ["--params", str(tmp_path / "none.yaml"), "--checkpoint", str(last), "--output", str(tmp_path / "export")]
    )
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["config.json", "model.safetensors"]


class Weights(collections.OrderedDict):
    """A state dict of a type of its own: unpickled in full, it creates the file its ``mark`` names."""

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        Path(state["mark"]).touch()


def hf_folder(folder: Path) -> Path:
    """A tiny model's Hugging Face folder (config.json, model.safetensors) as export writes it."""
    model = AlbertForPreTraining(AlbertConfig.preset("tiny"))
    return export_hf(model, model.config, folder)


def hostile_bin(folder: Path, payload: str) -> Path:
    """A Hugging Face folder whose pytorch_model.bin, unpickled in full, creates ``pwned`` beside the folder."""
    from safetensors.torch import load_file

    weights = load_file(hf_folder(folder) / "model.safetensors")
    (folder / "model.safetensors").unlink()  # the .bin is what a reader takes
    mark = folder.parent / "pwned"
    if payload == "subclass":
        state = Weights(weights)
        state.mark = str(mark)
    else:
        state = {**weights, "x": Touch(mark)}
    torch.save(state, folder / "pytorch_model.bin")
    return folder / "pytorch_model.bin"


READERS = [read_start, load_pretrained, import_hf]  # --model.init_from, evaluate --checkpoint, the Python API


def test_the_hostile_weights_file_runs_its_code_when_unpickled_in_full(tmp_path: Path) -> None:
    torch.load(hostile_bin(tmp_path / "hf", "subclass"), weights_only=False)
    assert (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("payload", "named"), [("subclass", f"{__name__}.Weights"), ("touch", "getattr")])
@pytest.mark.parametrize("reader", READERS)
def test_a_pytorch_model_bin_naming_code_is_refused_in_one_line(tmp_path: Path, reader, payload, named) -> None:
    path = hostile_bin(tmp_path / "hf", payload)
    with pytest.raises(ValueError, match=rf"^{re.escape(f'{path}: holds {named}, which no checkpoint')}") as e:
        reader(tmp_path / "hf")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "pwned").exists()


def sharded(folder: Path, shards: list[str]) -> Path:
    """A Hugging Face folder whose weights are split over ``shards`` (names as its index gives them, relative to
    the folder) by a model.safetensors.index.json; returns the index."""
    from safetensors.torch import load_file, save_file

    weights = load_file(hf_folder(folder) / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(weights)
    weight_map = {name: shards[i * len(shards) // len(names)] for i, name in enumerate(names)}
    for shard in shards:
        save_file({k: v for k, v in weights.items() if weight_map[k] == shard}, folder / shard)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder / "model.safetensors.index.json"


def test_a_sharded_folder_reads_its_shards(tmp_path: Path) -> None:
    sharded(tmp_path / "hf", ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
    model = AlbertForPreTraining(AlbertConfig.preset("tiny"))
    assert read_start(tmp_path / "hf").state.keys() == model.state_dict().keys()


@pytest.mark.parametrize("shard", ["../secret.safetensors", "{tmp}/secret.safetensors", "sub/../../secret.safetensors"])
@pytest.mark.parametrize("reader", READERS)
def test_a_shard_index_naming_a_file_outside_its_folder_is_refused(tmp_path: Path, reader, shard: str) -> None:
    shard = shard.format(tmp=tmp_path)  # an absolute path
    index = sharded(tmp_path / "hf", ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
    (tmp_path / "hf" / "sub").mkdir()  # so that sub/../.. is the folder's parent
    (index.parent / "model-00002-of-00002.safetensors").rename(tmp_path / "secret.safetensors")  # a readable shard
    weight_map = json.loads(index.read_text())["weight_map"]
    weight_map = {k: shard if v.startswith("model-00002") else v for k, v in weight_map.items()}
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match=rf"^{re.escape(f'{index}: weight_map names {shard!r}, not a file in')}"):
        reader(tmp_path / "hf")
