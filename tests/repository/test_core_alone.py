"""Core's tests run without the CPU target and the first-party representations, so the
core's plugin API is proved enough for a plugin the core has never seen.

The tests of ``tests/core`` marked ``core_alone`` (tests/conftest.py: a module says
``pytestmark = pytest.mark.core_alone``) run in a child process whose ``sitecustomize`` puts a
finder first on ``sys.meta_path`` that refuses every target (``silvanforge_target_*``), the GPU
backend (``silvanforge_gpu``) and every ``silvanforge_rep_*`` package but the out-of-tree example
``silvanforge_rep_linked``: their entry points then fail to load, and the plugin manager records
them as broken and leaves them out (silvanforge.plugins), as if they were not installed.  The
child collects all of ``tests/core``, so every module there must at least import without the
shipped plugins (a test that needs one imports it inside, or skips the module without it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from support_common import REPOSITORY as ROOT

BLOCKER = textwrap.dedent('''
    import sys


    class _CoreAlone:
        """Refuses the shipped targets and representations (tests/repository/test_core_alone.py)."""

        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top.startswith(("silvanforge_target_", "silvanforge_gpu")) or (
                    top.startswith("silvanforge_rep_") and top != "silvanforge_rep_linked"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked: core alone)", name=name)
            return None


    sys.meta_path.insert(0, _CoreAlone())
''')


def _run(tmp_path, *command):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_blocked_plugins_are_not_there(tmp_path):
    code = ("from silvanforge.plugins import registry\nr = registry()\n"
            "print(sorted(r.targets()))\nprint(sorted(r.representations()))\n"
            "print(sorted(x.name for x in r.records if x.error))")
    out = _run(tmp_path, sys.executable, "-c", code)
    assert out.returncode == 0, out.stderr
    targets, reps, broken = out.stdout.splitlines()
    assert targets == "[]" and set(eval(reps)) <= {"linked"}
    assert {"cpu", "bitvector", "sparse"} <= set(eval(broken))
    listing = _run(tmp_path, sys.executable, "-m", "silvanforge.cli", "plugins")
    assert re.search(r" cpu .*silvanforge-target-cpu .*broken: ModuleNotFoundError", listing.stdout), listing.stdout + listing.stderr


def test_core_tests_pass_without_the_cpu_target(tmp_path):
    out = _run(tmp_path, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "core_alone",
               "tests/core")
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 0, summary
    # the rest of tests/core is left out by its marker, not run and failed
    assert re.search(r"\d+ deselected", summary), summary


def test_without_a_cpu_target_a_compile_says_what_to_install(tmp_path):
    """The host's target is found among the installed ones, not named by the core: with none,
    a compile that names no target says so (and the CLI prints it as one error line)."""
    code = ("import silvanforge as sf\nfrom silvanforge.testing import random_forest\n"
            "try:\n    sf.compile(random_forest(1))\nexcept sf.PluginError as exc:\n    print(exc)\n")
    out = _run(tmp_path, sys.executable, "-c", code)
    assert out.returncode == 0, out.stderr
    assert "no target plugin for this machine's CPU is installed" in out.stdout, out.stdout
    cli = _run(tmp_path, sys.executable, "-m", "silvanforge.cli", "compile", "examples/model.json")
    assert cli.returncode != 0 and "Traceback" not in cli.stderr
    assert "error: no target plugin for this machine's CPU" in cli.stderr, cli.stderr


def _plugin_names() -> set[str]:
    from importlib import metadata

    names = set()
    for group in ("silvanforge.representations", "silvanforge.targets"):
        for ep in metadata.entry_points(group=group):
            names |= {ep.name, ep.value.partition(":")[0].partition(".")[0]}
            if ep.dist is not None:
                names.add(ep.dist.metadata["Name"])
    return names


def test_core_names_no_representation_or_target_plugin():
    """Nothing in core names a concrete representation or target: not as a quoted name, not by
    its module or distribution.  ``cpu`` and ``gpu`` are also the core's two target kinds (the
    machine a target runs on), so only those two words may appear quoted."""
    names = _plugin_names() | {"silvanforge_gpu", "silvanforge-gpu"}
    assert {"sparse", "bitvector", "cuda", "silvanforge_target_cpu", "silvanforge-rep-reorg"} <= names
    found = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in names - {"cpu", "gpu"}:
            if "_" in name or "-" in name:  # a module or distribution name, anywhere
                pattern = rf"(?<![\w-]){re.escape(name)}(?![\w-])"
            else:  # a plugin's short name, as a name: quoted or in ``literal`` markup
                pattern = rf"[\"'`]{re.escape(name)}[\"'`]"
            found += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                      for m in re.finditer(pattern, text, flags=re.IGNORECASE)]
    assert found == [], "\n".join(found)
