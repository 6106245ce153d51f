"""The levelwise form (plugins/rep_oblivious, ``rep="levelwise"``): trees padded to complete
trees and walked a level at a time for a block of rows, nodes looked up by their path.
Differential: against the reference evaluator bit for bit (margins) on random forests and on
XGBoost and LightGBM models trained here (NaNs, zero-as-missing, several classes, vector
leaves, float64 thresholds, unbalanced trees), and against xgboost's and lightgbm's own predict;
its table lookups give the same program with AVX-512 permutes and with gathers; what it cannot
run is refused with the reason."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import forests, rows_for
from support_common import Draws

import silvanforge as sf
from silvanforge.errors import InputError
from silvanforge.ir import lir
from silvanforge.ir.hir import Aggregation, Forest
from silvanforge.plugins import registry
from silvanforge.rep import refusal_of
from silvanforge.runtime import reference
from silvanforge.testing import random_tree

pytest.importorskip("silvanforge_rep_oblivious")
from silvanforge_rep_oblivious import complete  # noqa: E402

# Sizes through every path: the lean one-row code, partial blocks, whole blocks, several.
BATCHES = (1, 2, 3, 15, 16, 17, 70)


def _exact(cf, forest, X):
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))


def _rows(features: int, n: int, seed: int, nan: float = 0.1, zeros: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features))
    X[rng.random(X.shape) < nan] = np.nan
    X[rng.random(X.shape) < zeros] = 0.0
    return X.astype(np.float32)


def test_random_forests_are_exact_or_refused_with_a_reason():
    """Random forests, every rule: those it takes are exact, the others refused by name.  Most
    forests of every rule are refused (trees not summed, categorical or == splits), so half the
    draws are summed plain forests (one op, no categories), and enough of all the draws must
    compile for the test to have checked something."""
    draws = Draws()

    @settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(forest=st.one_of(forests(max_trees=9, max_depth=7, max_features=20),
                            forests(max_trees=9, max_depth=7, max_features=20, plain=True,
                                    aggregations=(Aggregation.SUM,))),
           seed=st.integers(0, 2**16))
    def check(forest, seed):
        cls = registry().rep_class("levelwise")
        if refusal_of(cls, forest, "cpu") is not None:  # refused: naming with rep= says why
            with pytest.raises(InputError, match="levelwise"):
                sf.compile(forest, rep="levelwise")
            draws.count("refused")
            return
        cf = sf.compile(forest, rep="levelwise")
        assert cf.rep == "levelwise"
        for n in (1, 5, 16, 33):
            _exact(cf, forest, rows_for(forest, np.random.default_rng(seed + n), n))
        draws.count("compiled")

    check()
    draws.assert_share("compiled", 0.2)


@pytest.mark.parametrize("rep", ["levelwise", "oblivious"])
def test_an_output_no_tree_adds_to_is_its_base_score(rep):
    """Two outputs, trees on the first only (a random forest hypothesis found): the second's
    margin is its base score."""
    rng = np.random.default_rng(2)
    trees = [random_tree(rng, 2, (0,), d, [0], False, False) for d in (0, 1, 1)]
    forest = Forest(trees=trees, num_features=2, num_outputs=2, base_score=np.array([-0.13, 0.64]))
    if refusal_of(registry().rep_class(rep), forest, "cpu") is not None:
        pytest.skip(f"{rep} does not take these trees")
    cf = sf.compile(forest, rep=rep)
    for n in (1, 3, 17, 70):
        _exact(cf, forest, rows_for(forest, rng, n))


def test_it_runs_some_random_forests_and_refuses_others_by_rule():
    """Random trees of every op and rule: those it takes are exact (averaged ones too), the
    others are refused for categorical splits, ``==`` splits or a maximum of the trees."""
    refusals, ran = set(), 0
    for seed in range(25):
        rng = np.random.default_rng(seed)
        ops = [[0], [1], [0, 1, 2]][seed % 3]
        trees = [random_tree(rng, 4, (0,), int(rng.integers(0, 6)), ops, seed % 4 == 0, seed % 2 == 0)
                 for _ in range(4)]
        forest = Forest(trees=trees, num_features=4,
                        aggregation={0: Aggregation.MAX, 1: Aggregation.AVERAGE}.get(seed % 5, Aggregation.SUM),
                        average_divisor=4.0)
        found = complete.recognise(forest)
        if isinstance(found, str):
            refusals.add(found)
            continue
        ran += 1
        _exact(sf.compile(forest, rep="levelwise"), forest, rows_for(forest, rng, 40))
    assert ran > 3
    for rule in ("categorical", "==", "aggregation"):
        assert any(rule in why for why in refusals), (rule, refusals)


def _xgb_model(objective: str, features: int = 10, depth: int = 6, rounds: int = 12, **extra):
    xgb = pytest.importorskip("xgboost")
    X = _rows(features, 600, 3, nan=0.15)
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2 % features])
    if objective == "binary:logistic":
        y = (y > 0).astype(int)
    elif objective.startswith("multi"):
        y = np.digitize(y, [-1.0, 0.0, 1.0])
    params = {"objective": objective, "max_depth": depth, "eta": 0.3, "tree_method": "hist",
              "nthread": 1, "seed": 0, **extra}
    if objective.startswith("multi"):
        params["num_class"] = 4
        if extra.get("multi_strategy") == "multi_output_tree":
            y = np.eye(4)[y]  # vector leaves need one column a class
            params = {**params, "objective": "binary:logistic"}
            params.pop("num_class")
    return xgb.train(params, xgb.DMatrix(X, y), rounds), X


@pytest.mark.parametrize("objective, extra", [
    ("reg:squarederror", {}),
    ("binary:logistic", {}),
    ("multi:softprob", {}),
    ("multi:softprob", {"multi_strategy": "multi_output_tree"}),
])
def test_xgboost_models_match_xgboost_and_the_reference(objective, extra):
    xgb = pytest.importorskip("xgboost")
    booster, X = _xgb_model(objective, **extra)
    forest = sf.load_model(booster)
    cf = sf.compile(booster, rep="levelwise")
    for n in BATCHES:
        rows = _rows(forest.num_features, n, seed=n)
        _exact(cf, forest, rows)
        theirs = booster.predict(xgb.DMatrix(rows), output_margin=True)
        np.testing.assert_allclose(cf.predict(rows, output_margin=True).reshape(theirs.shape), theirs,
                                   rtol=1e-5, atol=1e-5)


def test_wide_rows_pick_their_values_by_gathers_and_stay_exact():
    """More columns than the selects pick from (cost.PICK_COLUMNS): a gather a level."""
    from silvanforge_rep_oblivious import cost
    booster, _ = _xgb_model("binary:logistic", features=cost.PICK_COLUMNS + 20, depth=5, rounds=30)
    forest = sf.load_model(booster)
    assert len(complete.recognise(forest).columns) > cost.PICK_COLUMNS
    cf = sf.compile(booster, rep="levelwise")
    for n in (3, 16, 40):
        _exact(cf, forest, _rows(forest.num_features, n, seed=n))


@pytest.mark.parametrize("zero_as_missing", [False, True])
def test_lightgbm_depth_limited_models_match_lightgbm(zero_as_missing):
    """LightGBM: ``<=`` splits, float64 thresholds (8 lanes a block), zero as missing."""
    lgb = pytest.importorskip("lightgbm")
    X = _rows(7, 800, 5, nan=0.1, zeros=0.1)
    y = np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 1]) ** 2
    booster = lgb.train({"objective": "regression", "num_leaves": 20, "max_depth": 5, "verbose": -1,
                         "zero_as_missing": zero_as_missing, "min_data_in_leaf": 5, "num_threads": 1},
                        lgb.Dataset(X, y), 15)
    forest = sf.load_model(booster)
    assert forest.threshold_dtype == "float64"
    cf = sf.compile(booster, rep="levelwise")
    for n in BATCHES:
        rows = _rows(7, n, seed=n, nan=0.1, zeros=0.1)
        _exact(cf, forest, rows)
        np.testing.assert_allclose(cf.predict(rows, output_margin=True),
                                   booster.predict(rows, raw_score=True), rtol=1e-9, atol=1e-9)


def test_unbalanced_trees_are_padded_exactly():
    """Leaves at every level (a leaf-wise tree): each early leaf fills the leaves below it."""
    lgb = pytest.importorskip("lightgbm")
    X = _rows(4, 500, 8, nan=0.0, zeros=0.0)
    y = np.where(X[:, 0] > 1.0, X[:, 1] * 3, 0.1 * X[:, 2])
    booster = lgb.train({"objective": "regression", "num_leaves": 12, "max_depth": -1, "verbose": -1,
                         "min_data_in_leaf": 3, "num_threads": 1}, lgb.Dataset(X, y), 8)
    forest = sf.load_model(booster)
    depths = [t.node_depths().max() for t in forest.trees]
    assert max(depths) > 4 and len(set(depths)) > 1
    cf = sf.compile(booster, rep="levelwise")
    for n in (1, 16, 50):
        _exact(cf, forest, _rows(4, n, seed=n))


def test_what_it_cannot_run_is_refused_with_the_reason():
    lgb = pytest.importorskip("lightgbm")
    X = _rows(3, 300, 9, nan=0.0, zeros=0.0)
    X[:, 0] = np.floor(np.abs(X[:, 0]) * 3)
    booster = lgb.train({"objective": "regression", "num_leaves": 8, "verbose": -1, "min_data_in_leaf": 3,
                         "num_threads": 1}, lgb.Dataset(X, X[:, 0] + X[:, 1], categorical_feature=[0]), 4)
    with pytest.raises(InputError, match="levelwise representation cannot run this model: tree .* categorical"):
        sf.compile(booster, rep="levelwise")
    deep = lgb.train({"objective": "regression", "num_leaves": 200, "max_depth": -1, "verbose": -1,
                      "min_data_in_leaf": 1, "num_threads": 1},
                     lgb.Dataset(_rows(3, 2000, 2, nan=0.0, zeros=0.0), np.arange(2000.0) % 97), 1)
    forest = sf.load_model(deep)
    if max(t.node_depths().max() for t in forest.trees) > complete.MAX_DEPTH:
        assert "deeper than" in complete.recognise(forest)
        with pytest.raises(InputError, match="deeper than"):
            sf.compile(deep, rep="levelwise")
    with pytest.raises(InputError, match="cpu targets"):
        sf.lower(booster, target="amd", rep="levelwise")


@pytest.mark.parametrize("batch_size", [16, 64])
def test_lookups_give_the_same_margins_with_permutes_and_with_gathers(batch_size):
    """The CPU target does a Lookup with AVX-512 permutes where the host has them (bytes with
    VBMI), else with a gather: both programs, compiled from the same LIR, give the same
    margins.  16 rows a call take the float program, 64 the byte program."""
    from silvanforge_target_cpu import codegen, jit, llvm_host

    booster, _ = _xgb_model("multi:softprob", depth=7, rounds=2)
    low = sf.lower(booster, rep="levelwise", batch_size=batch_size)
    assert "lookup" in lir.format_module(low.lir)
    assert ("lw_bin8" in low.lir.buffers) is (batch_size == 64)
    rows = _rows(low.forest.num_features, batch_size, seed=4)
    outs = []
    for permutes in (True, False):
        text = str(codegen.generate(low.lir, permutes=permutes))
        assert ("llvm.x86.avx512.vpermi2var" in text) is permutes
        if permutes and not llvm_host.host_has_avx512("avx512vbmi"):
            continue  # the permutes would not run here
        kernel = jit.compile_module(low.lir, text)
        outs.append(kernel.margins(rows, low.forest.num_outputs, threads=1))
    for out in outs:
        np.testing.assert_array_equal(out, reference.predict(low.forest, rows, output_margin=True).reshape(out.shape))


def test_byte_program_splits_features_of_many_thresholds_and_deep_trees_take_floats():
    """A feature of more than 254 thresholds is several byte columns (its thresholds in runs),
    exactly; trees deeper than 8 levels (paths past a byte) take the float program, and so does
    every call of up to 16 rows (a block of 16 float lanes)."""
    rng = np.random.default_rng(6)
    trees = [random_tree(rng, 2, (0,), 4, [0, 1], False, False) for _ in range(60)]
    for t in trees:  # distinct thresholds everywhere: 60 trees x 15 splits on 2 features
        inner = t.left >= 0
        t.threshold[inner] = np.round(rng.normal(size=inner.sum()), 6)
    forest = Forest(trees=trees, num_features=2)
    binning = complete.bins(complete.recognise(forest))
    assert len(binning.facts.columns) > 2 and all(len(v) <= 254 for v in binning.thresholds)
    assert "lw_bin8" in sf.lower(forest, rep="levelwise").lir.buffers
    cf = sf.compile(forest, rep="levelwise")
    for n in (1, 16, 100):
        _exact(cf, forest, rows_for(forest, rng, n))
    deep = Forest(trees=[random_tree(rng, 3, (0,), 10, [0, 1], False, True) for _ in range(3)], num_features=3)
    facts = complete.recognise(deep)
    assert int(facts.depth.max()) > 8 and "deeper" in complete.bins(facts)
    low = sf.lower(deep, rep="levelwise")
    assert "lw_bin8" not in low.lir.buffers and "lanes=16" in low.lir.info["summary"]
    _exact(sf.compile(deep, rep="levelwise"), deep, rows_for(deep, rng, 50))
    booster, _ = _xgb_model("binary:logistic", features=12, depth=6, rounds=20)
    assert "lw_bin8" in sf.lower(booster, rep="levelwise").lir.buffers
    assert "lw_bin8" not in sf.lower(booster, rep="levelwise", batch_size=16).lir.buffers


def test_small_requests_get_their_own_form_where_the_byte_block_would_answer_them():
    """The plan gives 3-16 rows a form of their own where the mid-size form is the byte program
    (a 64-row block for 16 rows: its cost_called) and a form lowered for 16 rows is estimated
    cheaper; every band's edge is exact."""
    from silvanforge.plan.policy import SMALL_BAND_FACTOR, SMALL_BAND_MIN_NS
    from silvanforge.rep import called_cost_of, cost_of

    booster, _ = _xgb_model("multi:softprob", features=12, depth=6, rounds=20)
    forest = sf.load_model(booster)
    cls = registry().rep_class("levelwise")
    called = called_cost_of(cls, forest, "cpu", 64, 16)
    assert called > cost_of(cls, forest, "cpu", 64)  # a block's cost, not a row's
    cf = sf.compile(booster)
    small = min(ns for r in registry().representations()
                if (ns := cost_of(registry().rep_class(r), forest, "cpu", 16)) is not None)
    want = called > SMALL_BAND_FACTOR * small and called - small >= SMALL_BAND_MIN_NS
    assert ("3-16 rows" in cf.summary()["plan"]) is bool(want)
    for n in (2, 3, 16, 17, 64, 65):
        _exact(cf, forest, _rows(forest.num_features, n, seed=n))


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64"])
def test_avx2_and_sse_code_is_exact_on_wide_rows_in_either_order(cpu):
    """Code for CPUs without AVX-512 (AVX2's x86-64-v3, SSE's x86-64) compares signed bins,
    a node's missing direction folded into its threshold, reads the columns picked by path from
    a table of offsets, and (AVX2's float program) copies runs of consecutive features from
    vectors of each row, the next block's rows prefetched: equal to the reference on forests over 9-16 features (runs of 4 and
    8, float64 and float32), NaN and zeros in the rows, nodes sending missing values either
    way, C- and Fortran-ordered rows, calls of 16 rows (the float program) and 300 (the byte
    program, its block's registers of values binned several side by side), and the byte
    program's calls of 17 and 45 rows (blocks filled in part)."""
    import llvmlite.binding as llvm
    from silvanforge.testing import random_forest
    from silvanforge_target_cpu import cpus

    if not llvm.get_process_triple().startswith("x86_64") or cpus.missing_here(cpu):
        pytest.skip(f"this host cannot run {cpu} code")
    done = right = vectors = 0
    for seed in range(10):
        forest = random_forest(seed, max_trees=8, max_depth=7, max_features=16, plain=True, summed=True)
        facts = complete.recognise(forest)
        if forest.num_features < 9 or isinstance(facts, str):
            continue
        right += bool((facts.column & complete.NAN_RIGHT).any())
        X = _rows(forest.num_features, 300, seed)
        for batch in (16, 300):
            cf = sf.compile(forest, rep="levelwise", cpu=cpu, batch_size=batch, threads=1)
            for rows in (X[:batch], np.asfortranarray(X[:batch])):
                _exact(cf, forest, rows)
        for n in (17, 45):
            _exact(cf, forest, X[:n])
        # (a vector of a row's features: rows[... +: lanes]; the next block's rows prefetched there)
        shown = sf.show(forest, "lir", rep="levelwise", cpu=cpu, batch_size=16)
        read = bool(re.search(r"= rows\[.*\+: [48]\]", shown))
        assert ("prefetch rows[" in shown) is read
        vectors += read
        shown = sf.show(forest, "lir", rep="levelwise", cpu=cpu, batch_size=300)
        assert "lw_bin8" in shown  # the byte program ran
        assert len(re.findall(r"local %xs\d+:", shown)) > 1  # registers of values binned side by side
        done += 1
    assert done >= 4 and right >= 3 and (vectors >= 2) is (cpu == "x86-64-v3"), (done, right, vectors)


