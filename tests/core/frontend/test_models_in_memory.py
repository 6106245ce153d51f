"""compile / load_model take what users hold: boosters and fitted estimators, ModelProtos, the
bytes of a model file, paths as str or Path, compiled artifacts; and say clearly what they
cannot read."""

from __future__ import annotations

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import ModelFormatError, ScheduleError, UnsupportedModelError

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")


def _same(got, expected):
    """The library's output to the last bit, but for LightGBM's sigmoid (1 ulp: C's exp against
    NumPy's; a wrong prediction is far off)."""
    np.testing.assert_allclose(got, np.asarray(expected, dtype=np.asarray(got).dtype), rtol=1e-12, atol=0)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    X = rng.normal(size=(500, 6))
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 2]) * 0.5 > 0).astype(int)
    return X, y


def test_xgboost_booster_and_estimators(data):
    X, y = data
    clf = xgb.XGBClassifier(n_estimators=15, max_depth=3).fit(X, y)
    reg = xgb.XGBRegressor(n_estimators=15, max_depth=3).fit(X, np.nan_to_num(X[:, 1]))
    _same(sf.compile(clf).predict(X), clf.predict_proba(X)[:, 1])
    _same(sf.compile(clf.get_booster()).predict(X),
                                  clf.get_booster().predict(xgb.DMatrix(X)))
    _same(sf.compile(reg).predict(X), reg.predict(X))
    assert sf.compile(clf).classes_ == [0, 1]


def test_lightgbm_booster_and_estimators_with_string_labels(data):
    X, y = data
    labels = np.array(["no", "yes"])[y]
    clf = lgb.LGBMClassifier(n_estimators=15, verbose=-1).fit(X, labels)
    reg = lgb.LGBMRegressor(n_estimators=15, verbose=-1).fit(X, np.nan_to_num(X[:, 1]))
    cf = sf.compile(clf)
    assert cf.classes_ == ["no", "yes"]
    _same(cf.predict(X), clf.predict_proba(X)[:, 1])
    _same(sf.compile(clf.booster_).predict(X), clf.booster_.predict(X))
    _same(sf.compile(reg).predict(X), reg.predict(X))


def test_an_xgboost_estimators_missing_value_is_the_default(data, tmp_path):
    """XGBRegressor/XGBClassifier(missing=-999) read -999 as missing in predict: so does the
    compiled model, through silvanforge.sklearn, an artifact and a pickle; missing= given to
    predict still decides (NaN: -999 is a number again, as a booster's DMatrix reads it)."""
    import pickle

    import silvanforge.sklearn as sfs

    X, y = data
    X = np.where(np.isnan(X), -999.0, X).astype(np.float32)
    reg = xgb.XGBRegressor(n_estimators=10, max_depth=4, missing=-999).fit(X, np.where(X[:, 1] == -999, 5, X[:, 1]))
    clf = xgb.XGBClassifier(n_estimators=10, max_depth=3, missing=-999).fit(X, y)
    cf = sf.compile(reg)
    assert cf.forest.missing == -999.0
    _same(cf.predict(X), reg.predict(X))
    _same(cf.predict(X, output_margin=True), reg.predict(X, output_margin=True))
    np.testing.assert_array_equal(sfs.compile(clf).predict(X), clf.predict(X))
    cf.save(tmp_path / "m.forge")
    for back in (sf.load_compiled(tmp_path / "m.forge", trust_code=True), pickle.loads(pickle.dumps(cf))):
        _same(back.predict(X), reg.predict(X))
    booster = reg.get_booster()
    _same(cf.predict(X, missing=np.nan), booster.predict(xgb.DMatrix(X, missing=np.nan)))
    np.testing.assert_array_equal(cf.predict(X, pred_leaf=True), booster.predict(xgb.DMatrix(X, missing=-999),
                                                                                  pred_leaf=True))
    assert sf.compile(booster).forest.missing is None  # (a booster's missing is its DMatrix's)


