"""Beam pipelines that turn documents into ALBERT pretraining shards, in data-flow order.

The stages, each a command (``python -m pipelines.<stage>``, ``--help`` lists its flags; a flag neither the stage
nor Beam knows fails) and a stage of ``dvc.yaml``:

- ``corpus``    documents with stable ids (embedded default: Python's own documentation) → ``data/corpus/``
- ``segment``   documents → normalised sentences                                         → ``data/sentences/``
- ``dedup``     exact and near-duplicate documents, and shared passages, removed          → ``data/deduped/``
- ``vocab``     a hash-bounded sentence sample → SentencePiece unigram model              → ``data/vocab/``
- ``instances`` SOP pairs with n-gram masks → Arrow IPC shards + ``manifest.json``        → ``data/shards/``
- ``tasks``     downstream tasks from the documents' labels (and return questions)       → ``data/tasks/``
- ``leakage``   how much held-out text the shards and tasks' training side contain        → ``data/leakage/``

What they use, by layer, lowest first (imports run down, never up: ``tests/test_import_layers.py``):

- ``algorithms``  pure: text normalisation, sentences, hashes and seeds, the held-out split, SOP pairs, masking,
                  near duplicates and passages, ALBERT's vocabulary id layout (neither Beam nor torch);
- ``runtime``     what every stage shares: command line, errors and logs, counters, files, spill, progress;
- ``contracts``   the files between stages: documents and sentences, shards and their manifest;
- ``readers``     the corpus stage's inputs: users' files, the embedded default, labels;
- ``steps``       a stage's work too large for its module (``dedup``'s six steps).
"""

import hashlib as _hashlib
import logging as _logging
import os as _os
import sys as _sys
from pathlib import Path as _Path

# The modules of ``algorithms`` holding numba-compiled code. numba's cache checks only the file a function is
# defined in, so a compiled loop of ``sop`` would keep the old ``seeding.mersenne_random`` it was built with after
# an edit (or an upgrade) of ``seeding.py`` alone, and write other shards than the source says, silently. Keying
# the cache folder by all of them rebuilds every compiled function once whenever any of them changes.
COMPILED_MODULES = ("batch_hashes", "masked_pairs", "masking", "seeding", "sop")


def numba_cache_dir(package: _Path, base: str | None) -> str:
    """Returns the numba cache folder for the compiled modules' current source: ``base`` (numba's
    ``NUMBA_CACHE_DIR``; None: the package's ``__pycache__``) / ``numba-`` + a digest of their bytes."""
    digest = _hashlib.sha256()
    for name in COMPILED_MODULES:
        digest.update((package / "algorithms" / f"{name}.py").read_bytes())
    leaf = f"numba-{digest.hexdigest()[:16]}"
    if base and _os.path.basename(base.rstrip("/")) == leaf:  # set by the process that started this one
        return base
    return _os.path.join(base or str(package / "__pycache__"), leaf)


if "numba" not in _sys.modules:  # numba reads its cache folder once, at import
    _os.environ["NUMBA_CACHE_DIR"] = numba_cache_dir(_Path(__file__).parent, _os.environ.get("NUMBA_CACHE_DIR"))

# Beam logs this at import on every machine without the GCP extras, which no local stage needs: keep it out of
# every command's output (the GCP runners install apache-beam[gcp], which has apitools).
_logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())