def test_avx2_byte_code_blends_on_bits_shifted_to_the_top_and_is_exact():
    """AVX2 code makes the byte program's selects on one bit (a lane's path or column bit in
    its picks, a node table's chunk bit in its lookups) a shift of the bit to each byte's top
    and ``vpblendvb`` (:data:`silvanforge_target_cpu.blends`): equal to the
    reference on trees of depth 8 over 40 features (picks by path and among the columns, node
    tables of up to 128 entries looked up in chunks), NaN and zeros in the rows, nodes sending
    missing values either way, whole blocks and blocks filled in part."""
    import llvmlite.binding as llvm
    from silvanforge_target_cpu import cpus

    if not llvm.get_process_triple().startswith("x86_64") or cpus.missing_here("x86-64-v3"):
        pytest.skip("this host cannot run x86-64-v3 code")
    rng = np.random.default_rng(8)
    forest = Forest(trees=[random_tree(rng, 40, (0,), 8, [0, 1], False, True) for _ in range(6)], num_features=40)
    facts = complete.recognise(forest)
    assert int(facts.depth.max()) == 8 and bool((facts.column & complete.NAN_RIGHT).any())
    shown = sf.show(forest, "target", rep="levelwise", cpu="x86-64-v3", batch_size=300)
    assert "lw_bin8" in sf.show(forest, "lir", rep="levelwise", cpu="x86-64-v3", batch_size=300)
    assert "llvm.x86.avx2.pblendvb" in shown
    cf = sf.compile(forest, rep="levelwise", cpu="x86-64-v3", batch_size=300, threads=1)
    X = _rows(forest.num_features, 300, 8)
    for n in (300, 45, 17):
        _exact(cf, forest, X[:n])


