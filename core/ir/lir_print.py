"""The LIR printer (``forge show --level lir``; the code cache keys on this text too)."""

from __future__ import annotations

from typing import Iterable

from silvanforge.ir.lir_nodes import (SCALAR_PARAMS, Assign, AtomicAdd, Barrier, For, If, Module, Prefetch, Store, While)


def format_module(module: Module) -> str:
    lines = [f"; LIR module: {module.info.get('summary', '')}".rstrip()]
    for buf in module.buffers.values():
        size = "" if buf.data is None else f"[{buf.data.size}]"
        if buf.kind == "scratch":
            rows = f"(rows + {buf.pad_rows})" if buf.pad_rows else "rows"
            size = f"[{rows} x {buf.per_row}]" + ("" if buf.fill is None else f" = {buf.fill}")
        if buf.kind == "shared":
            size = f"[{buf.size}] per block"
        if buf.kind == "local":
            size = f"[{buf.size}] per call"
        lines.append(f"buffer {buf.kind} {buf.name}: {buf.type}{size}")
    params = ", ".join(f"%{p.name}: {p.type}" for p in SCALAR_PARAMS)
    for fn in module.functions:
        split = f"loop x{fn.trip}" if fn.parallel == "loop" else ("rows" if fn.row_parallel else "none")
        if fn.launch is not None:
            split = f"gpu {fn.launch}"
        lines.append(f"func @{fn.name}({params}) <parallel: {split}> {{")
        for name, t in fn.locals.items():
            lines.append(f"  local %{name}: {t}")
        _format_block(fn.body, "  ", lines)
        lines.append("}")
    return "\n".join(lines)


def _format_block(stmts: Iterable, pad: str, out: list) -> None:
    for s in stmts:
        if isinstance(s, Assign):
            out.append(f"{pad}%{s.var.name} = {s.value}")
        elif isinstance(s, Store):
            out.append(f"{pad}{s.buffer}[{s.index}] = {s.value}")
        elif isinstance(s, AtomicAdd):
            out.append(f"{pad}atomic {s.buffer}[{s.index}] += {s.value}")
        elif isinstance(s, For):
            kw = "par.for" if s.parallel else "for"
            extra = f" unroll({s.unroll})" if s.unroll > 1 else ""
            out.append(f"{pad}{kw} %{s.var.name} = {s.start} to {s.stop} step {s.step}{extra} {{")
            _format_block(s.body, pad + "  ", out)
            out.append(f"{pad}}}")
        elif isinstance(s, While):
            out.append(f"{pad}while {s.cond} {{")
            _format_block(s.body, pad + "  ", out)
            out.append(f"{pad}}}")
        elif isinstance(s, Prefetch):
            out.append(f"{pad}prefetch {s.buffer}[{s.index}]")
        elif isinstance(s, Barrier):
            out.append(f"{pad}barrier")
        elif isinstance(s, If):
            out.append(f"{pad}if {s.cond} {{")
            _format_block(s.then, pad + "  ", out)
            if s.orelse:
                out.append(f"{pad}}} else {{")
                _format_block(s.orelse, pad + "  ", out)
            out.append(f"{pad}}}")
