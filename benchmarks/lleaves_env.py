"""Build the separate environment `forge bench` runs lleaves from.

    python benchmarks/lleaves_env.py [PATH]          # default: ~/.cache/silvanforge/lleaves-venv

lleaves needs llvmlite < 0.44 (it uses the legacy LLVM pass manager that llvmlite 0.44 removed),
while SilvanForge's environment may have a newer llvmlite; so lleaves gets a virtual environment of
its own (`python -m venv` + `pip install lleaves "llvmlite<0.44" numpy`), and `forge bench` runs it
in a subprocess on the same rows.  With the default PATH, `forge bench` finds it by itself; for
another PATH pass `--lleaves-venv PATH` or set SILVANFORGE_LLEAVES_VENV (either also builds the
environment on first use, so this script is only a convenience).  An existing environment is
checked, not rebuilt; `--rebuild` starts afresh.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def main(argv: list[str] | None = None) -> int:
    from silvanforge_bench.bench_peers import PeerUnavailable
    from silvanforge_bench.bench_peers.lleaves_peer import (
        build_venv,
        default_venv,
        probe,
        venv_python,
    )

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", default=None, help="where to build it (default: %(default)s)")
    parser.add_argument("--python", default=None,
                        help="the interpreter to base it on (default: this one's base interpreter)")
    parser.add_argument("--rebuild", action="store_true", help="remove an existing environment first")
    args = parser.parse_args(argv)
    path = os.path.abspath(os.path.expanduser(args.path or default_venv()))

    if args.rebuild and os.path.exists(path):
        shutil.rmtree(path)
    try:
        if os.path.isfile(venv_python(path)):
            info = probe(venv_python(path))
            print(f"{path}: already usable")
        else:
            if os.path.exists(path) and os.listdir(path):
                print(f"error: {path} exists and is not a virtual environment", file=sys.stderr)
                return 1
            os.makedirs(os.path.dirname(path), exist_ok=True)
            build_venv(path, python=args.python, log=print)
            info = probe(venv_python(path))
            print(f"{path}: built")
    except PeerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("  " + ", ".join(f"{k} {v}" for k, v in info.items()))
    if path != os.path.abspath(default_venv()):
        print(f"use it with: forge bench MODEL --lleaves-venv {path}   (or SILVANFORGE_LLEAVES_VENV={path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
