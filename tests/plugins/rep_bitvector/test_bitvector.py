"""Bitvector evaluation (``rep="bitvector"``, plugins/rep_bitvector): exact against the reference
on random forests with NaN, infinities and ties, against XGBoost and LightGBM on every model of
their factories it can run; its limits give clear errors; the CPU chooser takes it where it pays.

Over 600 lines because every part of the program (expanded, looped, narrow, categorical, mask
tables) is checked over the same random forests and the ``form`` fixture that compiles each one,
and the mask tables run beside the node forms in one program."""

from __future__ import annotations

import dataclasses

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silvanforge_rep_bitvector import choose, leafbits, masktables, support
from silvanforge_rep_bitvector import plan as bv_plan
from silvanforge_rep_bitvector.options import BitvectorOptions
from silvanforge_target_cpu import cpus as target_cpus
from strategies import _tree, forests, rows_for
from support_common import Draws, assert_close

import silvanforge as sf
from silvanforge import CompileOptions, InputError
from silvanforge.ir import hir
from silvanforge.ir.hir import Aggregation, CategoryRule, Forest, Op, Transform, Tree
from silvanforge.plugins import registry
from silvanforge.runtime import reference


@st.composite
def small_forests(draw):
    """Sums of single-output trees of at most 256 leaves (one to four words), < and <= mixed in
    one forest."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    features = draw(st.integers(1, 7))
    outputs = draw(st.sampled_from([1, 1, 3]))
    ops = draw(st.sampled_from([[Op.LT], [Op.LE], [Op.LT, Op.LE]]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    depths = st.one_of(st.integers(0, 6), st.integers(7, 8))
    trees = [_tree(rng, features, (k % outputs,), draw(depths), [int(o) for o in ops],
                   categorical=False, zero_missing=False) for k in range(draw(st.integers(1, 20)))]
    if draw(st.booleans()):  # infinite thresholds: LightGBM's NaN-or-not splits are "<= +inf"
        for t in trees:
            internal = np.flatnonzero(t.left >= 0)
            pick = internal[rng.random(len(internal)) < 0.3]
            t.threshold[pick] = rng.choice([np.inf, -np.inf], size=len(pick))
    return Forest(trees=trees, num_features=features, num_outputs=outputs,
                  base_score=np.round(rng.normal(size=outputs), 2), transform=Transform("identity"),
                  threshold_dtype=dtype, accumulate_dtype=dtype, source="random")


def _compile(model, rep_options: dict | None = None, **kw):
    """``sf.compile`` with the bitvector options ``rep_options``, the node forms unless they ask
    for the mask-table form or name the trees it takes (its tests are below)."""
    given = dict(rep_options or {})
    if "tabled_trees" not in given:
        given.setdefault("mask_tables", False)
    return sf.compile(model, options=CompileOptions(rep_options=given), **kw)


def _form_options(form: str) -> dict:
    """The bitvector options of a :func:`form`."""
    if form == "mask-tables":
        return {"mask_tables": True}
    shape, _, words = form.partition("-")
    given = {"expand_nodes": {"expanded": 10**9, "looped": -1, "mixed": 40}[shape]}
    if words:
        given["narrow"] = words == "narrow"
    return given


@pytest.fixture(params=["expanded", "looped", "mixed", "looped-float", "expanded-narrow", "mask-tables"])
def form(request):
    """The forms of the program: every node as code, loops over node tables for every tree, or
    the smallest trees as code (up to 40 nodes) and loops for the rest; the narrow form (bins
    and 32-bit words) where it is chosen (wide blocks), refused (``-float``) or forced
    (``-narrow``); the mask-table form (:mod:`.masktables`) wherever it can run."""
    return request.param


def _check_form(cf, forest, form):
    lir_text = cf.show("lir")
    tables = form == "mask-tables" and masktables.unsupported(forest) is None
    assert ("form=mask-tables" in lir_text) == tables, lir_text[:300]
    if form == "mask-tables":
        return
    shape, _, words = form.partition("-")
    if shape != "mixed":
        assert f"{shape}={forest.num_trees}" in lir_text, lir_text[:300]
    if shape == "looped" and support.node_count(forest):
        assert f"lanes={choose.WIDE_LANES}" in lir_text  # mostly looped: wide blocks
    else:
        expanded = choose.expanded_trees(forest, options=BitvectorOptions.from_mapping(_form_options(form)))
        assert int(lir_text.split("expanded=")[1].split()[0]) == expanded.sum()
    if words:
        bits = leafbits.NARROW_WORD if words == "narrow" else leafbits.WORD
        assert f"words={bits}-bit" in lir_text


# FORM_EXAMPLES forests for each of the six forms (a compile each: 0.2-0.4 s), so 108 forests a
# test; 40 each took 50 s (80 s with categorical splits), 25 each 33 s (48 s) of a suite that must
# run in 30 minutes on two cores.
FORM_EXAMPLES = 18


@settings(max_examples=FORM_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
@given(forest=small_forests(), n=st.integers(1, 40), threads=st.sampled_from([1, 3]))
def test_equals_the_reference_exactly(form, forest, n, threads):
    cf = _compile(forest, _form_options(form), rep="bitvector")
    assert cf.rep == "bitvector"
    _check_form(cf, forest, form)
    X = rows_for(forest, np.random.default_rng(n), n)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                  reference.predict(forest, X, output_margin=True))


def test_any_forest_runs_or_is_refused_with_the_reason():
    """Any random forest is exact or refused with the reason.  Most forests of every rule are
    refused (trees taken by their min or max, zero as missing, == splits), so half the draws are
    plain forests summed or averaged, and enough of all the draws must run."""
    draws = Draws()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(forest=st.one_of(forests(max_trees=8, max_depth=5),
                            forests(max_trees=8, max_depth=5, plain=True,
                                    aggregations=(Aggregation.SUM, Aggregation.AVERAGE))))
    def check(forest):
        # Vector-leaf trees run as one tree an output (support.single_output), as the plugin does.
        why = support.unsupported(support.single_output(forest))
        if why is None:
            cf = _compile(forest, rep="bitvector")
            X = rows_for(forest, np.random.default_rng(1), 30)
            np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                          reference.predict(forest, X, output_margin=True))
            draws.count("ran")
        else:
            with pytest.raises(InputError, match="bitvector representation cannot run this model"):
                _compile(forest, rep="bitvector")
            draws.count("refused")

    check()
    draws.assert_share("ran", 0.2)


def _forest(**kw) -> Forest:
    rng = np.random.default_rng(3)
    trees = [_tree(rng, 4, (0,), 4, [int(Op.LT)], categorical=kw.pop("categorical", False),
                   zero_missing=kw.pop("zero_missing", False)) for _ in range(5)]
    return Forest(trees=trees, num_features=4, **kw)


@pytest.mark.parametrize("change, reason", [
    (lambda f: setattr(f, "aggregation", Aggregation.MAX), "sums or averages trees"),
    (lambda f: f.trees[0].op.__setitem__(0, int(Op.EQ)), "splits other than"),
    (lambda f: f.trees[1].threshold.__setitem__(0, np.nan), "NaN thresholds"),
    (lambda f: f.trees[2].zero_missing.__setitem__(0, True), "zero as missing"),
])
def test_limits(change, reason):
    forest = _forest()
    change(forest)
    assert reason in support.unsupported(forest)
    assert not choose.pays(forest)
    with pytest.raises(InputError, match=reason):
        _compile(forest, rep="bitvector")
    assert _compile(forest).rep != "bitvector"  # the chooser walks it


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_averaged_forests_divide_the_sum_as_the_reference_does(dtype):
    """Random forests (AVERAGE): the node forms sum from zero, divide by the divisor and add the
    base score, each in the accumulation type, exactly as the reference; the mask tables
    refuse them (their blocks do not divide)."""
    rng = np.random.default_rng(11)
    trees = [_tree(rng, 5, (0,), 5, [int(Op.LT), int(Op.LE)], categorical=False, zero_missing=False)
             for _ in range(12)]
    forest = Forest(trees=trees, num_features=5, aggregation=Aggregation.AVERAGE, average_divisor=12.0,
                    base_score=np.array([0.25]), threshold_dtype=dtype, accumulate_dtype=dtype)
    assert support.unsupported(forest) is None
    assert "averaged" in masktables.unsupported(forest)
    for options in ({}, {"mask_tables": True}, {"expand_nodes": -1}):
        cf = _compile(forest, rep_options=options, rep="bitvector")
        for n in (1, 7, 16, 300):
            X = rows_for(forest, np.random.default_rng(n), n)
            np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                          reference.predict(forest, X, output_margin=True))


def test_vector_leaves_are_one_tree_an_output():
    """Trees adding to several outputs (XGBoost's multi_output_tree, scikit-learn classifiers'
    vector leaves) run as one tree an output, each output summed in model order: exactly the
    reference, and XGBoost's own predict."""
    xgb = pytest.importorskip("xgboost")
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 6)).astype(np.float32)
    y = (np.abs(X[:, 0] * 2 + X[:, 1]).astype(int)) % 4
    X[rng.random(X.shape) < 0.05] = np.nan
    booster = xgb.train({"multi_strategy": "multi_output_tree", "tree_method": "hist", "num_class": 4,
                         "objective": "multi:softprob", "max_depth": 4}, xgb.DMatrix(X, y), 12)
    forest = sf.load_model(booster)
    assert any(len(t.outputs) > 1 for t in forest.trees)
    assert support.unsupported(support.single_output(forest)) is None
    cf = _compile(booster, rep="bitvector")
    for n in (1, 9, 300):
        np.testing.assert_array_equal(cf.predict(X[:n], output_margin=True),
                                      reference.predict(forest, X[:n], output_margin=True))
        np.testing.assert_allclose(cf.predict(X[:n]), booster.predict(xgb.DMatrix(X[:n])), rtol=1e-6, atol=1e-7)
    rf = RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0).fit(np.nan_to_num(X), y)
    cf = _compile(rf, rep="bitvector")
    np.testing.assert_allclose(cf.predict(np.nan_to_num(X)), rf.predict_proba(np.nan_to_num(X)), rtol=1e-12)