def test_avx2_byte_program_keeps_its_order_compiled_beside_code_that_is_scheduled():
    """The AVX2 byte program asks the CPU target to keep its statements' order (module info
    ``machine_scheduler`` False: LLVM's machine scheduler, a process-wide option, off while its
    code is made; a compile wanting it on waits meanwhile, and it is on again after), AVX-512
    and SSE code keep the scheduler: compiled at once on two threads, both equal the reference."""
    from concurrent.futures import ThreadPoolExecutor

    import llvmlite.binding as llvm
    from silvanforge_target_cpu import cpus

    rng = np.random.default_rng(9)
    forest = Forest(trees=[random_tree(rng, 12, (0,), 6, [0, 1], False, True) for _ in range(8)], num_features=12)
    assert sf.lower(forest, rep="levelwise", cpu="x86-64-v3", batch_size=300).lir.info["machine_scheduler"] is False
    for cpu in ("x86-64-v4", "x86-64"):
        assert "machine_scheduler" not in sf.lower(forest, rep="levelwise", cpu=cpu, batch_size=300).lir.info
    if not llvm.get_process_triple().startswith("x86_64") or cpus.missing_here("x86-64-v3"):
        pytest.skip("this host cannot run x86-64-v3 code")
    X = _rows(forest.num_features, 300, 9)
    for _ in range(2):
        with ThreadPoolExecutor(2) as pool:
            cfs = list(pool.map(lambda cpu: sf.compile(forest, rep="levelwise", cpu=cpu, batch_size=300, threads=1),
                                ["x86-64-v3", "x86-64"]))
        for cf in cfs:
            _exact(cf, forest, X)
    from silvanforge_target_cpu.llvm_host import _Scheduling

    assert _Scheduling.on and not _Scheduling.users and not any(_Scheduling.waiting.values())  # (on again)


