"""Typed reads of a parsed CatBoost JSON document: every value checked before it is used, so a
malformed or edited file is a :class:`ModelFormatError` naming the field, never a traceback."""

from __future__ import annotations

import math

from silvanforge.errors import ModelFormatError


class Reader:
    """Reads fields of one document; ``name`` is what messages call it (a path, "the model bytes")."""

    def __init__(self, name: str):
        self.name = name

    def fail(self, msg: str):
        raise ModelFormatError(f"{self.name}: not a valid CatBoost JSON model: {msg}")

    def obj(self, doc, key: str, where: str, default=None, required=True) -> dict:
        v = doc.get(key, default) if isinstance(doc, dict) else None
        if v is None and not required:
            return {}
        if not isinstance(v, dict):
            self.fail(f"{where}.{key} must be an object")
        return v

    def lst(self, doc, key: str, where: str, required=True) -> list:
        v = doc.get(key) if isinstance(doc, dict) else None
        if v is None and not required:
            return []
        if not isinstance(v, list):
            self.fail(f"{where}.{key} must be a list")
        return v

    def int(self, doc, key: str, where: str, lo: int = 0, hi: int = 2**31 - 1) -> int:
        v = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            self.fail(f"{where}.{key} must be an integer in [{lo}, {hi}], got {v!r}")
        return v

    def num(self, v, where: str, finite: bool = True) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(f"{where} must be a number, got {v!r}")
        v = float(v)
        if finite and not math.isfinite(v):
            self.fail(f"{where} must be finite, got {v!r}")
        return v

    def str(self, doc, key: str, where: str, default=None) -> str:
        v = doc.get(key, default) if isinstance(doc, dict) else default
        if not isinstance(v, str):
            self.fail(f"{where}.{key} must be a string, got {v!r}")
        return v
