"""Compiled kernels run as AArch64 code under qemu-user: the cpu target's LIR compiled for
AArch64 (``silvanforge_target_cpu.cross``), linked into a small static driver with the AArch64
cross compiler, and each phase call of the core's runtime (``run_phases``) run by
``qemu-aarch64``: rows, margins, model and scratch buffers go to the driver in a file and come
back the same way.  Correctness only: one process a phase call, timings mean nothing.

Needs ``qemu-aarch64-static`` (or ``qemu-aarch64``) and ``aarch64-linux-gnu-gcc`` (Debian:
``apt-get install qemu-user-static gcc-aarch64-linux-gnu``; ``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from silvanforge.runtime.kernel import PhaseKernel
from silvanforge.runtime.threads import run_phases

QEMU = shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
GCC = shutil.which("aarch64-linux-gnu-gcc")


def missing() -> str | None:
    """What this machine lacks to run AArch64 kernels, or None."""
    absent = [name for name, path in (("qemu-aarch64-static", QEMU), ("aarch64-linux-gnu-gcc", GCC)) if not path]
    return ", ".join(absent) + " not installed" if absent else None


_DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*phase_fn)(void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, void *, void *);
%(declarations)s
static phase_fn PHASES[] = {%(table)s};

/* n bytes from f into a 64-byte aligned, zero-padded block (the kernels read a word past a
   narrow element's end, as the native kernels' padded buffers allow) */
static void *slurp(FILE *f, int64_t n) {
    void *p = aligned_alloc(64, (size_t)((n + 127) / 64 * 64));
    memset(p, 0, (size_t)((n + 127) / 64 * 64));
    if (n && fread(p, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "short input\n"); exit(2); }
    return p;
}

int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    int64_t h[9], rows_n, out_n;
    if (!f || fread(h, 8, 9, f) != 9) { fprintf(stderr, "bad input\n"); return 2; }
    if (fread(&rows_n, 8, 1, f) != 1) return 2;
    void *rows = slurp(f, rows_n);
    if (fread(&out_n, 8, 1, f) != 1) return 2;
    void *out = slurp(f, out_n);
    int64_t nb = h[8];
    void **table = malloc(sizeof(void *) * (size_t)(nb + 1));
    int64_t *sizes = malloc(sizeof(int64_t) * (size_t)(nb + 1));
    for (int64_t i = 0; i < nb; ++i) {
        if (fread(&sizes[i], 8, 1, f) != 1) return 2;
        table[i] = slurp(f, sizes[i]);
    }
    fclose(f);
    PHASES[h[0]](rows, h[1], h[2], h[3], h[4], h[5], h[6], h[7], out, table);
    FILE *g = fopen(argv[2], "wb");
    fwrite(out, 1, (size_t)out_n, g);
    for (int64_t i = 0; i < nb; ++i) fwrite(table[i], 1, (size_t)sizes[i], g);
    fclose(g);
    return 0;
}
"""


class Aarch64Kernel(PhaseKernel):
    """The phases of a native cpu kernel's LIR module, compiled for AArch64 and run under qemu."""

    def __init__(self, native, cpu: str = "generic-aarch64"):
        """``native``: a kernel of the cpu target; its own object code where it is AArch64 code
        already (compiled with an AArch64 ``cpu=``: a ``ForeignKernel``), else its module
        compiled for AArch64 ``cpu`` here."""
        from silvanforge_target_cpu import cross

        self.module = native.module
        self.phases, self.scratch = native.phases, native.scratch
        self.input_dtype, self.output_dtype = native.input_dtype, native.output_dtype
        self._model = [np.ascontiguousarray(b.data) for b in self.module.model_buffers()]
        self._dir = Path(tempfile.mkdtemp(prefix="silvanforge-aarch64-"))
        code = getattr(native, "object_code", None) or cross.object_code(self.module, cpu=cpu)
        (self._dir / "kernel.o").write_bytes(code)
        names = [fn.name for fn in self.module.functions]
        source = _DRIVER % {
            "declarations": "\n".join(f"extern void {n}(void *, int64_t, int64_t, int64_t, int64_t, int64_t, "
                                      "int64_t, int64_t, void *, void *);" for n in names),
            "table": ", ".join(names)}
        (self._dir / "driver.c").write_text(source)
        subprocess.run([GCC, "-O1", "-static", "-o", str(self._dir / "driver"), str(self._dir / "driver.c"),
                        str(self._dir / "kernel.o"), "-lm"], check=True, capture_output=True, text=True)

    def run(self, phase, rows, out, scratch, row_begin, row_end, iter_begin=0, iter_end=0):
        rows = np.ascontiguousarray(rows)
        item = rows.itemsize
        rs, cs = rows.strides[0] // item, rows.strides[1] // item
        buffers = self._model + [np.ascontiguousarray(s) for s in scratch]
        header = np.array([phase, rs, cs, row_begin, row_end, iter_begin, iter_end, rows.shape[0], len(buffers)],
                          dtype=np.int64)
        parts = [header.tobytes(), np.int64(rows.nbytes).tobytes(), rows.tobytes(),
                 np.int64(out.nbytes).tobytes(), np.ascontiguousarray(out).tobytes()]
        for b in buffers:
            parts += [np.int64(b.nbytes).tobytes(), b.tobytes()]
        src, dst = self._dir / "call.bin", self._dir / "back.bin"
        src.write_bytes(b"".join(parts))
        proc = subprocess.run([QEMU, str(self._dir / "driver"), str(src), str(dst)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the AArch64 driver failed ({proc.returncode}): {proc.stderr[-500:]}")
        back = dst.read_bytes()
        at = out.nbytes
        out[...] = np.frombuffer(back[:at], dtype=out.dtype).reshape(out.shape)
        at += sum(b.nbytes for b in self._model)
        for s in scratch:
            flat = s.reshape(-1)
            flat[...] = np.frombuffer(back[at:at + s.nbytes], dtype=s.dtype)
            at += s.nbytes

    def margins(self, rows, num_outputs, threads=None):
        return run_phases(self, rows, num_outputs, 1)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