def test_more_than_256_leaves_is_refused():
    with pytest.raises(InputError, match="more than 256 leaves"):
        _compile(Forest(trees=[_full_tree(9)], num_features=6), rep="bitvector")


@pytest.mark.parametrize("default_left", [True, False])
@pytest.mark.parametrize("depth", [6, 7, 8])
def test_full_trees_of_one_to_four_words(form, depth, default_left):
    """Every leaf of a 64, 128 or 256-leaf tree is found, whichever word it is in: rows on both
    sides of every threshold, on the thresholds, NaN (missing going left, then right)."""
    forest = Forest(trees=[_full_tree(depth, default_left)], num_features=6, base_score=np.array([0.5]))
    thresholds = np.unique(forest.trees[0].threshold[forest.trees[0].left >= 0])
    rng = np.random.default_rng(depth)
    X = rng.choice(np.concatenate([thresholds, thresholds + 0.05]), size=(6000, 6))
    X[rng.random(X.shape) < 0.15] = -1.0  # left of every threshold
    X[rng.random(X.shape) < 0.15] = np.nan
    cf = _compile(forest, _form_options(form), rep="bitvector")
    _check_form(cf, forest, form)
    got = cf.predict(X, output_margin=True)
    np.testing.assert_array_equal(got, reference.predict(forest, X, output_margin=True))
    # Leaf values are node ids, in preorder: a leaf's rank among them is its position from the left.
    tree = forest.trees[0]
    position = np.searchsorted(np.flatnonzero(tree.left < 0), got - 0.5)
    assert set(position // 64) == set(range(2 ** depth // 64))  # every word held some exit leaf


@pytest.mark.parametrize("kw, what", [({"schedule": "default"}, "schedule"), ({"tile_size": 2}, "tiles"),
                                      ({"pad": True}, "padding"), ({"reorder": "depth"}, "tree reordering")])
def test_walk_options_are_refused(kw, what):
    with pytest.raises(InputError, match=f"takes no {what}"):
        _compile(_forest(), rep="bitvector", **kw)


def test_gpu_targets_are_refused():
    with pytest.raises(InputError, match="runs on cpu targets, not gpu ones"):
        sf.show(_forest(), "lir", target="cuda", rep="bitvector")


def test_chooser_takes_it_for_small_trees_not_for_full_deep_ones():
    rng = np.random.default_rng(7)
    shallow = Forest(trees=[_tree(rng, 6, (0,), int(rng.integers(2, 7)), [int(Op.LT)], categorical=False,
                                  zero_missing=False) for _ in range(30)], num_features=6)
    # Against the walks (the levelwise form, which runs these shallow trees faster still, kept out).
    assert choose.pays(shallow) and _compile(shallow, {"oblivious_auto_choose": False}).rep == "bitvector"
    full = Forest(trees=[_full_tree(8) for _ in range(10)], num_features=6)
    assert not choose.pays(full) and _compile(full).rep != "bitvector"
    # Asking for anything the walks take keeps the walks.
    assert _compile(shallow, schedule="default").rep != "bitvector"


def _full_tree(depth: int, default_left: bool = False):
    from silvanforge.ir.hir import Tree

    left, right, feature, threshold = [], [], [], []

    def new(d):
        node = len(left)
        left.append(-1), right.append(-1), feature.append(-1), threshold.append(0.0)
        if d < depth:
            feature[node], threshold[node] = d % 6, 0.1 * node
            left[node] = new(d + 1)
            right[node] = new(d + 1)
        return node

    new(0)
    return Tree.from_nodes(left, right, feature, threshold, np.arange(len(left), dtype=float)[:, None],
                           default_left=default_left)


def test_small_batches_get_narrower_blocks():
    looped = BitvectorOptions(expand_nodes=-1, mask_tables=False)  # every tree looped: wide blocks pay
    forest = Forest(trees=[_full_tree(5) for _ in range(4)], num_features=6)
    assert choose.choose_form(forest, options=looped)[0] == 32
    # Blocks no wider than the batch: a block of 16 rows beats two of 8.
    assert choose.choose_form(forest, batch_size=100, options=looped)[0] == 32
    assert choose.choose_form(forest, batch_size=20, options=looped)[0] == 16
    assert choose.choose_form(forest, batch_size=12, options=looped)[0] == 8
    # A batch under a block's lanes pays for the whole block.
    assert choose.estimate_ns(forest, 1, looped) == 8 * choose.estimate_ns(forest, 8, looped)
    cf = _compile(forest, {"expand_nodes": -1}, rep="bitvector", batch_size=24)
    assert "lanes=16" in cf.show("lir")
    X = rows_for(forest, np.random.default_rng(4), 37)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_a_call_smaller_than_the_lowered_block_pays_the_whole_block():
    """The plan weighs a program lowered for 64 rows (32 lanes) answering 16-row calls at a
    whole block's cost, never below the program lowered for 16 rows (a block of 16)."""
    from silvanforge_rep_bitvector import BitvectorForm

    looped = {"expand_nodes": -1, "mask_tables": False}  # every tree looped: wide blocks
    forest = Forest(trees=[_full_tree(5) for _ in range(4)], num_features=6)
    lanes = choose.choose_form(forest, 64, BitvectorOptions(**looped))[0]
    assert lanes == 32 and choose.choose_form(forest, 16, BitvectorOptions(**looped))[0] == 16
    at16, at64 = (BitvectorForm.cost(forest, "cpu", n, looped) for n in (16, 64))
    called = BitvectorForm.cost_called(forest, "cpu", 64, 16, looped)
    assert called == max(at16, at64 * lanes / 16) > at16
    assert BitvectorForm.cost_called(forest, "cpu", 64, 64, looped) == at64
    # Refused on another kind of target: the core never asks its price there.
    from silvanforge.rep import called_cost_of

    assert "runs on cpu targets" in BitvectorForm.refuses(forest, "gpu", looped)
    assert called_cost_of(BitvectorForm, forest, "gpu", 64, 16, looped) is None


def test_save_and_load(tmp_path):
    forest = _forest(num_outputs=1)
    cf = _compile(forest, rep="bitvector", batch_size=64)
    cf.save(tmp_path / "m.sfm")
    back = sf.load_compiled(tmp_path / "m.sfm")
    assert back.rep == "bitvector"
    X = rows_for(forest, np.random.default_rng(2), 50)
    np.testing.assert_array_equal(back.predict(X), cf.predict(X))
    assert "bitvector" in cf.show("lir") and "clz" in cf.show("lir")
    assert back.show("lir") == cf.show("lir")  # the same program (the batch size it was built for)


def test_agrees_with_xgboost_and_lightgbm(model_cases):
    pytest.importorskip("xgboost")
    pytest.importorskip("lightgbm")
    ran = []
    for case in model_cases["xgboost"].all(quick=True) + model_cases["lightgbm"].all(quick=True):
        forest = sf.load_model(case.path)
        if support.unsupported(forest) is not None:
            continue
        cf = _compile(case.path, rep="bitvector")
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
        if case.expected_margin is not None:
            assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                         case.expected_margin, case, "margins")
        ran.append(case.name)
    assert len(ran) >= 5, ran


def test_cli_compiles_and_refuses(capsys, tmp_path):
    from silvanforge import cli

    assert cli.main(["compile", "examples/model.json", "--rep", "bitvector"]) == 0
    assert "bitvector" in capsys.readouterr().out
    code = cli.main(["compile", "examples/model.json", "--rep", "bitvector", "--tile-size", "2"])
    err = capsys.readouterr()
    assert code != 0 and "takes no tiles" in err.out + err.err and "Traceback" not in err.out + err.err


