"""An export replaces only an earlier export or an empty folder: anything else at ``--output`` is refused untouched."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from albert_lightning.evaluation.reading.runner import evaluate_reading_task
from albert_lightning.interop import hf
from albert_lightning.interop.hf import EXPORT_FILES, check_export_target, export_hf
from albert_lightning.model import AlbertConfig, AlbertForPreTraining
from tests.conftest import DISTRIBUTED_ENV

REPO = Path(__file__).resolve().parents[1]
WEIGHT = "albert.embeddings.word_embeddings.weight"


@pytest.fixture(scope="module")
def spiece_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 60-piece SentencePiece model in ALBERT's id layout, so that an export writes its tokenizer files too."""
    import sentencepiece

    folder = tmp_path_factory.mktemp("vocab")
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7))) for _ in range(80)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(300)]
    (folder / "text.txt").write_text("\n".join(lines) + "\n")
    sentencepiece.SentencePieceTrainer.train(
        input=str(folder / "text.txt"), model_prefix=str(folder / "spiece"), vocab_size=60, pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2,
    )  # fmt: skip
    return str(folder / "spiece.model")


def model(seed: int) -> AlbertForPreTraining:
    torch.manual_seed(seed)
    return AlbertForPreTraining(AlbertConfig.preset("tiny", vocab_size=60))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name → bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def exported_weight(folder: Path) -> torch.Tensor:
    return load_file(folder / "model.safetensors")[WEIGHT]


def export_command(tmp_path: Path, output: Path) -> subprocess.CompletedProcess:
    """``python -m albert_lightning.export`` on a checkpoint of a tiny model into ``output``."""
    network = model(3)
    state = {f"model.{k}": v for k, v in network.state_dict().items()}
    checkpoint = tmp_path / "last.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"config": asdict(network.config)}}, checkpoint)
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    # No params file: the repository's params.yaml would add its spiece.model, a vocabulary of another size
    command = [sys.executable, "-m", "albert_lightning.export", "--params", str(tmp_path / "none.yaml")]
    command += ["--checkpoint", str(checkpoint), "--output"]
    return subprocess.run([*command, str(output)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_export_files_are_what_an_export_writes(tmp_path: Path, spiece_model: str) -> None:
    network = model(0)
    export_hf(network, network.config, tmp_path / "export", spiece_model)
    # A SentencePiece export: every export file but the other vocabulary's (vocab.txt, tests/test_wordpiece_stages)
    assert {p.name for p in (tmp_path / "export").iterdir()} == EXPORT_FILES - {"vocab.txt"}


def test_the_export_command_refuses_a_folder_of_the_users_files_and_touches_nothing(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "thesis.tex").write_text("years of work\n")
    (mine / "config.json").write_text("{}\n")  # an export's name beside a foreign one: still not an export
    (mine / "notes" / "a.txt").write_text("a\n")
    before = snapshot(mine)

    done = export_command(tmp_path, mine)
    assert done.returncode == 1, done.stderr[-4000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"export: error: {mine}: holds files an export does not write (notes, thesis.tex)")
    assert snapshot(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "mine"]  # no temporary folder left


def test_a_data_folder_is_refused_whatever_it_holds(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "corpus").mkdir(parents=True)
    (data / "corpus" / "part-0.jsonl").write_text('{"text": "x"}\n')
    before = snapshot(data)
    network = model(0)
    with pytest.raises(FileExistsError, match=rf"^{data}: holds files an export does not write \(corpus\)"):
        export_hf(network, network.config, data)
    assert snapshot(data) == before
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_a_file_or_a_link_at_the_target_is_refused(tmp_path: Path) -> None:
    network = model(0)
    (tmp_path / "file").write_text("mine\n")
    with pytest.raises(FileExistsError, match=rf"^{tmp_path / 'file'}: exists and is not a folder"):
        export_hf(network, network.config, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "mine\n"
    export_hf(network, network.config, tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")  # holds an export, but through a link the user made
    with pytest.raises(FileExistsError, match="link: exists and is not a folder"):
        export_hf(network, network.config, tmp_path / "link")
    assert (tmp_path / "link").is_symlink()


def test_an_earlier_export_and_an_empty_folder_are_replaced(tmp_path: Path, spiece_model: str) -> None:
    first, second = model(0), model(1)
    (tmp_path / "export").mkdir()
    export_hf(first, first.config, tmp_path / "export", spiece_model)  # an empty folder
    torch.testing.assert_close(exported_weight(tmp_path / "export"), first.state_dict()[WEIGHT])
    export_hf(second, second.config, tmp_path / "export")  # an earlier export, with its tokenizer files
    assert {p.name for p in (tmp_path / "export").iterdir()} == {"config.json", "model.safetensors"}
    torch.testing.assert_close(exported_weight(tmp_path / "export"), second.state_dict()[WEIGHT])
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # the old one set aside was deleted


def test_the_command_replaces_its_own_earlier_export(tmp_path: Path) -> None:
    network = model(0)
    export_hf(network, network.config, tmp_path / "export")
    done = export_command(tmp_path, tmp_path / "export")
    assert done.returncode == 0, done.stderr[-4000:]
    torch.testing.assert_close(exported_weight(tmp_path / "export"), model(3).state_dict()[WEIGHT])


def test_a_file_put_there_during_the_export_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = model(0), model(1)
    export_hf(first, first.config, tmp_path / "export")
    write_model = hf._write_model

    def user_saves_a_file_meanwhile(*args, **kwargs) -> None:
        write_model(*args, **kwargs)
        (tmp_path / "export" / "results.csv").write_text("mine\n")

    monkeypatch.setattr(hf, "_write_model", user_saves_a_file_meanwhile)
    with pytest.raises(FileExistsError, match=r"holds files an export does not write \(results\.csv\)"):
        export_hf(second, second.config, tmp_path / "export")
    assert (tmp_path / "export" / "results.csv").read_text() == "mine\n"
    torch.testing.assert_close(exported_weight(tmp_path / "export"), first.state_dict()[WEIGHT])
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_a_failed_swap_puts_the_earlier_export_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = model(0), model(1)
    export_hf(first, first.config, tmp_path / "export")
    before = snapshot(tmp_path / "export")
    rename = Path.rename

    def failing_rename(self: Path, target: Path) -> Path:
        if self.name.startswith(".tmp-"):  # the new export moving into place
            raise OSError("simulated rename failure")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="simulated"):
        export_hf(second, second.config, tmp_path / "export")
    assert snapshot(tmp_path / "export") == before
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_reading_evaluation_refuses_a_foreign_finetuned_folder_before_fine_tuning(tmp_path: Path) -> None:
    target = tmp_path / "finetuned" / "returns"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("mine\n")
    check_export_target(tmp_path / "finetuned" / "absent")  # nothing there: fine
    task, config = SimpleNamespace(name="returns"), SimpleNamespace(output=str(tmp_path))
    # Neither a model nor an encoder: the refusal comes before either is used.
    with pytest.raises(FileExistsError, match=rf"^{target}: holds files an export does not write \(mine\.txt\)"):
        evaluate_reading_task(task, config, None, None)
    assert (target / "mine.txt").read_text() == "mine\n"
