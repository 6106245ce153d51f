"""What an importer plugin's hooks do, written once: recognise a file or bytes by content, read
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
from collections.abc import Callable

import os

from silvanforge import hookimpl
from silvanforge.errors import ModelFormatError
from silvanforge.ir.hir import Forest

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
