"""The data stages give the same bytes on any machine: run twice as two different machines would differ, the chain
corpus → segment → dedup → vocab → instances writes identical files.

What can differ between machines without any code changing: the order Python iterates a set or dict of strings
(hash randomisation, ``PYTHONHASHSEED``) and the SIMD kernels numpy dispatches to (an AVX-512 CPU takes other
loops than an AVX2-only one, and a float sum in other loops can round differently; ``NPY_DISABLE_CPU_FEATURES``
takes the second run down to the x86-64-v2 baseline). A stage that hashed set order or formatted a float computed
by a vectorised reduction would fail here. Training is another matter: docs/reproducibility.md.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHAIN = """
import sys
from pipelines import corpus, dedup, instances, segment, vocab
out = sys.argv[1]
common = ["--params", "/dev/null", "--direct_running_mode=in_memory", "--direct_num_workers=1"]
corpus.run([*common, "--output", f"{out}/corpus", "--embedded_max_documents=300"])
segment.run([*common, "--input", f"{out}/corpus", "--output", f"{out}/sentences"])
dedup.run([*common, "--input", f"{out}/sentences", "--output", f"{out}/deduped"])
vocab.run([*common, "--input", f"{out}/deduped", "--output", f"{out}/vocab", "--vocab_size=1000"])
instances.run([*common, "--input", f"{out}/deduped", "--spiece", f"{out}/vocab/spiece.model",
               "--output", f"{out}/shards", "--eval_output", f"{out}/eval_shards", "--max_seq_length=64",
               "--dupe_factor=2"])
"""

# Every SIMD target numpy 2 dispatches to above the x86-64-v2 baseline: the second run uses none of them.
NUMPY_BASELINE_ONLY = "X86_V3 X86_V4 AVX512_ICL"


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _chain(output: Path, **env: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "NPY_DISABLE_CPU_FEATURES")}
    environment.update(env)
    repo = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", CHAIN, str(output)], cwd=repo, env=environment, check=True,
                   capture_output=True, timeout=900)  # fmt: skip
    return _digests(output)


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="x86-64 numpy targets")
def test_the_data_stages_write_the_same_bytes_under_another_hash_seed_and_other_numpy_kernels(tmp_path: Path) -> None:
    first = _chain(tmp_path / "a", PYTHONHASHSEED="0")
    second = _chain(tmp_path / "b", PYTHONHASHSEED="4242", NPY_DISABLE_CPU_FEATURES=NUMPY_BASELINE_ONLY)
    assert any(name.startswith("shards/") and name.endswith(".arrow") for name in first), sorted(first)[:10]
    assert len(first) > 20
    differing = sorted(name for name in first.keys() | second.keys() if first.get(name) != second.get(name))
    assert not differing, f"outputs that depend on the machine: {differing}"
