"""Reading a model file of any supported format into a HIR Forest."""

from __future__ import annotations

import os

from .errors import IRVerificationError, ModelFormatError
from .ir import hir
from .plugins import registry


def load_model(path: str | os.PathLike, fmt: str | None = None) -> hir.Forest:
    """Import the model at ``path``; the format is recognised from the content unless ``fmt`` is given."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ModelFormatError(f"model file not found: {path}")
    reg = registry()
    if fmt is None:
        with open(path, "rb") as f:
            head = f.read(4096)
        if not head:
            raise ModelFormatError(f"{path}: the file is empty")
        fmt = reg.hook.silvanforge_detect_format(path=path, head=head)
        if fmt is None:
            raise ModelFormatError(
                f"{path}: not a model format any installed importer recognises "
                f"(known formats: {', '.join(reg.formats()) or 'none'})"
            )
    elif fmt not in reg.formats():
        raise ModelFormatError(f"unknown model format {fmt!r}; known: {', '.join(reg.formats())}")
    forest = reg.hook.silvanforge_import_model(path=path, fmt=fmt)
    if forest is None:
        raise ModelFormatError(f"{path}: no importer accepted format {fmt!r}")
    try:
        hir.verify(forest)
    except IRVerificationError as exc:
        # The importer accepted something structurally impossible: the file is inconsistent.
        raise ModelFormatError(f"{path}: the model describes an invalid forest ({exc})") from exc
    return forest
