"""Document labels: the class a corpus record carries into its ``meta`` for the tasks stage (pure; no Beam).

``tasks.label_field`` names a JSON Lines key or Parquet column (``sources`` reads it beside the text) or is
``folder``, the name of the input file's parent folder, for texts sorted into one folder per class. The corpus
stage writes a labelled document's class as ``meta["label"]`` and the field as ``meta["label_field"]``; the
tasks stage turns them into a classification task named for the field (``pipelines.tasks``).
"""

from __future__ import annotations

import json

import pyarrow as pa

from pipelines.runtime.params import load_params

__all__ = [
    "FOLDER_LABEL",
    "check_label_field",
    "folder_name",
    "is_label_type",
    "label_text",
    "require_labels",
    "tasks_label_field",
]

FOLDER_LABEL = "folder"
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def check_label_field(label_field: str | None, reserved: tuple[str, ...] = ()) -> str | None:
    """Returns ``label_field`` when it can name a task folder and is none of ``reserved``.

    Raises:
        ValueError: in one line, naming the field, when it is empty, holds other characters than letters,
            digits and ``_ . -``, starts with a dot, or is reserved (another task's name).
    """
    if label_field is None:
        return None
    if not label_field or label_field[0] == "." or not set(label_field) <= _NAME_CHARACTERS or label_field in reserved:
        taken = f", nor one of {', '.join(reserved)}" if reserved else ""
        raise ValueError(
            f"label_field {label_field!r} names the task's folder: letters, digits and _ . - only, no leading "
            f"dot{taken}"
        )
    return label_field


def label_text(value: object, where: str, field: str) -> str | None:
    """A record's label as text, numbers and booleans as JSON spells them (``3``, ``true``); None when it has
    none (null or empty).

    Raises:
        ValueError: ``where`` (file and line) and ``field`` in one line, for a nested object, a list or a
            fraction: a class is a name, not a structure or a measurement.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int):
        return json.dumps(value)
    raise ValueError(
        f"{where}: '{field}' is a {type(value).__name__}, not a class label (a string, integer or boolean)"
    )


def folder_name(path: str) -> str:
    """The name of the folder holding ``path`` (a local path or a URL); "" for a bare file name."""
    parts = path.replace("\\", "/").split("/")
    return parts[-2] if len(parts) > 1 else ""


def is_label_type(column: pa.DataType) -> bool:
    """Whether a Parquet column can hold classes: strings, integers or booleans (dictionary-encoded or not)."""
    if pa.types.is_dictionary(column):
        column = column.value_type
    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_boolean)
    return any(kind(column) for kind in kinds)


def tasks_label_field(params_file: str | None) -> str | None:
    """params.yaml's ``tasks.label_field``: the corpus stage carries the field the tasks stage names its task for."""
    return load_params(params_file, "tasks").get("label_field")


def require_labels(label_field: str, labelled: int, input_files: int, first_file: str) -> None:
    """Raises ValueError when no document got a label: a misspelt field would otherwise give no task, silently.

    Raises:
        ValueError: in one line naming the field and ``first_file``, when ``labelled`` is 0.
    """
    if not labelled:
        raise ValueError(
            f"{first_file}: no record of the {input_files} input file(s) has the label field '{label_field}' "
            f"(tasks.label_field; text and bert files have no fields: '{FOLDER_LABEL}' labels them by folder)"
        )
