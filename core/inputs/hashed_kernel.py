"""The target's kernel of computed columns (CatBoost's CTRs and one-hot tests), as
:mod:`silvanforge.inputs.hashed_rows` calls it: which installed target's kernel
(:meth:`silvanforge.target.Target.hashed_columns_kernel`), its machine code saved in a compiled
model's artifact and mapped again by a trusted load (:func:`kernel_artifact`,
:func:`load_kernel`), else compiled (0.3 s) by the model's compile beside its forms
(``silvanforge.api``), so a process's first categorical call does not pay it (its function for
rows of float32; rows given as a float64 array compile theirs at their first call), and a
model's combinations as the flat arrays it reads (:func:`native_arrays`: each chain's keys in a
cuckoo table, each column's answers)."""

from __future__ import annotations

import numpy as np

from silvanforge.inputs.host_kernels import first_kernel

# What a call sets in the kernel's args block, its first entries (Target.hashed_columns_kernel).
CALL_ARGS = ("rows", "row_stride", "column_stride", "floats", "float_stride", "codes", "code_stride",
             "distinct", "distinct_at", "distinct_count", "dense_at", "dense")
(ROWS, ROW_STRIDE, COLUMN_STRIDE, FLOATS, FLOAT_STRIDE, CODES, CODE_STRIDE, DISTINCT, DISTINCT_AT,
 DISTINCT_COUNT, DENSE_AT, DENSE) = range(len(CALL_ARGS))


def find_kernel(saved: bytes = b""):
    """The kernel of computed columns of an installed target (they all run on the host;
    the CPU target's first), or None; ``saved``: :func:`kernel_artifact`'s bytes, which the
    target it names may map instead of compiling."""
    return _found_kernel(saved)[0]


def _found_kernel(saved: bytes = b"") -> tuple:
    """(:func:`find_kernel`'s kernel, the name of its target), or (None, None)."""
    named, _, code = saved.partition(b"\0")

    def make(target, name):
        kernel = target.hashed_columns_kernel(code) if code and named == name.encode() else \
            target.hashed_columns_kernel()
        return kernel if kernel is not None and tuple(kernel.arg_layout[:len(CALL_ARGS)]) == CALL_ARGS else None
    return first_kernel(make)


def kernel_artifact() -> bytes:
    """The machine code of the process's kernel of computed columns (compiled now where it is
    not yet), tagged with its target's name, for a compiled model's artifact (its code, like its
    forms', mapped by a trusted load on the same host: :func:`load_kernel`); b"" where no target
    has one that saves its code."""
    kernel, name = _found_kernel()
    save = getattr(kernel, "artifact", None)
    blob = save() if save is not None else b""
    return name.encode() + b"\0" + blob if blob else b""


def load_kernel(saved: bytes) -> None:
    """Make the process's kernel of computed columns from an artifact's :func:`kernel_artifact`
    where none is made yet (the target maps its code in milliseconds where it was made on a
    host like this one, else compiles it)."""
    if saved:
        find_kernel(bytes(saved))


def _slots(keys: np.ndarray, shift: int, fold: int, multiplier: int) -> np.ndarray:
    """Each key's slot by one of the kernel's hashes (``kernel.ways``) in a table of
    ``2 ** (64 - shift)``."""
    with np.errstate(over="ignore"):
        return ((keys ^ (keys >> np.uint64(fold))) * np.uint64(multiplier)) >> np.uint64(shift)


