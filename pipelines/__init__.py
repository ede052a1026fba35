"""Beam pipelines that turn documents into ALBERT pretraining shards, in data-flow order.

- ``corpus``    documents with stable ids (embedded default: Python's own documentation) → ``data/corpus/``
- ``segment``   documents → normalised sentences                                         → ``data/sentences/``
- ``vocab``     a hash-bounded sentence sample → SentencePiece unigram model              → ``data/vocab/``
- ``instances`` SOP pairs with n-gram masks → Arrow IPC shards + ``manifest.json``        → ``data/shards/``
- ``tasks``     downstream classification tasks from the documents' metadata             → ``data/tasks/``

Each stage runs as ``python -m pipelines.<stage>`` (``--help`` lists its flags; unknown flags go to Beam) and
under ``dvc repro``. What they share: ``params`` and ``options`` (command line), ``stage`` (counters, output
clean-up), ``files`` and ``commands``. The contracts between them: ``documents``, ``shards`` and
``vocab_layout``. The algorithms (``textnorm``, ``sentences``, ``sop``, ``masking``, ``masked_pairs``, ``batch_hashes``,
``seeding``) and the contracts ``shards`` and ``vocab_layout`` are pure: they import neither Beam nor torch.
"""

import hashlib as _hashlib
import logging as _logging
import os as _os
import sys as _sys
from pathlib import Path as _Path

# The modules holding numba-compiled code. numba's cache checks only the file a function is defined in, so a
# compiled loop of ``sop`` would keep the old ``seeding.mersenne_random`` it was built with after an edit (or an
# upgrade) of ``seeding.py`` alone, and write other shards than the source says, silently. Keying the cache
# folder by all of them rebuilds every compiled function once whenever any of them changes.
COMPILED_MODULES = ("batch_hashes", "masked_pairs", "masking", "seeding", "sop")


def numba_cache_dir(package: _Path, base: str | None) -> str:
    """Returns the numba cache folder for the compiled modules' current source: ``base`` (numba's
    ``NUMBA_CACHE_DIR``; None: the package's ``__pycache__``) / ``numba-`` + a digest of their bytes."""
    digest = _hashlib.sha256()
    for name in COMPILED_MODULES:
        digest.update((package / f"{name}.py").read_bytes())
    leaf = f"numba-{digest.hexdigest()[:16]}"
    if base and _os.path.basename(base.rstrip("/")) == leaf:  # set by the process that started this one
        return base
    return _os.path.join(base or str(package / "__pycache__"), leaf)


if "numba" not in _sys.modules:  # numba reads its cache folder once, at import
    _os.environ["NUMBA_CACHE_DIR"] = numba_cache_dir(_Path(__file__).parent, _os.environ.get("NUMBA_CACHE_DIR"))

# Beam logs this at import on every machine without the GCP extras, which no local stage needs: keep it out of
# every command's output (the GCP runners install apache-beam[gcp], which has apitools).
_logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())
