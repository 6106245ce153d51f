"""Set columns: walks reading split rows decide each distinct category set of the categorical
splits as the row is split (one column a set, 0 in the set, 1 not), and those splits compare
the column with 0.5 (layout.split_row_sets): no categorical step is left in the walk.  Checked
against the reference evaluator on random forests (missing values going either way, categories
no split names, fractional, negative or past the rule's bounds, sets spanning several words)
for every representation, schedule family, band, tile size and vector walks, against LightGBM
and XGBoost on models trained here, and that the chooser and artifacts keep the choice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import categorical_forest, category_rows, labelled_frame, make_forest

import silvanforge as sf
from silvanforge.artifact import archive
from silvanforge.ir.hir import CategoryRule, Forest, Op, Tree
from silvanforge.lowering import walkcost
from silvanforge.lowering.walksetup import SPLIT_ROWS, SPLIT_TOPS, build_layout, set_columns, vector_walks
from silvanforge.lowering.layout import split_row_sets
from silvanforge.runtime import reference

pytestmark = pytest.mark.filterwarnings("ignore::silvanforge.ArtifactWarning")

SCHEDULES = ["interleaved", "default", "xgboost", "tree-parallel", "one-tree-at-a-time"]


def reads_set_columns(cf) -> bool:
    buffers = cf.lir_module.buffers
    return SPLIT_ROWS in buffers and "set_words" in buffers and SPLIT_TOPS not in buffers and "cat_bits" not in buffers


def _category_rows(forest: Forest, seed: int, n: int) -> np.ndarray:
    """The split rows' odd values (categories no split names, past the rules' bounds) and
    infinities and NaN, in a fifth of the values."""
    return category_rows(forest, seed, n, share=0.2, more=(np.inf, -np.inf, np.nan))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), features=st.integers(1, 12), rule=st.sampled_from(list(CategoryRule)),
       op=st.sampled_from([Op.LT, Op.LE]), dtype=st.sampled_from(["float32", "float64"]),
       rep=st.sampled_from(["sparse", "array", "reorg"]), schedule=st.sampled_from(SCHEDULES))
def test_set_columns_match_reference(seed, features, rule, op, dtype, rep, schedule):
    forest = categorical_forest(seed, features, rule, op, dtype)
    assume(forest.has_categorical())
    X = _category_rows(forest, seed, 200)
    with set_columns(True):
        cf = sf.compile(forest, rep=rep, schedule=schedule)
    assert reads_set_columns(cf) and cf.options.set_columns is True
    tol = 1e-5 if schedule == "tree-parallel" else 0
    for threads in (1, 2):
        np.testing.assert_allclose(cf.predict(X, output_margin=True, threads=threads),
                                   reference.predict(forest, X, output_margin=True), rtol=tol, atol=tol)


@settings(max_examples=7, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), features=st.integers(1, 10), rule=st.sampled_from(list(CategoryRule)),
       dtype=st.sampled_from(["float32", "float64"]))
def test_set_columns_in_every_band_tiled_vector_walks_and_leaf_ids(seed, features, rule, dtype):
    """The plan's forms at every request size, tiled walks and vector walks (which categorical
    forests take only through set columns), leaf ids and per-tree values."""
    forest = categorical_forest(seed, features, rule, Op.LE, dtype, trees=20)
    assume(forest.has_categorical())
    X = _category_rows(forest, seed, 300)
    want, leaves = reference.predict(forest, X, output_margin=True), reference.predict_leaf(forest, X)
    with set_columns(True):
        plan, tiled = sf.compile(forest), sf.compile(forest, tile_size=4)
        one = sf.compile(forest, batch_size=1, rep="sparse")
        with vector_walks(True):
            vector = sf.compile(forest, schedule="interleaved")
    assert all(map(reads_set_columns, (tiled, one, vector))) and vector.lir_module.info.get("vector_walk")
    for n in (1, 2, 3, 16, 17, 300):
        parts = range(0, len(X), n)
        for cf in (plan, tiled, one, vector):
            got = np.concatenate([cf.predict(X[i:i + n], output_margin=True) for i in parts])
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.concatenate([one.predict(X[i:i + n], pred_leaf=True) for i in parts]),
                                      leaves)
    np.testing.assert_allclose(one.predict(X, per_tree=True).sum(axis=1), want - forest.base_score[0], rtol=1e-5,
                               atol=1e-5)


def test_set_columns_of_trees_of_several_outputs():
    """Trees each feeding one of three outputs (float32, categorical splits under ``<``)."""
    forest = make_forest(num_outputs=3, dtype="float32", seed=3)
    assert forest.has_categorical()
    X = _category_rows(forest, 8, 200)
    want = reference.predict(forest, X, output_margin=True)
    with set_columns(True):
        one, plan = sf.compile(forest, batch_size=1, rep="sparse"), sf.compile(forest)
    assert reads_set_columns(one)
    for n in (1, 3, 200):
        for cf in (one, plan):
            got = np.concatenate([cf.predict(X[i:i + n], output_margin=True) for i in range(0, len(X), n)])
            np.testing.assert_array_equal(got, want)


def test_equal_sets_share_a_column_and_missing_directions_do_not():
    """Splits of one feature with the same categories and missing direction read one column;
    another feature's, or another direction's, reads its own."""
    def tree(feature, cats, default_left):
        return Tree.from_nodes([1, -1, -1], [2, -1, -1], [feature, -1, -1], [0.0, 0.0, 0.0], [0.0, 1.0, 2.0],
                               default_left=[default_left, False, False], categories={0: cats})
    trees = [tree(0, [1, 3], True), tree(0, [1, 3], True), tree(0, [1, 3], False), tree(1, [1, 3], True),
             tree(0, [2, 40], True)]
    forest = Forest(trees=trees, num_features=2, threshold_dtype="float64", accumulate_dtype="float64",
                    source="random")
    assert walkcost.category_sets(forest) == 4
    layout = build_layout(forest)
    split_row_sets(layout)
    sets = layout.set_columns
    assert sets.columns == 4 and sets.features.tolist() == [0, 1] and sets.counts.tolist() == [3, 1]
    columns = [int(t.feature[0]) - 2 * forest.num_features for t in layout.trees]
    assert columns[0] == columns[1] and len(set(columns)) == 4
    X = np.array([[1.0, 3.0], [np.nan, np.nan], [40.0, 2.0], [3.0, np.nan], [7.5, 1.0], [-1.0, 1.0]])
    with set_columns(True):
        cf = sf.compile(forest, batch_size=1, rep="sparse")
    assert reads_set_columns(cf)
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_the_chooser_takes_set_columns_where_sets_are_few_beside_the_steps(monkeypatch):
    forest = categorical_forest(11, 6, CategoryRule.LIGHTGBM, Op.LE, "float64", trees=30)
    sets, steps = walkcost.category_sets(forest), float(walkcost.depth_stats(forest)[1].sum())
    assert sets > 0
    monkeypatch.setattr(walkcost, "SET_COLUMNS_WALK_SHARE", 2 * sets / steps)
    assert walkcost.set_columns_pay(forest)
    cf = sf.compile(forest, batch_size=1, rep="sparse")
    assert reads_set_columns(cf) and cf.options.set_columns is None
    monkeypatch.setattr(walkcost, "SET_COLUMNS_WALK_SHARE", sets / steps / 2)
    assert not walkcost.set_columns_pay(forest)
    assert not reads_set_columns(sf.compile(forest, batch_size=1, rep="sparse"))


def test_walks_a_row_at_a_time_reading_set_columns_are_priced_by_their_steps_and_sets(monkeypatch):
    """Where walks of fewer than WALK_INTERLEAVED_ROWS rows read set columns, a categorical step
    costs a numeric one and each row's sets WALK_SET_NS a set (WALK_SET_NS_PAST_CACHE where the
    bitsets pass WALK_SET_CACHE_BYTES); elsewhere every step takes WALK_CATEGORICAL_FACTOR."""
    forest = categorical_forest(11, 6, CategoryRule.LIGHTGBM, Op.LE, "float64", trees=30)
    sets, words = walkcost._category_set_facts(forest)
    few = (1, walkcost.WALK_INTERLEAVED_ROWS - 1)

    def estimates(share):
        monkeypatch.setattr(walkcost, "SET_COLUMNS_WALK_SHARE", share)
        return [walkcost.walk_estimate_ns(forest, rows) for rows in few + (walkcost.WALK_INTERLEAVED_ROWS, None)]

    with_sets, without = estimates(1e9), estimates(0.0)  # (set columns pay, and do not)
    assert walkcost.split_rows_pay(forest) and sets > 0
    for got, general in zip(with_sets[:2], without[:2]):  # (one output, no linear leaves: the steps alone)
        assert got - sets * walkcost.WALK_SET_NS == pytest.approx(general / walkcost.WALK_CATEGORICAL_FACTOR)
    assert with_sets[2:] == without[2:]
    monkeypatch.setattr(walkcost, "SET_COLUMNS_WALK_SHARE", 1e9)
    monkeypatch.setattr(walkcost, "WALK_SET_CACHE_BYTES", 4 * words - 1)
    assert walkcost.walk_estimate_ns(forest, 1) - with_sets[0] == pytest.approx(
        sets * (walkcost.WALK_SET_NS_PAST_CACHE - walkcost.WALK_SET_NS))
    # rows too wide for split rows (the walks' setup may not split them): the general factor
    wide = categorical_forest(11, 400, CategoryRule.LIGHTGBM, Op.LE, "float64", trees=3)
    assert not walkcost.split_rows_pay(wide) and walkcost.split_rows_pay(wide, check_width=False)
    plain = (walkcost.WALK_EXIT_STEP_NS if walkcost.walks_exit_early(wide)[0] else walkcost.WALK_STEP_NS) \
        + walkcost.row_step_ns(wide, 1)
    steps = walkcost.depth_stats(wide)[1 if walkcost.walks_exit_early(wide)[0] else 0].sum()
    assert walkcost.walk_estimate_ns(wide, 1) == pytest.approx(plain * steps * walkcost.WALK_CATEGORICAL_FACTOR)


@pytest.mark.parametrize("trust", [True, False])
def test_the_choice_is_recorded_and_lowered_again(tmp_path, trust):
    forest = categorical_forest(5, 5, CategoryRule.LIGHTGBM, Op.LE, "float64", trees=10)
    with set_columns(True):
        cf = sf.compile(forest, batch_size=1, rep="sparse")
    with set_columns(False):
        bits = sf.compile(forest, batch_size=1, rep="sparse")
    assert reads_set_columns(cf) and not reads_set_columns(bits) and cf.show("lir") != bits.show("lir")
    assert cf.summary()["set_columns"] is True
    cf.save(tmp_path / "m.forge")
    assert archive.read(tmp_path / "m.forge").meta["set_columns"] is True
    back = sf.load_compiled(tmp_path / "m.forge", trust_code=trust)
    assert back.options.set_columns is True and back.show("lir") == cf.show("lir")
    X = _category_rows(forest, 2, 50)
    np.testing.assert_array_equal(back.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


def test_lightgbm_and_xgboost_categorical_models_read_set_columns_exactly():
    """Models trained here with pandas categories (NaN, unseen categories in the rows): one row
    at a time and in batches, against the libraries' own predictions."""
    pytest.importorskip("pandas")
    lgb = pytest.importorskip("lightgbm")
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(4)
    n = 1500
    frame = labelled_frame(rng, n, {"a": "normal", "b": 40, "c": 7, "d": "normal"})
    frame.loc[rng.random(n) < 0.1, "b"] = np.nan
    frame.loc[rng.random(n) < 0.1, "a"] = np.nan
    y = frame["b"].cat.codes % 5 + (frame["c"].cat.codes == 2) * 3 + frame["a"].fillna(0) + rng.normal(size=n) * 0.1
    test = frame.sample(200, random_state=1).reset_index(drop=True)
    booster = lgb.train({"objective": "regression", "num_leaves": 31, "verbose": -1, "min_data_per_group": 5,
                         "cat_smooth": 1}, lgb.Dataset(frame, y), num_boost_round=30)
    xgbm = xgb.XGBRegressor(n_estimators=30, max_depth=5, enable_categorical=True, tree_method="hist",
                            max_cat_to_onehot=1).fit(frame, y)
    for model, want in ((booster, booster.predict(test)), (xgbm, xgbm.predict(test))):
        with set_columns(True):
            cf = sf.compile(model, batch_size=1, rep="sparse")
        assert reads_set_columns(cf)
        got = np.concatenate([cf.predict(test.iloc[i:i + 1]) for i in range(len(test))])
        tol = 1e-12 if model is booster else 1e-5
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        np.testing.assert_allclose(cf.predict(test), want, rtol=tol, atol=tol)