def _table(keys: np.ndarray, ways: tuple) -> tuple[np.ndarray, np.ndarray, int]:
    """``keys`` (sorted, distinct) in a cuckoo table of at least twice their number, each in one
    of its two slots (doubled until they all fit): (the slots' keys, an empty slot's none of
    ``keys``; their answer index: the key's rank, an empty slot's the unknown index
    ``len(keys)``; and the hashes' shift)."""
    known = set(keys.tolist())
    empty = next(k for k in range(len(keys) + 1) if k not in known)  # an empty slot's key: none of them
    bits = max(1, int(2 * len(keys) - 1).bit_length())
    while True:
        size, shift = 1 << bits, 64 - bits
        homes = [_slots(keys, shift, *w).tolist() for w in ways]
        slot_rank = [-1] * size
        fits = True
        for rank in range(len(keys)):
            moving, way = rank, 0
            for _ in range(4 * bits + 8):  # kicks: an old key moves to its other slot
                at = homes[way][moving]
                moving, slot_rank[at] = slot_rank[at], moving
                if moving < 0:
                    break
                way = 1 if homes[0][moving] == at else 0
            else:
                fits = False
                break
        if fits:
            ranks = np.asarray(slot_rank, dtype=np.int64)
            skey = np.where(ranks >= 0, keys[np.maximum(ranks, 0)] if len(keys) else 0, np.uint64(empty))
            sanswer = np.where(ranks >= 0, ranks, len(keys)).astype(np.int32)
            return skey.astype(np.uint64), sanswer, shift
        bits += 1


def native_arrays(reading, kernel) -> tuple:
    """The args block of ``kernel`` for ``reading``'s model (a
    :class:`silvanforge.inputs.hashed_rows.HashedInputs`; rows and hashes left 0) and the
    arrays it points to (kept alive with it): elements by chain, each chain's keys in an
    open-addressing table of twice their number or more (linear probing; a slot's answer
    index is the key's rank among the chain's sorted keys), and the columns' answers."""
    elements = reading._elements
    kinds = kernel.kinds
    flat = [e for chain in elements for e in chain]
    starts = np.cumsum([0] + [len(c) for c in elements]).astype(np.int64)

    def signed(v):
        v = int(v) & 0xFFFFFFFF
        return v - (1 << 32) if v >= 1 << 31 else v

    arrays = {
        "chains": len(elements),
        "chain_elements": starts,
        "element_kind": np.asarray([kinds[e[0]] for e in flat], dtype=np.int8),
        "element_column": np.asarray([int(e[1]) for e in flat], dtype=np.int32),
        "element_border": np.asarray([e[2] if e[0] == "float" else 0.0 for e in flat], dtype=np.float32),
        "element_nan_true": np.asarray([bool(e[3]) if e[0] == "float" else False for e in flat], dtype=np.int8),
        "element_hash": np.asarray([signed(e[2]) if e[0] == "onehot" else 0 for e in flat], dtype=np.int64),
    }
    table_at, shifts, slot_keys, slot_answers, at = [], [], [], [], 0
    for keys in reading.chain_keys:
        skey, sanswer, shift = _table(keys, kernel.ways)
        table_at.append(at)
        shifts.append(shift)
        slot_keys.append(skey)
        slot_answers.append(sanswer)
        at += len(skey)
    # chains a table of a call's values may read (its digits fit the kernel's)
    arrays["dense_ok"] = np.asarray([0 < len(chain) <= kernel.max_elements for chain in elements], dtype=bool)
    order = np.argsort(reading.chain_of, kind="stable")  # columns by chain
    arrays.update({
        "chain_table": np.asarray(table_at, dtype=np.int64),
        "chain_shift": np.asarray(shifts, dtype=np.int64),
        "chain_unknown": np.asarray([len(k) for k in reading.chain_keys], dtype=np.int64),
        "slot_key": np.concatenate(slot_keys).view(np.int64),
        "slot_answer": np.concatenate(slot_answers),
        "chain_columns": np.searchsorted(reading.chain_of[order], np.arange(len(elements) + 1)).astype(np.int64),
        "column_out": (reading.width + order).astype(np.int64),
        "column_answers": reading.offsets[order].astype(np.int64),
        "answers": reading.table,
        "answers_f32": reading.table.astype(np.float32),
    })
    block = np.zeros(len(kernel.arg_layout), dtype=np.int64)
    for k, name in enumerate(kernel.arg_layout):
        value = arrays.get(name)
        if isinstance(value, np.ndarray):
            block[k] = value.ctypes.data if value.size else 0
        elif value is not None:
            block[k] = value
    return block, arrays
