"""Reading a model into a HIR Forest: a file of any supported format, an artifact, or a model
held in memory (a fitted estimator, a booster, an ``onnx.ModelProto``, the bytes of a file).

And what an importer plugin's hooks do, written once here: recognise a file or bytes by content, read
the path or the bytes, and read the library's own objects held in memory.

An importer distribution lists its formats and registers a :class:`FormatImporter` as its
plugin object (``[project.entry-points."silvanforge.importers"] myformat =
"my_package:plugin"``)::

    plugin = FormatImporter({"myformat": Format(detect, load, loads)}, from_object=read_my_object)

``detect(path, head) -> bool`` recognises content (``head``: the first 4096 bytes; ``path``
may be a name such as "the model bytes"), ``load(path) -> Forest`` reads a file,
``loads(data, name) -> Forest`` reads bytes (``name``: what messages call them), and
``from_object(obj) -> Forest | None`` reads objects of the format's library (None: not one).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from silvanforge.artifact import archive
from silvanforge.errors import InputError, IRVerificationError, ModelFormatError, UnsupportedModelError
from silvanforge.hookspecs import hookimpl
from silvanforge.ir import hir
from silvanforge.ir.hir import Forest
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
    if not os.path.isfile(path):  # (a pipe or a device is never peeked at: the read would block or consume it)
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZIP_MAGIC
    except OSError:
        return False


def _shown(path: str) -> str:
    """A path for an error message: a long "path" is model text passed by mistake, not echoed."""
    return path if len(path) <= 200 and "\n" not in path else \
        f"{path[:60]!r}... ({len(path)} characters: pass the model's contents as bytes, not str)"


# Libraries whose objects an importer of the same name (and extra) reads: one of theirs that none
# reads is a model of a kind not compiled, or one whose importer is not installed.
IMPORTED_LIBRARIES = ("sklearn", "xgboost", "lightgbm", "catboost", "onnx")


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
        library = type(model).__module__.split(".")[0]
        if library in IMPORTED_LIBRARIES and f"silvanforge.importers:{library}" not in dict(reg.pm.list_name_plugin()):
            raise ModelFormatError(f"{what}: reading {library} models needs SilvanForge's {library} importer: "
                                   f'pip install "silvanforge[{library}]"')
        if library in IMPORTED_LIBRARIES:
            # (a library's object of a kind its importer does not read: an isolation forest, a linear booster)
            raise UnsupportedModelError(
                f"{what} is not a model SilvanForge compiles: it reads tree ensembles that predict (XGBoost "
                "and LightGBM tree boosters, CatBoost models, scikit-learn's decision trees, forests and "
                "gradient boosting, ONNX tree ensembles), fitted")
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
        if os.path.exists(path):
            raise ModelFormatError(f"{path} is not a regular file (a pipe or a device): save the model to a file")
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


# How error messages name a model that has no file.
BYTES_NAME = "the model bytes"


def read_model_file(path, what: str = "model") -> bytes:
    """The bytes of the model file at ``path``; a file that cannot be read is a ModelFormatError
    naming it and the reason (``what``: "LightGBM model", ...)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None


@dataclasses.dataclass(frozen=True)
class Format:
    detect: Callable[[str, bytes], bool]
    load: Callable[[str], Forest]
    loads: Callable[[bytes, str], Forest]


class FormatImporter:
    """The importer hooks over a table of formats (name -> :class:`Format`), tried in order."""

    def __init__(self, formats: dict[str, Format], from_object: Callable[[object], Forest | None] | None = None):
        self.formats = dict(formats)
        self.from_object = from_object

    @hookimpl
    def silvanforge_formats(self):
        return list(self.formats)

    @hookimpl
    def silvanforge_detect_format(self, path, head):
        return next((name for name, f in self.formats.items() if f.detect(path, head)), None)

    @hookimpl
    def silvanforge_import_model(self, path, fmt):
        f = self.formats.get(fmt)
        return None if f is None else f.load(path)

    @hookimpl
    def silvanforge_import_object(self, obj):
        if isinstance(obj, (bytes, bytearray, memoryview)):  # answered only for our formats
            data = bytes(obj)
            name = self.silvanforge_detect_format(BYTES_NAME, data[:4096])
            return None if name is None else self.formats[name].loads(data, BYTES_NAME)
        return None if self.from_object is None else self.from_object(obj)
