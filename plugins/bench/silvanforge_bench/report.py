"""``forge bench``'s report: the machine it ran on, the table of measurements, and its
markdown file (docs/benchmarks.md's tables are written this way)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import shutil
import subprocess
import sys

from silvanforge.errors import InputError

# Our engine's name in the table (the other rows are the peers').
OURS = "silvanforge"
OURS_KERNEL = "silvanforge (kernel)"  # GPU targets: the kernels alone, without copies


@dataclasses.dataclass
class Measurement:
    """One engine at one batch size and thread count."""

    engine: str
    batch_size: int
    seconds: float  # best wall time of one predict call on ``batch_size`` rows
    max_abs_diff: float | None = None  # vs SilvanForge over all bench rows; None for ours
    agrees: bool | None = None
    threads: int = 1

    @property
    def rows_per_second(self) -> float:
        return self.batch_size / self.seconds if self.seconds > 0 else float("inf")


@dataclasses.dataclass
class Build:
    """Building one engine: not part of any timing."""

    engine: str
    what: str  # "compile", "gcc -O3 shared library", ...
    seconds: float | None  # None: not measured (found in the cache)
    cached: bool = False
    first_build_seconds: float | None = None  # when cached: what building it took, if recorded


@dataclasses.dataclass
class BenchReport:
    model: str
    model_format: str
    trees: int
    max_depth: int
    features: int
    outputs: int
    target: str
    rep: str
    schedule: str
    threads: list[int]
    repeat: int
    min_time: float
    batch_sizes: list[int]
    measurements: list[Measurement] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    builds: list[Build] = dataclasses.field(default_factory=list)
    tile_size: int = 1
    cpu: str | None = None  # the named CPU ours was compiled for (None: this host's)
    # batch size -> the form of ours answering it (representation, padding, schedule): a plan
    # answers each request size with its own, so the first compile's alone does not say
    forms: dict[int, str] = dataclasses.field(default_factory=dict)

    def engines(self) -> list[str]:
        seen: list[str] = []
        for m in self.measurements:
            if m.engine not in seen:
                seen.append(m.engine)
        return seen

    def at(self, batch_size: int, threads: int | None = None) -> list[Measurement]:
        """Measurements at ``batch_size`` (and ``threads``; default: the first thread count)."""
        threads = self.threads[0] if threads is None else threads
        return [m for m in self.measurements if m.batch_size == batch_size and m.threads == threads]

    def speedup(self, batch_size: int, threads: int | None = None) -> tuple[float, str] | None:
        """(our rows/s / the fastest peer's rows/s, that peer) at ``batch_size`` and ``threads``;
        >1: we are faster."""
        rows = self.at(batch_size, threads)
        ours = [m for m in rows if m.engine == OURS]
        peers = [m for m in rows if m.engine not in (OURS, OURS_KERNEL)]
        if not ours or not peers:
            return None
        best = max(peers, key=lambda m: m.rows_per_second)
        return ours[0].rows_per_second / best.rows_per_second, best.engine


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def _lscpu() -> dict[str, str]:
    exe = shutil.which("lscpu")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe], check=False, capture_output=True, text=True, timeout=10,
                             env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    info = {}
    for line in out.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def machine_details() -> dict[str, str]:
    """The machine, for reports: CPU model, cores, usable CPUs, memory, OS, Python."""
    cpus = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    cpu = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    lscpu = _lscpu()
    cpu = cpu or lscpu.get("Model name") or platform.processor() or platform.machine()
    cores = f"{cpus} logical CPUs, {usable} usable"
    try:
        per_socket = int(lscpu["Core(s) per socket"]) * int(lscpu.get("Socket(s)", "1"))
        cores = f"{per_socket} cores / {cpus} logical CPUs, {usable} usable by this process"
    except (KeyError, ValueError):
        pass
    details = {"cpu": cpu, "cores": cores}
    flags = lscpu.get("Flags", "")
    simd = [f for f in ("avx512f", "avx2", "neon", "asimd") if f" {f}" in f" {flags}"]
    if simd:
        details["simd"] = simd[0]
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            kib = int(line.split()[1])
            details["memory"] = f"{kib / 2**20:.0f} GiB"
            break
    details["os"] = platform.platform()
    details["python"] = f"{platform.python_implementation()} {platform.python_version()}"
    return details


def machine_description() -> str:
    d = machine_details()
    cores = d["cores"]
    parts = [d["os"], d["cpu"], cores.replace(" usable by this process", " usable"),
             f"{d['python'].split()[-1] and 'Python ' + d['python'].split()[-1]}"]
    if "memory" in d:
        parts.insert(3, f"{d['memory']} RAM")
    return "; ".join(parts)


HEADERS = ["threads", "batch", "engine", "time/batch", "rows/s", "max abs diff vs ours", "agrees",
           "ours / fastest peer"]
NUMERIC = ("threads", "batch", "time/batch", "rows/s")


def table_rows(report: BenchReport) -> list[list[str]]:
    """The table as strings, one row per (threads, batch, engine); columns as in :data:`HEADERS`."""
    rows = []
    for t in report.threads:
        for b in report.batch_sizes:
            speed = report.speedup(b, t)
            for m in report.at(b, t):
                ratio = ""
                if m.engine == OURS and speed is not None:
                    ratio = f"{speed[0]:.2f}x vs {speed[1]}"
                rows.append([
                    str(t), str(b), m.engine, _fmt_time(m.seconds), f"{m.rows_per_second:,.0f}",
                    "" if m.max_abs_diff is None else f"{m.max_abs_diff:.3g}",
                    "" if m.agrees is None else ("yes" if m.agrees else "NO"),
                    ratio,
                ])
    return rows


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def describe(report: BenchReport) -> str:
    threads = ", ".join(map(str, report.threads))
    plural = "s" if len(report.threads) > 1 or report.threads[0] != 1 else ""
    return (f"{report.model} ({report.model_format}): {report.trees} trees, max depth "
            f"{report.max_depth}, {report.features} features, {report.outputs} "
            f"output{'s' if report.outputs != 1 else ''}; "
            f"target {report.target}{f' (code for cpu {report.cpu})' if report.cpu else ''}, "
            f"{_forms_text(report)}{f', tile size {report.tile_size}' if report.tile_size > 1 else ''}; "
            f"{threads} thread{plural}, best of {report.repeat}")


def _forms_text(report: BenchReport) -> str:
    """The representation and schedule timed: one where every batch size ran the same form, else
    each batch size's."""
    if len(set(report.forms.values())) <= 1:
        return f"rep {report.rep}, schedule {report.schedule}"
    return "by batch size: " + "; ".join(f"{b} rows {text}" for b, text in sorted(report.forms.items()))


def describe_builds(report: BenchReport) -> str:
    """Build times, which no rows/s includes."""
    parts = []
    for b in report.builds:
        if b.cached:
            took = "cached" + (f", loaded in {b.seconds:.2f} s" if b.seconds is not None else "")
            if b.first_build_seconds is not None:
                took += f" (built in {b.first_build_seconds:.2f} s)"
        else:
            took = f"{b.seconds:.2f} s" if b.seconds is not None else "?"
        parts.append(f"{b.engine} {b.what}: {took}")
    return "; ".join(parts)


def to_markdown(report: BenchReport, command: str | None = None, level: int = 1) -> str:
    """The report as a markdown section whose heading has ``level`` #s (2 to append to a page)."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"forge bench: {os.path.basename(report.model)} ({report.model_format})"
    lines = [f"{'#' * max(1, level)} {title}", ""]
    if command:
        lines += ["Command:", "", "```", command, "```", ""]
    m = machine_details()
    machine = f"{m['cpu']}; {m['cores']}"
    machine += "".join(f"; {m[k]}" + (" RAM" if k == "memory" else "")
                       for k in ("simd", "memory") if k in m)
    machine += f"; {m['os']}; {m['python']}"
    lines += [f"- Date: {when}",
              f"- Model: {describe(report)}",
              f"- Machine: {machine}",
              "- Versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items())]
    if report.builds:
        lines.append(f"- Build times (not in rows/s): {describe_builds(report)}")
    lines += [(f"- Each time is the best of {report.repeat} runs of at least {report.min_time} s "
               "each, after a warm-up; each run cycles through the same (up to 16) batches of random rows "
               "for every engine."), ""]
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "|".join("---:" if h in NUMERIC else "---" for h in HEADERS) + "|")
    for row in table_rows(report):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    if report.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def check_markdown_target(path: str, append: bool = False, overwrite: bool = False) -> None:
    """Refuse, before any timing, a markdown file that cannot or should not be written."""
    if append and overwrite:
        raise InputError("--append and --overwrite exclude each other")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputError(f"cannot write {path}: its directory does not exist")
    if os.path.isdir(path):
        raise InputError(f"cannot write {path}: it is a directory")
    if os.path.exists(path) and not (append or overwrite):
        raise InputError(f"{path} exists: pass --append to add this run as a new section, or "
                         "--overwrite to replace the file")


def write_markdown(path: str, report: BenchReport, command: str | None = None,
                   append: bool = False, overwrite: bool = False) -> str:
    """Write the report to ``path``: a new file, a section appended to an existing one
    (``append``), or a replacement (``overwrite``).  Returns what was done ("wrote"/"appended")."""
    check_markdown_target(path, append, overwrite)
    existing = _read(path) if append and os.path.exists(path) else None
    try:
        if existing is not None:
            sep = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
            with open(path, "a", encoding="utf-8") as f:
                f.write(sep + to_markdown(report, command, level=2))
            return "appended to"
        with open(path, "w", encoding="utf-8") as f:
            f.write(to_markdown(report, command, level=2 if append else 1))
        return "wrote"
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def command_line(argv: list[str] | None = None) -> str:
    import shlex

    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(a) for a in ["forge", *argv[1:]])