def test_chooser_default_on_library_models(model_cases):
    """With the chooser free, the default compile of every library case agrees with the library
    (whichever of bitvectors and walks it chose)."""
    pytest.importorskip("xgboost")
    pytest.importorskip("lightgbm")
    reps = set()
    for case in model_cases["xgboost"].all(quick=True) + model_cases["lightgbm"].all(quick=True):
        cf = _compile(case.path)
        reps.add(cf.rep)
        assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
    assert "bitvector" in reps, reps


@pytest.mark.parametrize("op", [Op.LT, Op.LE])
@pytest.mark.parametrize("default_left", [True, False])
def test_infinite_thresholds(form, op, default_left):
    """``x <= +inf`` sends every number left and NaN its default way (dropped, or read from the
    NaN indicator copy); ``x < +inf`` sends +inf right; -inf thresholds send every number right."""
    tree = _full_tree(3, default_left)
    internal = np.flatnonzero(tree.left >= 0)
    tree.op[internal] = int(op)
    tree.threshold[internal[::3]] = np.inf
    tree.threshold[internal[1::3]] = -np.inf
    forest = Forest(trees=[tree, _full_tree(2, not default_left)], num_features=6)
    X = np.random.default_rng(4).choice([np.nan, np.inf, -np.inf, 0.0, 1.0, 3.5, 1e30], size=(500, 6))
    cf = _compile(forest, _form_options(form), rep="bitvector")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))
    assert len(set(cf.predict(X, output_margin=True))) > 4


def test_lightgbm_nan_or_not_splits(tmp_path):
    """LightGBM trained where a feature's missingness predicts the label writes ``<= inf`` splits
    with missing values right: bitvector evaluation takes the model and agrees with LightGBM."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 5))
    missing = rng.random(X.shape) < 0.3
    y = X[:, 1] + 2.0 * missing[:, 0] + 0.1 * rng.normal(size=3000)
    X[missing] = np.nan
    booster = lgb.train({"objective": "regression", "num_leaves": 15, "verbose": -1, "seed": 1},
                        lgb.Dataset(X, y), 20)
    booster.save_model(tmp_path / "m.txt")
    cf = _compile(tmp_path / "m.txt", rep="bitvector")
    assert any(((t.threshold == np.inf) & (t.left >= 0)).any() for t in cf.forest.trees)
    assert support.nan_split_features(cf.forest) == [0]
    Xt = rng.normal(size=(400, 5))
    Xt[rng.random(Xt.shape) < 0.3] = np.nan
    Xt[rng.random(Xt.shape) < 0.05] = np.inf
    np.testing.assert_array_equal(cf.predict(Xt), reference.predict(cf.forest, Xt))
    np.testing.assert_allclose(cf.predict(Xt), booster.predict(Xt), rtol=1e-12, atol=1e-12)


def test_walks_without_split_rows_are_costed_with_their_nan_tests():
    """An infinite threshold keeps the walks' NaN test (no split rows): the chooser charges
    their steps WALK_NAN_TEST_FACTOR more, so NaN-trained LightGBM models get bitvectors."""
    forest = Forest(trees=[_full_tree(4) for _ in range(3)], num_features=6)
    from silvanforge.lowering import walkcost

    plain = walkcost.walk_estimate_ns(forest)
    forest.trees[1].threshold[0] = np.inf
    assert walkcost.walk_estimate_ns(forest) == pytest.approx(plain * walkcost.WALK_NAN_TEST_FACTOR)


def test_mostly_looped_narrow_blocks_expand_no_tree():
    """float64 trees too many to expand most of: narrow wide blocks loop every tree; the float
    form's wide blocks still expand the smallest; the program is exact either way."""
    rng = np.random.default_rng(17)
    forest = _leafwise_forest(60, 4, 8, rng)
    lanes, expanded = choose.choose_form(forest)
    assert lanes == choose.WIDE_LANES and choose.narrow_form(forest, lanes) and not expanded.any()
    lanes, expanded = choose.choose_form(forest, options=BitvectorOptions(narrow=False))
    assert lanes == choose.WIDE_LANES and expanded.any()
    cf = _compile(forest, rep="bitvector", batch_size=512)
    assert "expanded=0 " in cf.show("lir")
    X = rows_for(forest, rng, 300)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_large_float32_models_take_wide_blocks_with_expanded_and_looped_trees():
    """float32 models of WIDE_FLOAT32_NODES nodes and more run 32-row blocks, expanding the
    smallest trees up to a quarter of the expand_nodes option and looping the rest; exact either
    way."""
    trees = [_full_tree(7, default_left=k % 2 == 0) for k in range(24)] + [_full_tree(3) for _ in range(8)]
    forest = Forest(trees=trees, num_features=6, threshold_dtype="float32", accumulate_dtype="float32")
    assert support.node_count(forest) >= choose.WIDE_FLOAT32_NODES
    lanes, expanded = choose.choose_form(forest)
    assert lanes == choose.WIDE_LANES and 0 < expanded.sum() < forest.num_trees
    assert expanded[24:].all()  # the small trees are the expanded ones
    float64 = Forest(trees=trees, num_features=6, threshold_dtype="float64", accumulate_dtype="float64")
    # float64 compares: most nodes expanded over 8 lanes; with 16-bit bins (the narrow form),
    # wide blocks where their estimate is lower (measured 1.6x on such trees with random thresholds)
    assert choose.choose_form(float64, options=BitvectorOptions(narrow=False))[0] == choose.LANES
    assert choose.choose_form(float64)[0] == choose.WIDE_LANES
    X = np.random.default_rng(6).choice([np.nan, -1.0, 0.35, 1.0, 2.05, 7.5, 12.0, np.inf], size=(300, 6))
    cf = _compile(forest, rep="bitvector")
    assert f"lanes={choose.WIDE_LANES}" in cf.show("lir")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True),
                                  reference.predict(forest, X, output_margin=True))


# Categorical splits: decision tables of one row per category (plan.CatFeature).


@st.composite
def categorical_forests(draw):
    """:func:`small_forests` with most nodes categorical: sets inside one 64-bit word, across
    several words and with large category ids (a large table), empty sets, every category rule."""
    forest = draw(small_forests())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    top = draw(st.sampled_from([3, 64, 65, 300, 5000]))
    for t in forest.trees:
        internal = np.flatnonzero(t.left >= 0)
        for node in internal[rng.random(len(internal)) < 0.6].tolist():
            cats = rng.integers(0, top, int(rng.integers(0, 12)))
            if rng.random() < 0.2:
                cats = np.append(cats, top - 1)  # the largest category: the table's last row
            t.categories[node] = np.unique(cats).astype(np.int64)
    forest.category_rule = draw(st.sampled_from(list(CategoryRule)))
    return forest, top


def category_rows(forest: Forest, rng, n: int, top: int) -> np.ndarray:
    """Rows of :func:`rows_for` with a half of the values categories, named or not, and values
    on the edges of every category rule (negative, fractional, -0.5, 2**24, 2**31, NaN)."""
    X = rows_for(forest, rng, n)
    edges = np.array([-1.0, -0.5, -0.0, 0.5, top - 1, top - 0.5, top, top + 3, 2.0**24 - 1,
                      2.0**24, 2.0**31 - 1, 2.0**31, 1e12, np.nan, -np.inf, np.inf])
    pick = rng.random(X.shape) < 0.5
    X[pick] = np.where(rng.random(int(pick.sum())) < 0.7, rng.integers(0, top + 2, int(pick.sum())),
                       rng.choice(edges, int(pick.sum())))
    return X


@settings(max_examples=FORM_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
@given(drawn=categorical_forests(), n=st.integers(1, 70), threads=st.sampled_from([1, 3]),
       tiny_chunks=st.booleans())
def test_categorical_splits_equal_the_reference_exactly(form, drawn, n, threads, tiny_chunks):
    """``tiny_chunks``: decision words gathered a word at a time (a chunk a tree or less)."""
    forest, top = drawn
    cf = _compile(forest, {**_form_options(form), **({"decision_chunk_bytes": 1} if tiny_chunks else {})},
                  rep="bitvector")
    if tiny_chunks and forest.has_categorical():
        assert "bv_chunk_tree" in cf.show("lir") or form.startswith("expanded") or form == "mask-tables"
    assert cf.rep == "bitvector"
    _check_form(cf, forest, form)
    X = category_rows(forest, np.random.default_rng(n), n, top)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                  reference.predict(forest, X, output_margin=True))