def _trained_edge_models():
    """An XGBoost model of 1024 bins (a column of up to 254 thresholds: bins up to 255, a feature
    over several byte columns; missing values sent both ways) and a LightGBM model treating
    zeros as missing: the edges of the signed-byte fold of the code without AVX-512."""
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 11)).astype(np.float32)
    y = X[:, 0] * 3 + np.sin(X[:, 1]) + (X[:, 2] > 0)
    X[rng.random(X.shape) < 0.15] = np.nan
    X[:1500, 3] = np.nan
    y[np.isnan(X[:, 3])] += 2
    booster = xgb.XGBRegressor(n_estimators=30, max_depth=6, max_bin=1024, tree_method="hist",
                               learning_rate=0.3).fit(X, y).get_booster()
    Z = rng.normal(size=(3000, 10))
    Z[rng.random(Z.shape) < 0.2] = 0.0
    Z[rng.random(Z.shape) < 0.1] = np.nan
    z = Z[:, 0] + (Z[:, 1] == 0) * 2 + np.nan_to_num(Z[:, 2])
    gbm = lgb.train({"objective": "regression", "zero_as_missing": True, "max_depth": 6, "num_leaves": 40,
                     "verbose": -1, "max_bin": 1023}, lgb.Dataset(Z, z), 30)
    return [sf.load_model(booster), sf.load_model(gbm)]


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64"])
def test_signed_byte_thresholds_are_exact_at_their_edges(cpu):
    """Thresholds at every bin up to 255, rows exactly at a threshold and just below it, zeros
    read as missing, an all-missing column, all-missing and all-zero rows: AVX2 and SSE code
    of the byte program equal to the reference, rows in C and Fortran order."""
    import llvmlite.binding as llvm
    from silvanforge_target_cpu import cpus

    if not llvm.get_process_triple().startswith("x86_64") or cpus.missing_here(cpu):
        pytest.skip(f"this host cannot run {cpu} code")
    rng = np.random.default_rng(1)
    for forest in _trained_edge_models():
        facts = complete.recognise(forest)
        assert not isinstance(facts, str), facts
        thresholds = facts.threshold[~np.isnan(facts.threshold)]
        R = rng.normal(size=(600, forest.num_features))
        picks = rng.choice(thresholds, size=R.shape)
        k = rng.random(R.shape)
        R = np.where(k < 0.3, picks, R)
        R = np.where((k >= 0.3) & (k < 0.45), np.nextafter(picks.astype(np.float32), -np.inf), R)
        R[rng.random(R.shape) < 0.1] = np.nan
        R[rng.random(R.shape) < 0.1] = 0.0
        R[:, 5], R[:20], R[20:30] = np.nan, np.nan, 0.0
        R = R.astype(np.dtype(forest.threshold_dtype))
        cf = sf.compile(forest, rep="levelwise", cpu=cpu, batch_size=300, threads=1)
        assert "lw_bin8" in sf.show(forest, "lir", rep="levelwise", cpu=cpu, batch_size=300)
        for rows in (R, np.asfortranarray(R)):
            _exact(cf, forest, rows)