def test_early_stopped_estimators_predict_to_their_best_iteration(data):
    X, y = data
    rng = np.random.default_rng(3)
    noisy = np.where(rng.random(len(y)) < 0.3, 1 - y, y)  # overfits soon: stops early
    xclf = xgb.XGBClassifier(n_estimators=200, max_depth=6, learning_rate=0.5, early_stopping_rounds=3)
    xclf.fit(X[:300], noisy[:300], eval_set=[(X[300:], noisy[300:])], verbose=False)
    assert xclf.best_iteration < 199
    _same(sf.compile(xclf).predict(X), xclf.predict_proba(X)[:, 1])
    lclf = lgb.LGBMClassifier(n_estimators=200, learning_rate=0.5, verbose=-1)
    lclf.fit(X[:300], noisy[:300], eval_set=[(X[300:], noisy[300:])],
             callbacks=[lgb.early_stopping(3, verbose=False)])
    assert lclf.best_iteration_ < 200
    _same(sf.compile(lclf).predict(X), lclf.predict_proba(X)[:, 1])


def test_bytes_of_every_format_and_paths(data, tmp_path):
    X, y = data
    clf = xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y)
    expected = clf.predict_proba(X)[:, 1]
    booster = clf.get_booster()
    for raw in (booster.save_raw("json"), booster.save_raw("ubj")):
        _same(sf.compile(bytes(raw)).predict(X), expected)
    lclf = lgb.LGBMClassifier(n_estimators=10, verbose=-1).fit(X, y)
    text = lclf.booster_.model_to_string().encode()
    _same(sf.compile(text).predict(X), lclf.predict_proba(X)[:, 1])
    _same(sf.compile(bytearray(text)).predict(X), lclf.predict_proba(X)[:, 1])
    path = tmp_path / "model.json"
    booster.save_model(str(path))
    for model in (path, str(path)):
        _same(sf.compile(model).predict(X), expected)


def test_onnx_model_proto(data):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestRegressor

    X, _ = data
    Xf = np.nan_to_num(X).astype(np.float32)
    rf = RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0).fit(Xf, Xf[:, 0])
    proto = skl2onnx.convert_sklearn(rf, initial_types=[("X", skl2onnx.common.data_types.FloatTensorType([None, 6]))])
    assert isinstance(proto, onnx.ModelProto)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"X": Xf})[0]
    # (bit-exactness against onnxruntime is tests/plugins/importers/onnx/test_import_onnx.py's;
    # here: the same model)
    got = sf.compile(proto).predict(Xf)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-6)
    np.testing.assert_array_equal(sf.compile(proto.SerializeToString()).predict(Xf), got)


def test_artifacts_compile_and_load_as_models(data, tmp_path):
    X, y = data
    clf = xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y)
    cf = sf.compile(clf)
    cf.save(tmp_path / "m.forge")
    forest = sf.load_model(tmp_path / "m.forge")
    assert forest.fingerprint() == cf.forest.fingerprint() and forest.class_labels == [0, 1]
    again = sf.compile(str(tmp_path / "m.forge"), rep="sparse")
    assert again.rep == "sparse"
    _same(again.predict(X), clf.predict_proba(X)[:, 1])
    from_bytes = sf.load_model((tmp_path / "m.forge").read_bytes())
    assert from_bytes.fingerprint() == cf.forest.fingerprint()


def test_schedule_as_a_path_or_a_file_name(data, tmp_path):
    X, y = data
    clf = xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y)
    sched = tmp_path / "s.txt"
    text = "tile(batch, b0, b1, 32)\nparallel(b0)\n"
    sched.write_text(text, encoding="utf-8")
    baseline = sf.compile(clf, schedule=text)
    for given in (sched, str(sched)):
        cf = sf.compile(clf, schedule=given)
        assert cf.schedule.to_text() == baseline.schedule.to_text()
        _same(cf.predict(X), clf.predict_proba(X)[:, 1])
    bad = tmp_path / "bad.txt"
    bad.write_text("no such directive(q)\n", encoding="utf-8")
    with pytest.raises(ScheduleError, match="bad.txt"):
        sf.compile(clf, schedule=bad)