def test_categorical_decision_tables_past_the_limit_are_walked():
    forest = _forest(category_rule=CategoryRule.LIGHTGBM)
    forest.trees[0].categories[0] = np.array([3, 2**27], np.int64)  # a 1 GiB table
    assert "decision tables" in support.unsupported(forest)
    with pytest.raises(InputError, match="decision tables"):
        _compile(forest, rep="bitvector")
    cf = _compile(forest)
    assert cf.rep != "bitvector"
    X = np.array([[2.0**27, 0, 0, 0], [3, 1, 1, 1], [2.0**27 + 1, 0, 0, 0], [np.nan] * 4])
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def _categorical_library_cases(model_cases):
    return ([model_cases["lightgbm"].get(n) for n in ("categorical", "categorical_multiclass")]
            + [model_cases["xgboost"].get(n) for n in
               ("categorical_regression", "categorical_binary_ubj", "categorical_onehot")])


def test_categorical_models_agree_with_lightgbm_and_xgboost(form, model_cases):
    """LightGBM partition splits past one word, one-hot splits, XGBoost's categories (in the set
    goes right), on rows with unseen, negative, fractional, huge and NaN categories: in every
    form forced, and with the chooser free (which takes bitvectors for these small trees)."""
    pytest.importorskip("xgboost")
    pytest.importorskip("lightgbm")
    for case in _categorical_library_cases(model_cases):
        forest = sf.load_model(case.path)
        assert forest.has_categorical() and support.unsupported(forest) is None, case.name
        for cf in (_compile(case.path, _form_options(form), rep="bitvector"), _compile(case.path, _form_options(form))):
            assert cf.rep == "bitvector", case.name
            assert_close(cf.predict(case.X, **case.predict_kwargs), case.expected, case)
            if case.expected_margin is not None:
                assert_close(cf.predict(case.X, output_margin=True, **case.predict_kwargs),
                             case.expected_margin, case, "margins")
        _check_form(_compile(case.path, _form_options(form), rep="bitvector"), forest, form)



@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=categorical_forests(), lanes=st.sampled_from([8, 32]), tiny_chunks=st.booleans(),
       narrow=st.booleans())
def test_decision_tables_stay_within_the_bound_the_limit_checks(drawn, lanes, tiny_chunks, narrow):
    """The size :func:`unsupported` checks against the limit bounds the tables the chunks build
    (every chunk gives a feature words of its own)."""
    forest, _ = drawn
    plan = bv_plan.make_plan(forest, np.zeros(forest.num_trees, bool), lanes, narrow,
                             chunk_bytes=1 if tiny_chunks else bv_plan.CHUNK_BYTES)
    if plan.cat_features:
        assert plan.cat_table.nbytes <= support.category_table_bytes(forest)


def test_many_categorical_features_in_small_chunks_are_bounded():
    """One tree a chunk, 40 features of 3000 categories each: a word per feature per chunk, and
    the size the limit checks still bounds it."""
    rng = np.random.default_rng(4)
    trees = []
    for _ in range(30):
        n = 81  # a chain of 40 categorical nodes, one per feature
        left = [2 * k + 1 if k < 40 else -1 for k in range(n)]
        right = [2 * k + 2 if k < 40 else -1 for k in range(n)]
        feature = [k if k < 40 else -1 for k in range(n)]
        cats = {k: rng.integers(0, 3000, 5).tolist() + [2999] for k in range(40)}
        trees.append(Tree.from_nodes(left, right, feature, [0.0] * n, rng.normal(size=(n, 1)), categories=cats))
    forest = Forest(trees=trees, num_features=40, category_rule=CategoryRule.LIGHTGBM)
    hir.verify(forest)
    plan = bv_plan.make_plan(forest, np.zeros(30, bool), choose.WIDE_LANES)
    assert plan.cat_table.nbytes <= support.category_table_bytes(forest)
    assert plan.cat_table.nbytes > 8 * 3001 * 40  # a word per feature per chunk, not per feature


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("expand", [False, True])
def test_narrow_bins_are_exact_on_every_threshold_and_its_neighbours(dtype, expand):
    """The narrow form's bins: ``<`` and ``<=`` splits at the same values (two bins from one
    value), infinite thresholds, both default directions, on rows at every threshold, the
    values next to it, +-inf, +-MAX and NaN, forced in looped and expanded trees."""
    rng = np.random.default_rng(11)
    values = np.array([-np.inf, -3.0, -0.0, 0.25, 1.0, 1e30, np.inf])
    trees = []
    for k in range(12):
        tree = _full_tree(5, default_left=bool(k % 2))
        internal = np.flatnonzero(tree.left >= 0)
        tree.threshold[internal] = rng.choice(values, len(internal))
        tree.op[internal] = rng.choice([int(Op.LT), int(Op.LE)], len(internal))
        tree.default_left[internal] = rng.random(len(internal)) < 0.5
        tree.leaf_value[:] = rng.normal(size=tree.leaf_value.shape)
        trees.append(tree)
    forest = Forest(trees=trees, num_features=6, threshold_dtype=dtype, accumulate_dtype=dtype)
    t = np.dtype(dtype).type
    edges = np.concatenate([values.astype(dtype), np.nextafter(values.astype(dtype), t(np.inf)),
                            np.nextafter(values.astype(dtype), t(-np.inf)),
                            [np.finfo(dtype).max, -np.finfo(dtype).max, np.nan]]).astype(dtype)
    X = rng.choice(edges, size=(700, 6)).astype(dtype)
    cf = _compile(forest, {"expand_nodes": 10**9 if expand else -1, "narrow": True}, rep="bitvector")
    assert f"words={leafbits.NARROW_WORD}-bit" in cf.show("lir")
    assert ("expanded=12" if expand else "looped=12") in cf.show("lir")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))
    assert len(np.unique(cf.predict(X, output_margin=True))) > 20


@pytest.mark.parametrize("distinct", [100, 1200])  # <= splits add a bin each
def test_narrow_bins_as_bytes_and_as_16_bit_integers(distinct):
    """Features of at most 255 distinct thresholds compare as bytes, more as 16-bit integers:
    both exact on rows at, between and around every threshold."""
    rng = np.random.default_rng(distinct)
    values = np.round(rng.normal(size=distinct), 6)
    trees = []
    for _ in range(40):
        tree = _full_tree(5, default_left=bool(rng.random() < 0.5))
        internal = np.flatnonzero(tree.left >= 0)
        tree.feature[internal] = rng.integers(0, 2, len(internal))
        tree.threshold[internal] = rng.choice(values, len(internal))
        tree.op[internal] = rng.choice([int(Op.LT), int(Op.LE)], len(internal))
        tree.leaf_value[:] = rng.normal(size=tree.leaf_value.shape)
        trees.append(tree)
    forest = Forest(trees=trees, num_features=6)
    plan = bv_plan.make_plan(forest, np.zeros(40, bool), choose.WIDE_LANES, narrow=True)
    assert plan.node_dtype == (np.uint8 if plan.bin_counts.max() <= 255 else np.int16)
    assert (plan.bin_counts.max() > 255) == (distinct > 255)
    X = rng.choice(np.concatenate([values, np.nextafter(values, np.inf), np.nextafter(values, -np.inf),
                                   [np.nan, np.inf, -np.inf, 0.0]]), size=(900, 6))
    cf = _compile(forest, {"expand_nodes": -1, "narrow": True}, rep="bitvector")
    assert f"words={leafbits.NARROW_WORD}-bit" in cf.show("lir")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


# Code for vector units without AVX-512 (AVX2, SSE, NEON) takes byte words in the narrow form
# where they fill a register, either word by cost where they fill less (choose.narrow_word);
# this host runs AVX2 and SSE4.1 code (x86-64-v3, -v2).
AVX2, SSE = "x86-64-v3", "x86-64-v2"
needs_avx2 = pytest.mark.skipif(not llvm.get_process_triple().startswith("x86_64") or target_cpus.missing_here(AVX2),
                                reason="this host runs no x86-64-v3 code")


