"""LLVM's native target, initialised once per process (the JIT and the native pool both need it)."""

from __future__ import annotations

import threading

import llvmlite.binding as llvm

_lock = threading.Lock()
_initialised = False


def init() -> None:
    global _initialised
    with _lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialised = True
