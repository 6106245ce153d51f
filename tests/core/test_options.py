"""Compile options: one frozen CompileOptions decides the program; the context managers
and SILVANFORGE_VECTOR_WALK are resolved into it once, at compile, and the artifact records it,
so a model loaded and lowered again gets the same program, wherever it is loaded."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import numpy as np
import pytest
from strategies import _tree, rows_for

import silvanforge as sf
from silvanforge import ArtifactError, InputError, cli
from silvanforge.artifact import archive, store
from silvanforge.ir.hir import Forest, Op
from silvanforge.lowering.walksetup import SPLIT_ROWS, leaf_self_loops, node_widths, split_rows, vector_walks
from silvanforge.options import LOWERING_FIELDS, CompileOptions
from silvanforge.runtime import reference

# Artifacts loaded here without a key are lowered again, which is what these tests look at.
pytestmark = pytest.mark.filterwarnings("ignore::silvanforge.ArtifactWarning")


@pytest.fixture
def forest():
    rng = np.random.default_rng(3)
    trees = [_tree(rng, 6, (0,), d, [int(Op.LT)], categorical=False, zero_missing=False) for d in (3, 5, 6, 2, 6)]
    return Forest(trees=trees, num_features=6)


def _lowered_again(cf, tmp_path, **load):
    cf.save(tmp_path / "m.forge")
    return sf.load_compiled(tmp_path / "m.forge", **load)


def test_options_are_frozen_and_checked():
    opts = CompileOptions(rep="sparse", vector_walks=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.vector_walks = False
    assert CompileOptions(feature_width=np.int32).feature_width == "int32"
    with pytest.raises(InputError):
        CompileOptions(index_width="int64")
    with pytest.raises(InputError):
        CompileOptions(split_rows=1)
    with pytest.raises(InputError):
        sf.compile(Forest(trees=[], num_features=1), options={"rep": "sparse"})


@pytest.mark.parametrize("trust", [False, True])
def test_a_context_manager_is_recorded_and_honoured_on_reload(forest, tmp_path, trust):
    """Vector walks forced by the context manager: the compiled model's options and its
    artifact say so, and the artifact lowered again (outside the block) is the same program."""
    with vector_walks(True):
        cf = sf.compile(forest, schedule="interleaved")
    plain = sf.compile(forest, schedule="interleaved")
    # left open, the value the walks used is recorded: the default
    assert cf.options.vector_walks is True and plain.options.vector_walks is False
    assert cf.show("lir") != plain.show("lir")  # the knob changes the program
    cf.save(tmp_path / "m.forge")
    assert archive.read(tmp_path / "m.forge").meta["vector_walks"] is True
    back = sf.load_compiled(tmp_path / "m.forge", trust_code=trust)
    assert back.options.lowering() == cf.options.lowering() and back.options.rep == cf.options.rep
    assert back.options.schedule.to_text() == cf.schedule.to_text()
    assert back.show("lir") == cf.show("lir")
    X = rows_for(forest, np.random.default_rng(0), 100)
    np.testing.assert_array_equal(back.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))


@pytest.mark.parametrize("block, field, value", [
    (lambda: split_rows(False), "split_rows", False),
    (lambda: leaf_self_loops(False), "leaf_self_loops", False),
    (lambda: node_widths(feature="int32", index="int32"), "index_width", "int32"),
    (lambda: node_widths(inline_leaves=False, packed_default_left=False), "packed_default_left", False),
])
def test_every_knob_is_recorded(forest, tmp_path, block, field, value):
    with block():
        cf = sf.compile(forest, rep="sparse", schedule="interleaved", pad=False)
    assert getattr(cf.options, field) == value and cf.summary()[field] == value
    back = _lowered_again(cf, tmp_path)
    assert getattr(back.options, field) == value
    assert back.show("lir") == cf.show("lir") != sf.compile(forest, rep="sparse", schedule="interleaved",
                                                             pad=False).show("lir")


def test_the_environment_variable_is_read_once_at_compile(forest, tmp_path, monkeypatch):
    monkeypatch.setenv("SILVANFORGE_VECTOR_WALK", "1")
    cf = sf.compile(forest, schedule="interleaved")
    assert cf.options.vector_walks is True
    cf.save(tmp_path / "m.forge")
    monkeypatch.setenv("SILVANFORGE_VECTOR_WALK", "0")
    back = sf.load_compiled(tmp_path / "m.forge")
    assert back.options.vector_walks is True and back.show("lir") == cf.show("lir")
    # Given in the options, a knob wins over the environment.
    assert sf.compile(forest, schedule="interleaved", options=CompileOptions(vector_walks=True)).show("lir") \
        == cf.show("lir")


def test_options_object_and_keywords(forest):
    """compile/lower/show take one CompileOptions; keyword arguments given besides replace its fields."""
    opts = CompileOptions(rep="array", schedule="interleaved", split_rows=False)
    cf = sf.compile(forest, options=opts)
    with split_rows(False):
        same = sf.compile(forest, rep="array", schedule="interleaved")
    assert cf.show("lir") == same.show("lir") and SPLIT_ROWS not in cf.lir_module.buffers
    assert sf.show(forest, "lir", options=opts) == cf.show("lir")
    assert sf.lower(forest, options=opts).options.split_rows is False
    assert sf.compile(forest, rep="sparse", options=opts).rep == "sparse"
    assert cf.options.rep == "array" and cf.options.schedule.to_text() == cf.schedule.to_text()


def test_forge_show_and_compile_print_the_options(forest, tmp_path, capsys):
    with split_rows(False):
        cf = sf.compile(forest, rep="sparse", schedule="interleaved")
    cf.save(tmp_path / "m.forge")
    code = cli.main(["show", str(tmp_path / "m.forge"), "--level", "lir"])
    out, err = capsys.readouterr()
    assert code == 0 and out.rstrip("\n") == cf.show("lir").rstrip("\n")
    line = [ln for ln in err.splitlines() if ln.startswith("options:")]
    assert line and "rep=sparse" in line[0] and "split_rows=False" in line[0] and "interleave" in line[0]
    code = cli.main(["compile", str(tmp_path / "m.forge")])
    out, _ = capsys.readouterr()
    assert code == 0 and "split rows" in out


def test_forge_show_of_a_model_file_prints_the_resolved_options(tmp_path, capsys, monkeypatch):
    import xgboost as xgb

    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4))
    xgb.train({"max_depth": 3}, xgb.DMatrix(X, X[:, 0] > 0), 4).save_model(tmp_path / "m.json")
    monkeypatch.setenv("SILVANFORGE_VECTOR_WALK", "1")
    code = cli.main(["show", str(tmp_path / "m.json"), "--level", "mir", "--rep", "sparse"])
    _, err = capsys.readouterr()
    assert code == 0 and "vector_walks=True" in err and "target=cpu" in err


def test_artifacts_saved_before_the_options_load(forest, tmp_path):
    """An artifact without the lowering fields (saved before them) loads with None (the
    defaults); a damaged width is refused."""
    cf = sf.compile(forest, schedule="interleaved")
    meta, arrays, blob, extra = store._parts(cf)
    old = {k: v for k, v in meta.items() if k not in LOWERING_FIELDS}
    archive.write(tmp_path / "old.forge", old, arrays, blob, extra)
    with zipfile.ZipFile(tmp_path / "old.forge") as z:
        assert "vector_walks" not in json.loads(z.read("meta.json"))
    back = sf.load_compiled(tmp_path / "old.forge")
    lowering = back.options.lowering()
    # lowered again with the defaults: the chooser's (None), vector walks as the walks used them
    assert lowering.pop("vector_walks") is False and all(v is None for v in lowering.values())
    assert back.show("lir") == cf.show("lir")
    archive.write(tmp_path / "bad.forge", {**meta, "feature_width": "int64"}, arrays, blob, extra)
    with pytest.raises(ArtifactError, match="feature_width"):
        sf.load_compiled(tmp_path / "bad.forge")
    archive.write(tmp_path / "bad2.forge", {**meta, "vector_walks": 1}, arrays, blob, extra)
    with pytest.raises(ArtifactError, match="vector_walks"):
        sf.load_compiled(tmp_path / "bad2.forge")


def test_a_target_lowering_gets_the_options(forest):
    """The GPU targets' own lowering (their target's ``lower``) honours the node widths too."""
    with node_widths(feature="int32"):
        wide = sf.show(forest, "lir", target="cuda")
    assert wide != sf.show(forest, "lir", target="cuda")
    assert wide == sf.show(forest, "lir", target="cuda", options=CompileOptions(feature_width="int32"))


def test_representation_options_are_recorded_and_lowered_again_alike(forest, tmp_path, capsys):
    """A representation's own options (``rep_options``) reach it, decide its program, and are
    recorded: the compiled model's options, meta.json, ``forge show``; a load lowers the same
    program again."""
    looped = CompileOptions(rep="bitvector", rep_options={"expand_nodes": -1, "mask_tables": False})
    cf = sf.compile(forest, options=looped)
    assert f"looped={forest.num_trees}" in cf.show("lir")
    assert "expanded=0" in cf.show("lir")
    assert cf.options.rep_options == {"expand_nodes": -1, "mask_tables": False}
    expanded = sf.compile(forest, rep="bitvector", options=CompileOptions(rep_options={"mask_tables": False}))
    assert f"expanded={forest.num_trees}" in expanded.show("lir")
    cf.save(tmp_path / "m.forge")
    assert archive.read(tmp_path / "m.forge").meta["rep_options"] == {"expand_nodes": -1, "mask_tables": False}
    back = sf.load_compiled(tmp_path / "m.forge")
    assert back.options.rep_options == cf.options.rep_options and back.show("lir") == cf.show("lir")
    assert "expand_nodes=-1" in cf.options.describe() and "mask_tables=False" in cf.options.describe()
    code = cli.main(["show", str(tmp_path / "m.forge"), "--level", "lir"])
    assert code == 0 and "expand_nodes=-1" in capsys.readouterr().err


def test_representation_options_steer_the_default_choice(forest):
    """``auto_choose`` off leaves the bitvector representation to be asked for by name."""
    chosen = sf.compile(forest)
    walked = sf.compile(forest, options=CompileOptions(rep_options={"auto_choose": False}))
    assert walked.rep != "bitvector" and walked.options.rep_options == {"auto_choose": False}
    X = rows_for(forest, np.random.default_rng(2), 50)
    np.testing.assert_array_equal(chosen.predict(X, output_margin=True), walked.predict(X, output_margin=True))


@pytest.mark.parametrize("given, error", [
    ({"no_such_option": 1}, "no installed representation takes the option 'no_such_option'"),
    ({"expand_nodes": "many"}, "expand_nodes must be an integer"),
    ({"mask_tables": 1}, "mask_tables must be True or False or None"),
    ({"block_rows": 300}, "block_rows must be a power of two"),
    ({"auto_choose": [True]}, "must be a bool, number, string or None"),
    ({"narrow": "yes"}, "narrow must be True or False or None"),
    ({"narrow_max_bin_bytes": -1}, "narrow_max_bin_bytes must be 0 or more"),
    ({"tabled_trees": 3}, "tabled_trees must be tree indices separated by commas"),
    ({"tabled_trees": "0,x"}, "tabled_trees must be tree indices separated by commas"),
    ({"tabled_trees": "1,1"}, "tabled_trees names a tree twice"),
    ({"tabled_trees": "0", "mask_tables": True}, "mask_tables and tabled_trees both choose"),
    ({"tabled_trees": "100000"}, "tabled_trees names tree 100000; the forest has"),
    ({"oblivious_span_rows": 0}, "oblivious_span_rows must be a positive integer"),
    ({"oblivious_chunk_bytes": 1.5}, "oblivious_chunk_bytes must be a positive integer"),
])
def test_bad_representation_options_are_refused_by_name(forest, given, error):
    with pytest.raises(InputError, match=error):
        sf.compile(forest, options=CompileOptions(rep_options=given))


def test_representation_options_are_frozen_and_compare_as_mappings():
    opts = CompileOptions(rep_options={"b": 1, "a": None})
    assert list(opts.rep_options) == ["a", "b"] and opts.rep_options == {"a": None, "b": 1}
    with pytest.raises(TypeError):
        opts.rep_options["a"] = 2
    assert hash(opts.rep_options) == hash(CompileOptions(rep_options={"a": None, "b": 1}).rep_options)
    assert CompileOptions().rep_options == {} and not CompileOptions().describe()


def test_the_plan_bar_is_an_option_recorded_with_the_others(tmp_path):
    """``plan_min_ns`` decides how many forms an untuned compile builds (0: a form for each
    band, even for a model this cheap); it is recorded like the other options and checked."""
    rng = np.random.default_rng(8)
    forest = Forest(trees=[_tree(rng, 4, (0,), 3, [int(Op.LT)], categorical=False, zero_missing=False)
                           for _ in range(3)], num_features=4)
    assert len(sf.compile(forest).bands) == 1  # too cheap for a second form by default
    cf = sf.compile(forest, options=CompileOptions(plan_min_ns=0))
    assert len(cf.bands) > 1 and cf.options.plan_min_ns == 0.0
    assert "plan_min_ns=0.0" in cf.options.describe() and cf.summary()["plan_min_ns"] == 0.0
    cf.save(tmp_path / "m.forge")
    assert archive.read(tmp_path / "m.forge").meta["plan_min_ns"] == 0.0
    back = sf.load_compiled(tmp_path / "m.forge")
    assert back.options.plan_min_ns == 0.0 and back.bands == cf.bands
    for bad in (-1, True, "200", float("nan")):
        with pytest.raises(InputError, match="plan_min_ns must be a number of ns"):
            CompileOptions(plan_min_ns=bad)