def test_narrow_words_are_bytes_where_they_fill_a_register():
    """The narrow form's words by vector unit: AVX-512 (and the default) 32 bits; AVX2, SSE and
    NEON bytes where the block's bytes fill a register (32 lanes; 16 on 16-byte registers); the
    ``narrow_word`` option takes either."""
    forest = Forest(trees=[_full_tree(5) for _ in range(3)], num_features=6)
    wide = choose.WIDE_LANES
    assert choose.narrow_word(forest, wide) == leafbits.NARROW_WORD
    assert choose.narrow_word(forest, wide, registry().vectors("cpu", "x86-64-v4")) == leafbits.NARROW_WORD
    for cpu in (AVX2, SSE, "neoverse-n1"):
        assert choose.narrow_word(forest, wide, registry().vectors("cpu", cpu)) == leafbits.BYTE_WORD, cpu
    for cpu in (SSE, "neoverse-n1"):
        assert choose.narrow_word(forest, wide // 2, registry().vectors("cpu", cpu)) == leafbits.BYTE_WORD, cpu
    avx2 = registry().vectors("cpu", AVX2)
    assert choose.narrow_word(forest, wide, avx2, BitvectorOptions(narrow_word=32)) == leafbits.NARROW_WORD
    assert choose.narrow_word(forest, wide, None, BitvectorOptions(narrow_word=8)) == leafbits.BYTE_WORD
    plan = bv_plan.make_plan(forest, np.zeros(3, bool), choose.WIDE_LANES, True, narrow_word=leafbits.BYTE_WORD)
    assert plan.word_bits == leafbits.BYTE_WORD and all(len(t.words) == 4 for t in plan.trees)  # 32 leaves
    with pytest.raises(InputError, match="narrow_word"):
        BitvectorOptions.from_mapping({"narrow_word": 16})


def test_word_applications_count_what_the_plan_holds():
    """:func:`leafbits.word_applications` (what the word's price counts) equals the plan's nodes a
    word and words, numeric and categorical, for byte and 32-bit words."""
    forest, _ = _categorical_leafwise(np.random.default_rng(3), 8)
    for bits in (leafbits.BYTE_WORD, leafbits.NARROW_WORD):
        plan = bv_plan.make_plan(forest, np.zeros(forest.num_trees, bool), choose.WIDE_LANES, True, narrow_word=bits)
        words = [w for t in plan.trees for w in t.words]
        categorical = sum(int(w.categorical.sum()) for w in words)
        counted = (sum(len(w.column) for w in words) - categorical, categorical, len(words))
        assert leafbits.word_applications(forest, bits) == counted and categorical > 0


def _plan_fields(plan: bv_plan.Plan) -> list:
    """Everything a plan holds, as plain values (the bins as bytes: they are NaN-padded)."""
    words = [(t.slot, t.output, t.leaf_base, [(w.column.tolist(), w.threshold.tolist(), w.mask.tolist(),
                                                w.bit.tolist(), str(w.threshold.dtype)) for w in t.words])
             for t in plan.trees]
    extra = [None if a is None else np.asarray(a).tobytes() for a in (plan.bins, plan.bin_counts)]
    return [words, plan.used, plan.nan_used, plan.leaf_values.tolist(), plan.cat_table.tolist(),
            [dataclasses.astuple(c) for c in plan.cat_features], [(c.trees, c.entries) for c in plan.chunks],
            plan.word_bits, str(plan.node_dtype), plan.bin_steps, extra]


@pytest.mark.parametrize("narrow", [False, True])
def test_plans_sharing_their_nodes_within_a_compile_equal_plans_made_alone(narrow):
    """Plans of one forest for other expanded trees and lanes (a compile's forms for 16 and 64
    rows) share their nodes' words within a compile scope: each equals the plan made alone,
    though their categorical nodes read decision words in other columns."""
    from silvanforge.plan.memo import compile_scope

    forest, _ = _categorical_leafwise(np.random.default_rng(5), 8)
    n = forest.num_trees
    cases = [(np.zeros(n, bool), choose.WIDE_LANES), (np.arange(n) % 3 == 0, choose.WIDE_LANES // 2)]

    def plans():
        return [bv_plan.make_plan(forest, expanded, lanes, narrow, chunk_bytes=64 * lanes)
                for expanded, lanes in cases]

    alone = [plans()[k] for k in range(len(cases))]  # (outside a scope: nothing kept between them)
    with compile_scope():
        shared = plans()
    assert [_plan_fields(p) for p in shared] == [_plan_fields(p) for p in alone]
    columns = [[w.column[w.categorical].tolist() for t in p.trees for w in t.words] for p in shared]
    assert columns[0] != columns[1] and any(columns[0])


def _categorical_leafwise(rng, depth: int, share: float = 0.1, top: int = 40) -> tuple[Forest, int]:
    """:func:`_leafwise_forest` of 20 trees with ``share`` of the nodes categorical."""
    forest = _leafwise_forest(20, 6, depth, rng)
    for t in forest.trees:
        internal = np.flatnonzero(t.left >= 0)
        for node in internal[rng.random(len(internal)) < share].tolist():
            t.categories[node] = np.unique(rng.integers(0, top, int(rng.integers(1, 12)))).astype(np.int64)
    forest.category_rule = CategoryRule.LIGHTGBM
    return forest, top


@needs_avx2
def test_half_register_blocks_take_the_word_their_cost_prices_cheaper():
    """16-lane blocks of AVX2 code (half a register of bytes) of 256-leaf trees: numeric ones in
    byte words, ones with categorical splits (each a compare narrowed to bytes, and a categorical
    loop a word) in 32-bit words, as :func:`choose.half_register_ns` prices them; the program for
    16 rows takes that word and is exact at 3 and 16 rows; priced at the word's cost."""
    from silvanforge_rep_bitvector import BitvectorForm

    rng = np.random.default_rng(8)
    avx2 = registry().vectors("cpu", AVX2)
    looped = {"expand_nodes": -1, "mask_tables": False}
    numeric = _leafwise_forest(20, 6, 8, rng)
    categorical, top = _categorical_leafwise(rng, 8)
    for forest, expected in ((numeric, leafbits.BYTE_WORD), (categorical, leafbits.NARROW_WORD)):
        prices = {bits: choose.half_register_ns(forest, bits) for bits in (leafbits.BYTE_WORD, leafbits.NARROW_WORD)}
        assert min(prices, key=prices.get) == expected == choose.narrow_word(forest, 16, avx2)
        assert choose.choose_form(forest, 16, BitvectorOptions(**looped))[0] == 16
        cf = _compile(forest, looped, rep="bitvector", batch_size=16, cpu=AVX2)
        assert f"lanes=16 words={expected}-bit" in cf.show("lir")
        factor = choose.vector_factor(forest, 16, BitvectorOptions(**looped), avx2)
        assert factor == pytest.approx(choose.ISA_FACTORS["avx2"] * prices[expected] / prices[leafbits.BYTE_WORD])
        assert BitvectorForm.cost(forest, "cpu", 16, looped, vectors=avx2) == \
            pytest.approx(BitvectorForm.cost(forest, "cpu", 16, looped) * factor)
        X = category_rows(forest, np.random.default_rng(9), 400, top)
        for n in (3, 16):
            for start in range(0, 400, 50):
                np.testing.assert_array_equal(cf.predict(X[start:start + n], output_margin=True),
                                              reference.predict(forest, X[start:start + n], output_margin=True))
    assert choose.vector_factor(categorical, 16, BitvectorOptions(**looped), avx2) < choose.ISA_FACTORS["avx2"]
    leaves = Forest(trees=[_full_tree(0) for _ in range(3)], num_features=6)  # no node to price
    assert choose.vector_factor(leaves, 16, BitvectorOptions(**looped, narrow=True), avx2) == choose.ISA_FACTORS["avx2"]


def test_avx2_prices_byte_word_blocks_by_their_own_factor():
    """The estimate for AVX2 code: the narrow form's 32-lane blocks of byte words at
    :data:`choose.NARROW_ISA_FACTORS` times the AVX-512 estimate, 16-lane blocks of numeric
    trees (half a register, byte words), forced 32-bit words and the float form at
    :data:`choose.ISA_FACTORS`; AVX-512 code at the estimate itself."""
    from silvanforge_rep_bitvector import BitvectorForm

    forest = _leafwise_forest(60, 5, 7, np.random.default_rng(5))
    nodes = {"mask_tables": False}
    avx2, avx512 = registry().vectors("cpu", AVX2), registry().vectors("cpu", "x86-64-v4")
    for rows, factors, options in ((4096, choose.NARROW_ISA_FACTORS, nodes), (16, choose.ISA_FACTORS, nodes),
                                   (4096, choose.ISA_FACTORS, {**nodes, "narrow_word": 32}),
                                   (4096, choose.ISA_FACTORS, {**nodes, "narrow": False})):
        if options.get("narrow") is None:  # (the float form expands most nodes over 8 lanes)
            assert choose.choose_form(forest, rows, BitvectorOptions(**options))[0] == (32 if rows == 4096 else 16)
        base = BitvectorForm.cost(forest, "cpu", rows, options)
        assert BitvectorForm.cost(forest, "cpu", rows, options, vectors=avx512) == base
        assert BitvectorForm.cost(forest, "cpu", rows, options, vectors=avx2) == pytest.approx(base * factors["avx2"])
    assert choose.NARROW_ISA_FACTORS["avx2"] < choose.ISA_FACTORS["avx2"]


@needs_avx2
@pytest.mark.parametrize("cpu", [AVX2, SSE])
@pytest.mark.parametrize("shape", ["looped", "expanded"])
@pytest.mark.parametrize("default_left", [True, False])
@pytest.mark.parametrize("depth", [3, 8])
def test_byte_words_find_every_leaf_as_avx2_and_sse_code(cpu, shape, depth, default_left):
    """AVX2 and SSE4.1 code of the narrow form (byte words): every leaf of an 8- or 256-leaf tree
    is found, whichever byte it is in (exit leaves up to 255, counted unsigned), rows at and
    beside every threshold, NaN going left or right; both node forms, 1 and 3 threads."""
    forest = Forest(trees=[_full_tree(depth, default_left)], num_features=6, base_score=np.array([0.5]))
    tree = forest.trees[0]
    thresholds = np.unique(tree.threshold[tree.left >= 0])
    rng = np.random.default_rng(depth)
    X = rng.choice(np.concatenate([thresholds, thresholds + 0.05]), size=(6000, 6))
    X[rng.random(X.shape) < 0.15] = -1.0
    X[rng.random(X.shape) < 0.15] = np.nan
    X[:20], X[20:40] = -1.0, 1e9  # the leftmost and rightmost leaves
    cf = _compile(forest, {"expand_nodes": 10**9 if shape == "expanded" else -1, "narrow": True, "narrow_word": 8},
                  rep="bitvector", cpu=cpu)
    assert f"words={leafbits.BYTE_WORD}-bit" in cf.show("lir") and f"{shape}=1" in cf.show("lir")
    for threads in (1, 3):
        got = cf.predict(X, output_margin=True, threads=threads)
        np.testing.assert_array_equal(got, reference.predict(forest, X, output_margin=True))
    # Leaf values are node ids, in preorder: a leaf's rank among them is its position from the left.
    position = np.searchsorted(np.flatnonzero(tree.left < 0), got - 0.5)
    assert set(position // 8) == set(range(2 ** depth // 8))  # every byte word held some exit leaf


@needs_avx2
@settings(max_examples=FORM_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=categorical_forests(), n=st.integers(1, 70), expand=st.booleans(), numeric=st.booleans(),
       word=st.sampled_from([leafbits.BYTE_WORD, leafbits.NARROW_WORD]), batch=st.sampled_from([None, 16]))
def test_narrow_words_equal_the_reference_as_avx2_code(drawn, n, expand, numeric, word, batch):
    """Random forests of one to four 64-bit words a tree (numeric only, or mostly categorical
    under every category rule), NaN, infinities, ties, as AVX2 code of the narrow form in byte
    and 32-bit words, in blocks of 32 lanes (a register of bytes) and 16 (half of one)."""
    forest, top = drawn
    if numeric:
        for t in forest.trees:
            t.categories.clear()
    cf = _compile(forest, {"expand_nodes": 10**9 if expand else -1, "narrow": True, "narrow_word": word},
                  rep="bitvector", cpu=AVX2, batch_size=batch)
    assert f"words={word}-bit" in cf.show("lir")
    X = category_rows(forest, np.random.default_rng(n), n, top)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_narrow_form_is_taken_for_wide_blocks_where_bins_fit():
    """Wide (looped) blocks take the narrow form; 8-lane blocks, features with more distinct
    thresholds than 16-bit bins hold, and bin tables past their limit keep the float form;
    the ``narrow`` option forces it for 8-lane blocks too, or refuses it."""
    rng = np.random.default_rng(2)
    trees = [_tree(rng, 5, (0,), 8, [int(Op.LT)], categorical=False, zero_missing=False) for _ in range(40)]
    forest = Forest(trees=trees, num_features=5)
    assert choose.narrow_form(forest, choose.WIDE_LANES)
    assert not choose.narrow_form(forest, choose.LANES)
    assert f"words={leafbits.NARROW_WORD}-bit" in _compile(forest, {"expand_nodes": -1}, rep="bitvector").show("lir")
    most = int(support.bin_counts(forest).max())
    fewer = {"expand_nodes": -1, "narrow_max_bins": 2 * most - 1}
    assert not choose.narrow_form(forest, choose.WIDE_LANES, BitvectorOptions(**fewer))
    assert f"words={leafbits.WORD}-bit" in _compile(forest, fewer, rep="bitvector").show("lir")
    small_table = {"expand_nodes": -1, "narrow_max_bin_bytes": 64}
    assert not choose.narrow_form(forest, choose.WIDE_LANES, BitvectorOptions(**small_table))
    assert f"words={leafbits.WORD}-bit" in _compile(forest, small_table, rep="bitvector").show("lir")
    assert choose.narrow_form(forest, choose.LANES, BitvectorOptions(narrow=True))
    assert not choose.narrow_form(forest, choose.WIDE_LANES, BitvectorOptions(narrow=False))


# ----------------------------------------------------------------------------- mask tables


def _leafwise_forest(trees: int, features: int, depth: int, rng, dtype="float64") -> Forest:
    built = []
    for k in range(trees):
        tree = _full_tree(depth, default_left=bool(k % 2))
        internal = np.flatnonzero(tree.left >= 0)
        tree.feature[internal] = rng.integers(0, features, len(internal))
        tree.threshold[internal] = np.round(rng.normal(size=len(internal)), 1)
        tree.op[internal] = rng.choice([int(Op.LT), int(Op.LE)], len(internal))
        tree.default_left[internal] = rng.random(len(internal)) < 0.5
        tree.leaf_value[:] = rng.normal(size=tree.leaf_value.shape)
        built.append(tree)
    return Forest(trees=built, num_features=features, threshold_dtype=dtype, accumulate_dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mask_table_keys_are_exact_on_every_threshold_and_its_neighbours(dtype):
    """Keys: ``<`` and ``<=`` splits at one value, infinite thresholds, both default directions,
    on rows at every threshold, the values next to it, +-inf, +-MAX and NaN."""
    rng = np.random.default_rng(12)
    values = np.array([-np.inf, -3.0, -0.0, 0.25, 1.0, 1e30, np.inf])
    forest = _leafwise_forest(12, 6, 5, rng, dtype)
    for tree in forest.trees:
        internal = np.flatnonzero(tree.left >= 0)
        tree.threshold[internal] = rng.choice(values, len(internal))
    t = np.dtype(dtype).type
    edges = np.concatenate([values.astype(dtype), np.nextafter(values.astype(dtype), t(np.inf)),
                            np.nextafter(values.astype(dtype), t(-np.inf)),
                            [np.finfo(dtype).max, -np.finfo(dtype).max, np.nan]]).astype(dtype)
    X = rng.choice(edges, size=(700, 6)).astype(dtype)
    cf = _compile(forest, {"mask_tables": True}, rep="bitvector")
    assert "form=mask-tables" in cf.show("lir")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))
    assert len(np.unique(cf.predict(X, output_margin=True))) > 20


@pytest.mark.parametrize("threads", [1, 3])
def test_mask_tables_over_several_blocks_and_outputs(threads):
    """Rows past one block (blocks made small), three outputs, every tree with 256 leaves."""
    rng = np.random.default_rng(13)
    forest = _leafwise_forest(9, 4, 8, rng)
    for k, tree in enumerate(forest.trees):
        tree.outputs = (k % 3,)
    forest.num_outputs = 3
    forest.base_score = np.array([0.5, -1.0, 2.0])
    X = rows_for(forest, rng, 1300)
    cf = _compile(forest, {"mask_tables": True, "block_rows": 256}, rep="bitvector")
    assert "block=256" in cf.show("lir")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                  reference.predict(forest, X, output_margin=True))


@pytest.mark.parametrize("every_feature", [True, False])
def test_mask_tables_key_columns_and_prefetched_rows(every_feature):
    """Trees that all read every feature take their key columns as constants, others load them
    a tree; calls shorter and longer than the rows that prefetch the next tree's tables (the
    row loop's two parts), over blocks of 256 rows."""
    rng = np.random.default_rng(16)
    forest = _leafwise_forest(6, 4, 8, rng)
    if not every_feature:  # one tree reads features 0 and 1 only
        internal = np.flatnonzero(forest.trees[2].left >= 0)
        forest.trees[2].feature[internal] = rng.integers(0, 2, len(internal))
    cf = _compile(forest, {"mask_tables": True, "block_rows": 256}, rep="bitvector")
    assert ("mt_feat" in cf.show("lir").split("predict_mask_tables", 1)[1]) is not every_feature
    for n in (3, 100, 700):
        X = rows_for(forest, rng, n)
        np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_mask_tables_are_chosen_for_large_trees_over_few_features():
    """The form goes where its cost says: 256-leaf trees over 4 features, not 32-leaf trees, not
    256-leaf trees over 40 features; never with too many outputs."""
    rng = np.random.default_rng(14)
    assert choose.mask_tables_form(_leafwise_forest(40, 4, 8, rng), 4096)
    assert not choose.mask_tables_form(_leafwise_forest(40, 4, 5, rng), 4096)
    assert not choose.mask_tables_form(_leafwise_forest(40, 40, 8, rng), 4096)
    # categorical splits have entries of their own (a mask a category)
    assert masktables.unsupported(_forest(category_rule=CategoryRule.LIGHTGBM, categorical=True)) is None
    many = _leafwise_forest(4, 4, 3, rng)
    many.num_outputs = 10000
    assert "too many" in masktables.unsupported(many)


def test_mask_tables_that_stay_in_cache_are_priced_for_calls_of_a_few_rows(monkeypatch):
    """Tables the last-level cache holds between calls (RESIDENT_TABLE_BYTES) cost a call a
    line an entry shared by its rows, not a missed line a row: cheaper than the node forms from
    64 rows on 256-leaf trees over few features; tables past the bound keep the missed lines'
    price (the node forms); a block's estimate is the same either way."""
    rng = np.random.default_rng(17)
    forest = _leafwise_forest(40, 4, 8, rng)
    shape = masktables._shape(forest)
    built = sum(a.nbytes for a in masktables.tables(forest).values())
    assert 0.8 * built <= shape.table_bytes <= 1.2 * built
    resident = {b: masktables.estimate_ns(forest, b) for b in (16, 64, 256, None)}
    assert resident[64] < choose.node_forms_ns(forest, 64)
    assert resident[None] < resident[256] < resident[64] < resident[16]
    monkeypatch.setattr(masktables, "RESIDENT_TABLE_BYTES", shape.table_bytes - 1)
    missed = {b: masktables.estimate_ns(forest, b) for b in (16, 64, 256, None)}
    assert missed[None] == resident[None]
    assert all(missed[b] > resident[b] for b in (16, 64, 256))
    assert missed[64] > choose.node_forms_ns(forest, 64)
    np.testing.assert_array_equal(masktables.tree_costs_ns(forest, None) > 0, True)
    assert (masktables.tree_costs_ns(forest, 64) > masktables.tree_costs_ns(forest, None)).all()


def test_mask_tables_as_avx2_code_are_priced_by_their_own_factor():
    """A 256-bit mask is one AVX2 register: the mask-table form's AVX2 factor is its own
    (MASK_TABLE_ISA_FACTORS), below the 32-bit node forms' (ISA_FACTORS)."""
    from silvanforge.plugins import registry

    avx2 = registry().vectors("cpu", "x86-64-v3")
    forest = _leafwise_forest(40, 4, 8, np.random.default_rng(18))
    assert choose.mask_tables_form(forest, None)
    tables = choose.vector_factor(forest, None, choose.DEFAULT, avx2)
    assert tables == choose.MASK_TABLE_ISA_FACTORS["avx2"] < choose.ISA_FACTORS["avx2"]
    nodes = choose.vector_factor(forest, None, dataclasses.replace(choose.DEFAULT, mask_tables=False), avx2)
    assert nodes != tables  # (the node forms' own)
    assert choose.vector_factor(forest, None, choose.DEFAULT, None) == 1.0
    # some trees on the tables, the rest on the node forms: each part's factor by its share
    rng = np.random.default_rng(15)
    deep, shallow = _leafwise_forest(20, 4, 8, rng), _leafwise_forest(20, 4, 1, rng)
    mixed = Forest(trees=deep.trees + shallow.trees, num_features=4)
    tabled = choose.tabled_trees(mixed, 4096)
    assert tabled.any() and not tabled.all()
    rest = choose.vector_factor(choose.some_trees(mixed, ~tabled), 4096, choose.DEFAULT, avx2)
    both = choose.vector_factor(mixed, 4096, choose.DEFAULT, avx2)
    assert min(tables, rest) < both < max(tables, rest)


def test_the_chooser_weighs_mask_tables_for_some_trees_only():
    """Deep trees over few features beside stumps: the chooser prices a mask-table phase for the
    deep ones and the node forms for the rest (the mixed choice), and lowers what it chose."""
    rng = np.random.default_rng(15)
    deep, shallow = _leafwise_forest(20, 4, 8, rng), _leafwise_forest(20, 4, 1, rng)
    forest = Forest(trees=deep.trees + shallow.trees, num_features=4)
    tabled, ns = choose.choice(forest, 4096)
    assert tabled.dtype == bool and len(tabled) == 40 and ns > 0
    assert not tabled[20:].any()
    X = rows_for(forest, rng, 64)
    cf = _compile(forest, {"mask_tables": None}, rep="bitvector")
    np.testing.assert_allclose(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True),
                               rtol=1e-12, atol=1e-12)


def test_leafwise_lightgbm_takes_mask_tables_and_agrees(tmp_path):
    """A leaf-wise LightGBM model of 255 leaves over 5 features (taxi-shaped, NaN in training
    and in the rows): the default compile takes the mask-table form, equal to the reference and
    to LightGBM's predictions."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(15)
    X = rng.normal(size=(20000, 5))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + np.abs(X[:, 3]) + 0.1 * rng.normal(size=len(X))
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train({"objective": "regression", "num_leaves": 255, "min_data_in_leaf": 5,
                         "verbose": -1, "seed": 1}, lgb.Dataset(X, y), 30)
    booster.save_model(tmp_path / "m.txt")
    cf = _compile(tmp_path / "m.txt", {"mask_tables": None}, batch_size=4096)
    assert cf.rep == "bitvector" and "form=mask-tables" in cf.show("lir")
    Xt = rng.normal(size=(3000, 5))
    Xt[rng.random(Xt.shape) < 0.1] = np.nan
    np.testing.assert_array_equal(cf.predict(Xt), reference.predict(cf.forest, Xt))
    np.testing.assert_allclose(cf.predict(Xt), booster.predict(Xt), rtol=1e-12, atol=1e-12)


def test_mask_tables_beside_node_forms_equal_the_reference_exactly():
    """The mixed form: some numeric trees by mask tables, the rest (categorical ones among them)
    by the node forms, every tree's leaf summed in model order; any split of the trees, the
    node trees expanded, looped or both, narrow or not.  Most draws must compile."""
    draws = Draws()

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(drawn=categorical_forests(), n=st.integers(1, 70), threads=st.sampled_from([1, 3]),
           seed=st.integers(0, 2**16), budget=st.sampled_from([-1, 40, 10**9]), narrow=st.booleans())
    def check(drawn, n, threads, seed, budget, narrow):
        outcome = _mask_tables_beside_node_forms(drawn, n, threads, seed, budget, narrow)
        draws.count(outcome)

    check()
    draws.assert_share("compiled", 0.5)


@needs_avx2
def test_mask_tables_beside_byte_word_node_forms_as_avx2_code():
    """The mixed form as AVX2 code, its node trees in byte words (narrow) or 64-bit ones."""
    draws = Draws()

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(drawn=categorical_forests(), n=st.integers(1, 70), seed=st.integers(0, 2**16),
           budget=st.sampled_from([-1, 40, 10**9]), narrow=st.booleans())
    def check(drawn, n, seed, budget, narrow):
        draws.count(_mask_tables_beside_node_forms(drawn, n, 1, seed, budget, narrow, cpu=AVX2))

    check()
    draws.assert_share("compiled", 0.5)


def _mask_tables_beside_node_forms(drawn, n, threads, seed, budget, narrow, cpu=None) -> str:
    forest, top = drawn
    rng = np.random.default_rng(seed)
    # Most drawn nodes are categorical, so numeric trees were rare and a filter on them rejected
    # most examples (Hypothesis's filter_too_much on some seeds): numeric trees are made here
    # instead.  A random half of the trees with splits loses its categories, at least one of
    # them; the tables sum (they never average), so the forest does too.
    forest = dataclasses.replace(forest, aggregation=Aggregation.SUM)
    split = np.flatnonzero([t.num_nodes > 1 for t in forest.trees])
    if not len(split):  # a forest of stumps only has nothing to table
        return "stumps only"
    plain = split[rng.random(len(split)) < 0.5]
    plain = plain if len(plain) else split[:1]
    trees = list(forest.trees)
    for k in plain.tolist():
        trees[k] = dataclasses.replace(trees[k], categories={})
    forest = dataclasses.replace(forest, trees=trees)
    tabled = np.zeros(forest.num_trees, bool)
    tabled[plain[rng.random(len(plain)) < 0.5]] = True
    tabled[plain[0]] = True
    if tabled.all() and forest.num_trees > 1:  # mixed: some tree by the node forms
        tabled[next(k for k in range(forest.num_trees) if k != plain[0])] = False
    # Trees the tables can run, as the chooser gives them: now rare to fail (too many thresholds)
    if masktables.unsupported(choose.some_trees(forest, tabled)) is not None:
        return "refused"
    cf = _compile(forest, {"expand_nodes": budget, "narrow": None if narrow else False,
                           "tabled_trees": ",".join(map(str, np.flatnonzero(tabled)))}, rep="bitvector", cpu=cpu)
    assert f"tabled={int(tabled.sum())}" in cf.show("lir") or tabled.all()
    X = category_rows(forest, np.random.default_rng(n), n, top)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                  reference.predict(forest, X, output_margin=True))
    return "compiled"


def test_mask_tables_with_a_feature_split_only_at_infinity_and_stumps():
    """A feature whose every split is ``<= +inf`` (no number goes right, NaN by its default)
    still has a key, NaN's; a stump among the trees exits at its only leaf."""
    rng = np.random.default_rng(16)
    forest = _leafwise_forest(6, 3, 4, rng)
    for tree in forest.trees:
        on = (tree.left >= 0) & (tree.feature == 2)
        tree.threshold[on], tree.op[on] = np.inf, int(Op.LE)
        tree.default_left[on] = rng.random(int(on.sum())) < 0.5
    assert any(((t.left >= 0) & (t.feature == 2)).any() for t in forest.trees)
    forest.trees.append(Tree(left=np.array([-1], np.int32), right=np.array([-1], np.int32),
                             feature=np.array([-1], np.int32), threshold=np.zeros(1), op=np.zeros(1, np.uint8),
                             default_left=np.zeros(1, bool), zero_missing=np.zeros(1, bool),
                             leaf_value=np.array([[0.75]]), outputs=(0,)))
    X = rows_for(forest, rng, 300)
    X[rng.random(X.shape) < 0.3] = np.nan
    cf = _compile(forest, {"mask_tables": True}, rep="bitvector")
    assert "form=mask-tables" in cf.show("lir")
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def _one_word_masks(first, last, word, bits):
    """A word's masks the plain way: the reference of the all-words computation."""
    lo, hi = np.maximum(first, word * bits), np.minimum(last, (word + 1) * bits)
    hit = lo < hi
    cleared = []
    for a, b in zip(lo[hit].tolist(), hi[hit].tolist()):
        ones = ((1 << (b - a)) - 1) << ((word + 1) * bits - b)
        value = ~ones & ((1 << bits) - 1)
        cleared.append(value - (1 << bits) if value >= 1 << (bits - 1) else value)
    return hit, np.array(cleared, np.int64)


@settings(max_examples=300, deadline=None)
@given(leaves=st.integers(1, 256), bits=st.sampled_from([64, 32, 16]), seed=st.integers(0, 2**16))
def test_left_masks_of_every_word_at_once_equal_a_word_at_a_time(leaves, bits, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 20))
    first = rng.integers(0, leaves, n)
    last = np.minimum(leaves, first + rng.integers(1, leaves + 1, n))
    words = -(-leaves // bits)
    hits, masks = leafbits.all_left_masks(first, last, words, bits)
    for w in range(words):
        hit, mask = _one_word_masks(first, last, w, bits)
        np.testing.assert_array_equal(hits[w], hit)
        np.testing.assert_array_equal(masks[w][hit], mask)


def test_mask_tables_beside_node_forms_agree_with_lightgbm(tmp_path):
    """A trained LightGBM model with a categorical feature some trees split on: its numeric
    trees by mask tables, the others by the node forms, equal to the reference and to
    LightGBM's raw scores and probabilities on rows with NaN and unseen categories."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(17)
    X = rng.normal(size=(6000, 4))
    X[:, 3] = rng.integers(0, 12, len(X))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.15 * np.isin(X[:, 3], [2, 5, 7]) + 0.3 * rng.normal(size=len(X)) > 0)
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train({"objective": "binary", "num_leaves": 15, "min_data_in_leaf": 5, "verbose": -1, "seed": 2,
                         "max_cat_to_onehot": 4, "cat_smooth": 1, "min_data_per_group": 5},
                        lgb.Dataset(X, y.astype(int), categorical_feature=[3]), 40)
    booster.save_model(tmp_path / "m.txt")
    forest = sf.load_model(tmp_path / "m.txt")
    numeric = np.array([not t.categories for t in forest.trees])
    assert numeric.any() and not numeric.all()
    cf = _compile(forest, {"tabled_trees": ",".join(map(str, np.flatnonzero(numeric)))}, rep="bitvector")
    assert f"tabled={int(numeric.sum())}" in cf.show("lir")
    Xt = rng.normal(size=(2000, 4))
    Xt[:, 3] = rng.integers(-2, 20, len(Xt))
    Xt[rng.random(Xt.shape) < 0.1] = np.nan
    np.testing.assert_array_equal(cf.predict(Xt, output_margin=True), reference.predict(forest, Xt, output_margin=True))
    np.testing.assert_allclose(cf.predict(Xt, output_margin=True), booster.predict(Xt, raw_score=True), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cf.predict(Xt), booster.predict(Xt), rtol=1e-12, atol=1e-15)


def test_leafwise_lightgbm_with_a_categorical_feature_takes_mask_tables_and_agrees(tmp_path):
    """Every tree of a leaf-wise 255-leaf model splits on a 30-level categorical feature (taxi
    with a pickup zone): the chooser takes the mask tables, whose categorical entries look a
    mask up by category; equal to the reference and to LightGBM on rows with NaN, negative,
    fractional, unseen and huge categories."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(18)
    X = rng.normal(size=(20000, 5))
    X[:, 4] = rng.integers(0, 30, len(X))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + rng.normal(0, 1, 30)[X[:, 4].astype(int)] + 0.1 * rng.normal(size=len(X))
    X[:, :4][rng.random((len(X), 4)) < 0.1] = np.nan
    booster = lgb.train({"objective": "regression", "num_leaves": 255, "min_data_in_leaf": 5, "verbose": -1,
                         "seed": 1, "max_cat_to_onehot": 4, "cat_smooth": 1, "min_data_per_group": 5},
                        lgb.Dataset(X, y, categorical_feature=[4]), 100)
    booster.save_model(tmp_path / "m.txt")
    cf = _compile(tmp_path / "m.txt", {"mask_tables": None}, batch_size=4096)
    assert cf.forest.has_categorical() and "form=mask-tables" in cf.show("lir")
    Xt = rng.normal(size=(3000, 5))
    Xt[:, 4] = rng.choice([-2.0, -0.5, 0.0, 3.0, 7.9, 29.0, 31.0, 2.0**31, np.nan], len(Xt))
    named = rng.random(len(Xt)) < 0.6
    Xt[named, 4] = rng.integers(0, 30, int(named.sum()))
    Xt[:, :4][rng.random((len(Xt), 4)) < 0.1] = np.nan
    np.testing.assert_array_equal(cf.predict(Xt), reference.predict(cf.forest, Xt))
    np.testing.assert_allclose(cf.predict(Xt), booster.predict(Xt), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cpu", [None, "x86-64-v3"])
def test_small_deep_float64_forests_take_wide_narrow_blocks_where_cheaper(cpu):
    """A forest whose nodes would nearly all be expanded over 8 lanes takes wide blocks of the
    narrow form (16-bit bins, looped nodes) where estimated cheaper: leaf-wise trees of 31
    leaves (lgb_taxi_100x31's shape, 1.6-2x faster so); exact with NaN, infinities and ties,
    AVX-512 and AVX2 code, 1 and 2 threads."""
    rng = np.random.default_rng(31)

    def leafwise(leaves=31):
        left, right, feature, threshold, depth = [-1], [-1], [-1], [0.0], [0]
        for _ in range(leaves - 1):
            at = [i for i in range(len(left)) if left[i] < 0]
            n = at[int(np.argmax([depth[i] + rng.random() for i in at]))]
            left[n], right[n], feature[n] = len(left), len(left) + 1, int(rng.integers(5))
            threshold[n] = float(rng.choice([-1.0, 0.0, 0.35, 1.0, 2.05]) + rng.integers(3))
            for _ in range(2):
                left.append(-1), right.append(-1), feature.append(-1), threshold.append(0.0), depth.append(depth[n] + 1)
        return Tree.from_nodes(np.array(left), np.array(right), np.array(feature), np.array(threshold),
                               rng.normal(size=(len(left), 1)), default_left=rng.random(len(left)) < 0.5)

    forest = Forest(trees=[leafwise() for _ in range(100)], num_features=5, threshold_dtype="float64",
                    accumulate_dtype="float64")
    lanes, expanded = choose.choose_form(forest)
    assert lanes == choose.WIDE_LANES and choose.narrow_form(forest, lanes)
    assert choose.choose_form(forest, options=BitvectorOptions(narrow=False))[0] == choose.LANES
    cf = sf.compile(forest, rep="bitvector", batch_size=256, cpu=cpu)
    assert f"lanes={choose.WIDE_LANES}" in cf.show("lir")
    X = np.random.default_rng(6).choice([np.nan, -1.0, 0.35, 1.0, 2.05, 3.5, 12.0, np.inf, -np.inf], size=(300, 5))
    for threads in (1, 2):
        np.testing.assert_array_equal(cf.predict(X, output_margin=True, threads=threads),
                                      reference.predict(forest, X, output_margin=True))