def test_what_cannot_be_read_is_said_without_echoing_it(tmp_path):
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        sf.compile(xgb.XGBClassifier())
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        sf.compile(lgb.LGBMRegressor())
    with pytest.raises(ModelFormatError, match="cannot read a model from builtins.dict") as info:
        sf.compile({"learner": "x" * 5000})
    assert len(str(info.value)) < 400
    with pytest.raises(ModelFormatError, match="cannot read a model from bytes") as info:
        sf.compile(b"\x00\x01" * 5000)
    assert len(str(info.value)) < 400
    text = "tree\nversion=v4\n" + "x" * 5000  # model text given as str: taken as a path
    with pytest.raises(ModelFormatError, match="pass the model's contents as bytes") as info:
        sf.compile(text)
    assert len(str(info.value)) < 400
    with pytest.raises(ModelFormatError, match="empty"):
        sf.compile(b"")
    with pytest.raises(sf.InputError, match="fmt names the format of a model file"):
        sf.load_model(b"{}", fmt="xgboost-json")


def test_dir_lists_the_api():
    names = dir(sf)
    for name in ("compile", "load_compiled", "load_model", "CompiledForest", "profile"):
        assert name in names


def test_directories_and_pickles_get_a_hint(tmp_path, data):
    X, y = data
    with pytest.raises(ModelFormatError, match="is a directory"):
        sf.compile(tmp_path)
    import pickle

    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(xgb.XGBClassifier(n_estimators=2).fit(X, y)))
    with pytest.raises(ModelFormatError, match="looks like a pickle"):
        sf.compile(path)


def test_a_library_model_without_its_importer_names_the_install(monkeypatch):
    """A model of a library whose importer is not installed is no 'unsupported model': the
    error names the extra to install."""
    from silvanforge.frontend import loading

    real = loading.registry()

    class WithoutXGBoost:  # the registry as an install without silvanforge-importer-xgboost sees it
        hook = type("Hook", (), {"silvanforge_import_object": staticmethod(lambda obj: None)})()
        pm = type("PM", (), {"list_name_plugin": staticmethod(
            lambda: [(n, p) for n, p in real.pm.list_name_plugin() if n != "silvanforge.importers:xgboost"])})()
        formats = real.formats
    monkeypatch.setattr(loading, "registry", lambda: WithoutXGBoost())
    X = np.random.default_rng(0).normal(size=(40, 3))
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, X[:, 0]), 2)
    with pytest.raises(ModelFormatError, match=r'needs SilvanForge.s xgboost importer: pip install "silvanforge\[xgboost\]"'):
        sf.load_model(booster)
    with pytest.raises(UnsupportedModelError, match="LGBMRegressor is not a model SilvanForge compiles"):
        sf.load_model(lgb.LGBMRegressor(n_estimators=2, verbose=-1).fit(X, X[:, 0]))  # (importer installed, object not read)


def test_save_and_load_take_file_objects_and_name_what_is_wrong(data, tmp_path):
    """save writes to a file object, load_compiled reads one; a missing folder, a folder as the
    file, a compiled model given to load_compiled are one InputError each (were OSErrors naming
    a temporary file, TypeErrors); sf.compile of a compiled model compiles its model again."""
    import io

    X, y = data
    cf = sf.compile(xgb.XGBClassifier(n_estimators=5, max_depth=3).fit(X, y))
    out = io.BytesIO()
    cf.save(out)
    with open(tmp_path / "m.forge", "wb") as f:
        cf.save(f)
    for source in (io.BytesIO(out.getvalue()), open(tmp_path / "m.forge", "rb")):
        with source:
            _same(sf.load_compiled(source, trust_code=True).predict(X), cf.predict(X))
    for where, message in ((tmp_path / "no" / "m.forge", "folder .* does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(sf.InputError, match=message):
            cf.save(where)
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(sf.InputError, match="compiled model already"):
        sf.load_compiled(cf)
    with pytest.raises(sf.InputError, match="got int"):
        sf.load_compiled(3)
    again = sf.compile(cf, threads=1)
    assert again.options.threads == 1
    _same(again.predict(X), cf.predict(X))
