"""GPU lowering properties that need no GPU: with trees spread over a block's threads, no thread
writes a row's margins inside its tree loop (the threads of one row would race); every leaf goes to
the thread's own partial-sum slot, and the fold after the barrier writes the margins.

PoCL runs a work-group's items one after another, so such a race gives right answers there; it
showed up only on an H100, with interleaved walks, which then ignored the slots."""

from __future__ import annotations

import pytest

import silvanforge as sf
from silvanforge.ir import lir
from silvanforge_gpu.template import TemplateParams, gpu_template
from support_gpu import gpu_models


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return gpu_models(tmp_path_factory.mktemp("gpu_lowering"))


def _loops_over(stmts, names):
    """How many loops over one of ``names`` the statements hold."""
    count = 0
    for s in stmts:
        if isinstance(s, lir.For):
            count += (s.var.name in names) + _loops_over(s.body, names)
        elif isinstance(s, lir.While):
            count += _loops_over(s.body, names)
        elif isinstance(s, lir.If):
            count += _loops_over(s.then + s.orelse, names)
    return count


def _margin_writes_in_tree_loops(stmts, tree_vars, inside=False):
    """Stores to ``margins`` made inside a loop over one of ``tree_vars``."""
    found = []
    for s in stmts:
        if isinstance(s, lir.Store) and s.buffer == "margins" and inside:
            found.append(s)
        elif isinstance(s, lir.For):
            found += _margin_writes_in_tree_loops(s.body, tree_vars, inside or s.var.name in tree_vars)
        elif isinstance(s, lir.While):
            found += _margin_writes_in_tree_loops(s.body, tree_vars, inside)
        elif isinstance(s, lir.If):
            found += _margin_writes_in_tree_loops(s.then + s.orelse, tree_vars, inside)
    return found


@pytest.mark.parametrize("rep", ["array", "sparse", "reorg"])
@pytest.mark.parametrize("interleave", [1, 2, 4])
@pytest.mark.parametrize("shared", [True, False])
def test_tree_threads_write_only_their_partial_slots(models, rep, interleave, shared):
    for name, (path, _) in models.items():
        forest = sf.load_model(path)
        schedule = gpu_template(forest, TemplateParams(rows_per_block=8, tree_threads=5, shared_reduce=shared,
                                                       rows_per_thread=4, interleave=interleave))
        low = sf.lower(forest, target="cuda", rep=rep, schedule=schedule)
        for fn in low.lir.functions:
            assert _margin_writes_in_tree_loops(fn.body, {"t1"}) == [], (name, fn.name)
        # The check would pass vacuously if the schedule's tree loop were named otherwise.
        assert sum(_loops_over(fn.body, {"t1"}) for fn in low.lir.functions), name
