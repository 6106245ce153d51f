"""The runnable part of an LIR module as JSON and arrays, for artifacts: what a target needs to
map saved machine code and call it (the functions' names and how they split over threads, every
buffer's kind and type, the model buffers' data), without the instructions, which the machine
code already is.  A module read back has functions with empty bodies: it can run saved code,
not be printed or compiled (``CompiledForest`` lowers the model again when asked for those)."""

from __future__ import annotations

import json

import numpy as np

from silvanforge.ir.lir import LIR_TO_NUMPY, Buffer, Function, Module

_BUFFER_FIELDS = ("name", "type", "kind", "per_row", "fill", "pad_rows", "size")


def to_parts(module: Module) -> tuple[bytes, dict[str, np.ndarray]]:
    """(JSON of the module's shape, the model buffers' arrays by buffer name)."""
    spec = {
        "functions": [{"name": f.name, "parallel": f.parallel, "row_parallel": f.row_parallel,
                       "trip": int(f.trip)} for f in module.functions],
        "buffers": [{k: getattr(b, k) for k in _BUFFER_FIELDS} for b in module.buffers.values()],
        "num_features": module.num_features, "num_outputs": module.num_outputs,
        "input_type": module.input_type, "output_type": module.output_type,
        "info": {k: v for k, v in module.info.items() if _plain(v)},
    }
    arrays = {b.name: np.ascontiguousarray(b.data) for b in module.model_buffers()}
    return json.dumps(spec).encode(), arrays


def _plain(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def from_parts(raw: bytes, arrays: dict[str, np.ndarray]) -> Module:
    """The module :func:`to_parts` described; a ValueError (or KeyError, TypeError) if the parts
    do not fit together."""
    spec = json.loads(raw.decode("utf-8"))
    functions = [Function(name=str(f["name"]), body=[], parallel=str(f["parallel"]),
                          row_parallel=bool(f["row_parallel"]), trip=int(f["trip"]))
                 for f in spec["functions"]]
    buffers = {}
    for b in spec["buffers"]:
        fields = {k: b[k] for k in _BUFFER_FIELDS}
        if fields["kind"] == "model":
            data = arrays[fields["name"]]
            if data.ndim != 1 or data.dtype != np.dtype(LIR_TO_NUMPY[fields["type"]]):
                raise ValueError(f"model buffer {fields['name']} is not a vector of {fields['type']}")
            fields["data"] = data
        buffers[fields["name"]] = Buffer(**fields)
    if set(arrays) - set(buffers):
        raise ValueError(f"arrays {sorted(set(arrays) - set(buffers))} belong to no buffer")
    return Module(functions=functions, buffers=buffers, num_features=int(spec["num_features"]),
                  num_outputs=int(spec["num_outputs"]), input_type=str(spec["input_type"]),
                  output_type=str(spec["output_type"]), info=dict(spec["info"]))
