"""Reading a model into a HIR Forest: a file of any supported format, an artifact, or a model
held in memory (a fitted estimator, a booster, an ``onnx.ModelProto``, the bytes of a file)."""

from __future__ import annotations

import os
from typing import Any

from silvanforge.errors import InputError, IRVerificationError, ModelFormatError
from silvanforge.artifact import archive
from silvanforge.ir import hir
from silvanforge.plan.memo import memoised
from silvanforge.plugins import registry

# Compiled artifacts are zip archives (``CompiledForest.save``).
ARTIFACT_SUFFIX = ".forge"
ZIP_MAGIC = b"PK\x03\x04"


def is_artifact(path: str | os.PathLike) -> bool:
    """A compiled artifact (a zip written by ``CompiledForest.save``), by extension or content."""
    path = os.fspath(path)
    if path.lower().endswith(ARTIFACT_SUFFIX):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZIP_MAGIC
    except OSError:
        return False


def _shown(path: str) -> str:
    """A path for an error message: a long "path" is model text passed by mistake, not echoed."""
    return path if len(path) <= 200 and "\n" not in path else \
        f"{path[:60]!r}... ({len(path)} characters: pass the model's contents as bytes, not str)"


def load_model(model: str | os.PathLike | bytes | hir.Forest | Any, fmt: str | None = None) -> hir.Forest:
    """The HIR forest of ``model``.

    ``model`` is a path (``str`` or ``Path``) to a model file, recognised by its content unless
    ``fmt`` names the format, or to a compiled artifact (its stored model); the ``bytes`` of
    either; a ``Forest``; or a model in memory that an installed importer reads: an
    ``xgboost.Booster`` or ``XGBModel``, a ``lightgbm.Booster`` or ``LGBMModel``, a fitted CatBoost model, an
    ``onnx.ModelProto``, a fitted scikit-learn forest.

        >>> forest = load_model("examples/model.json")
        >>> forest = load_model(xgb_classifier)            # doctest: +SKIP
    """
    if isinstance(model, hir.Forest):
        return model
    if isinstance(model, (str, os.PathLike)):
        return _load_path(os.fspath(model), fmt)
    if fmt is not None:
        raise InputError("fmt names the format of a model file; a model in memory is recognised "
                         "by its type")
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if not data:
            raise ModelFormatError("the model bytes are empty")
        if data[:4] == ZIP_MAGIC:
            return archive.read(data).forest
    reg = registry()
    forest = reg.hook.silvanforge_import_object(obj=model)
    if forest is None:
        what = "bytes" if isinstance(model, (bytes, bytearray, memoryview)) else \
            f"{type(model).__module__}.{type(model).__qualname__}"
        raise ModelFormatError(
            f"cannot read a model from {what}: give a model file's path or bytes (formats: "
            f"{', '.join(reg.formats()) or 'none installed'}), a compiled artifact, or a fitted "
            "XGBoost, LightGBM or scikit-learn model or onnx.ModelProto")
    return _verified(forest, "the model")


def verified_model(model) -> hir.Forest:
    """The HIR forest of ``model`` (what :func:`load_model` reads), verified once: as it loads,
    or, a ``Forest`` given as one, here (once a compile: the compile's memo remembers)."""
    if isinstance(model, hir.Forest):
        memoised(model, "verified", lambda: hir.verify(model) or True)
        return model
    return load_model(model)


def _load_path(path: str, fmt: str | None) -> hir.Forest:
    if os.path.isdir(path):
        raise ModelFormatError(f"{path} is a directory, not a model file")
    if not os.path.isfile(path):
        raise ModelFormatError(f"model file not found: {_shown(path)}")
    if fmt is None and is_artifact(path):
        return archive.read(path).forest
    reg = registry()
    if fmt is None:
        with open(path, "rb") as f:
            head = f.read(4096)
        if not head:
            raise ModelFormatError(f"{path}: the file is empty")
        fmt = reg.hook.silvanforge_detect_format(path=path, head=head)
        if fmt is None:
            # A pickle (protocol 2+ starts with 0x80) of an estimator is code, not a model file.
            hint = ("; it looks like a pickle: unpickle it yourself, from a source you trust, and "
                    "pass the estimator") if head[:1] == b"\x80" else ""
            raise ModelFormatError(
                f"{path}: not a model format any installed importer recognises "
                f"(known formats: {', '.join(reg.formats()) or 'none'}){hint}"
            )
    elif fmt not in reg.formats():
        raise ModelFormatError(f"unknown model format {fmt!r}; known: {', '.join(reg.formats())}")
    forest = reg.hook.silvanforge_import_model(path=path, fmt=fmt)
    if forest is None:
        raise ModelFormatError(f"{path}: no importer accepted format {fmt!r}")
    return _verified(forest, path)


def _verified(forest: hir.Forest, name: str) -> hir.Forest:
    try:
        hir.verify(forest)
    except IRVerificationError as exc:
        # The importer accepted something structurally impossible: the model is inconsistent.
        raise ModelFormatError(f"{name}: the model describes an invalid forest ({exc})") from exc
    return forest
