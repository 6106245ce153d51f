"""``forge bench --output leaf|contribs``: leaf indices (``predict(X, pred_leaf=True)``) or SHAP
contributions (``pred_contribs=True``) against the model's library (XGBoost ``pred_leaf`` /
``pred_contribs``, LightGBM ``pred_leaf`` / ``pred_contrib``, CatBoost ``calc_leaf_indexes`` /
``ShapValues``) and, for contributions, ``shap.TreeExplainer`` and ``fasttreeshap`` where
installed and able to read the model.

Timed as ``forge bench`` times predictions (:mod:`.bench`: the same random rows, rotated batches,
best of ``repeat`` runs of at least ``min_time``), into the same report; each peer's answer on
the largest batch is compared with ours first (leaf ids: equal; contributions: within 1e-4 of
the largest, the bias column left out for shap and fasttreeshap, which return it apart).
Explainers are built before timing (their set-up is not in the times)."""

from __future__ import annotations

import time

import numpy as np

from .bench_peers import PeerUnavailable, time_call
from .bench_peers._timing import pool_rows, rotation
from .report import OURS, BenchReport, Measurement

OUTPUTS = ("leaf", "contribs")
# Contributions agree within this fraction of the largest one (XGBoost's are float32).
CONTRIBS_RTOL = 1e-4
# Batches of at least this many rows are timed by one call each (libraries take minutes).
SINGLE_CALL_ROWS = 1024


class _Engine:
    def __init__(self, name: str, predict, on_threads=None, drop_bias: bool = False):
        self.name, self._predict, self._on_threads, self.drop_bias = name, predict, on_threads, drop_bias
        self.threads = 1

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        if self._on_threads is not None:
            self._on_threads(threads)

    def predict(self, X):
        return self._predict(X, self.threads)


def _library(path: str, fmt: str, output: str) -> _Engine:
    leaf = output == "leaf"
    if fmt.startswith("xgboost"):
        import xgboost as xgb

        from .bench_peers.native import load_xgboost_booster

        booster = load_xgboost_booster(path)
        kw = {"pred_leaf": True} if leaf else {"pred_contribs": True}
        return _Engine("xgboost", lambda X, n: booster.predict(xgb.DMatrix(X, nthread=n), **kw),
                       lambda n: booster.set_param({"nthread": n}))
    if fmt.startswith("lightgbm"):
        import lightgbm as lgb

        booster = lgb.Booster(model_file=path)
        kw = {"pred_leaf": True} if leaf else {"pred_contrib": True}
        return _Engine("lightgbm", lambda X, n: booster.predict(X, num_threads=n, **kw))
    if fmt.startswith("catboost"):
        import catboost as cb

        model = cb.CatBoost()
        model.load_model(path)
        if leaf:
            return _Engine("catboost", lambda X, n: model.calc_leaf_indexes(cb.Pool(X), thread_count=n))
        return _Engine("catboost", lambda X, n: model.get_feature_importance(cb.Pool(X), type="ShapValues",
                                                                             thread_count=n))
    raise PeerUnavailable(f"{fmt}: no library peer for this format")


def _library_model(path: str, fmt: str):
    """The library's own model object, as shap and fasttreeshap take it."""
    if fmt.startswith("xgboost"):
        from .bench_peers.native import load_xgboost_booster

        return load_xgboost_booster(path)
    if fmt.startswith("lightgbm"):
        import lightgbm as lgb

        return lgb.Booster(model_file=path)
    import catboost as cb

    model = cb.CatBoost()
    model.load_model(path)
    return model


def _explainers(path: str, fmt: str, notes: list[str]) -> list[_Engine]:
    out = []
    try:
        import shap

        explainer = shap.TreeExplainer(_library_model(path, fmt), feature_perturbation="tree_path_dependent")
        out.append(_Engine("shap", lambda X, n: explainer.shap_values(X, check_additivity=False), drop_bias=True))
    except ImportError:
        notes.append("shap: not installed (pip install shap)")
    except Exception as exc:  # noqa: BLE001 - a model shap cannot read is a note
        notes.append(f"shap: skipped ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
    try:
        # fasttreeshap 0.1.6 calls np.obj2sctype, which NumPy 2 removed: given back for its import.
        if not hasattr(np, "obj2sctype"):
            np.obj2sctype = _obj2sctype
        import fasttreeshap

        model = _library_model(path, fmt)
        made = {}

        def fast(X, n):
            if n not in made:
                made[n] = fasttreeshap.TreeExplainer(model, algorithm="auto", n_jobs=n)
            return made[n].shap_values(X, check_additivity=False)

        out.append(_Engine("fasttreeshap", fast, drop_bias=True))
    except ImportError:
        notes.append("fasttreeshap: not installed (pip install fasttreeshap)")
    return out


def _obj2sctype(rep, default=None):
    try:
        return np.dtype(rep).type
    except TypeError:
        return rep if isinstance(rep, type) else default


def _agreement(ours: np.ndarray, got, output: str, drop_bias: bool) -> tuple[float, bool]:
    if isinstance(got, list):  # shap's older per-class lists
        got = np.stack(got, axis=1) if len(got) > 1 else got[0]
    got = np.asarray(got)
    if drop_bias:
        ours = ours.reshape(got.shape[0], -1, ours.shape[-1])[..., :-1].reshape(got.shape) \
            if ours.size != got.size else ours
    if ours.size != got.size:
        raise PeerUnavailable(f"answers of shape {got.shape}, ours {ours.shape}")
    got = got.reshape(ours.shape).astype(np.float64)
    diff = float(np.abs(ours.astype(np.float64) - got).max(initial=0.0))
    if output == "leaf":
        return diff, diff == 0
    return diff, diff <= CONTRIBS_RTOL * max(1.0, float(np.abs(got).max(initial=0.0)))


def run_output_bench(model: str, output: str, batch_sizes, threads: list[int], repeat: int = 5,
                     min_time: float = 0.1, peers: list[str] | None = None, seed: int = 0,
                     progress=None) -> BenchReport:
    """Time ``output`` (leaf or contribs) of ours and of the peers; see the module docstring."""
    import silvanforge as sf
    from silvanforge.frontend.loading import load_model
    from silvanforge.frontend.sampling import random_rows

    from .bench import _detect_format, _version
    from silvanforge.plugins import registry

    fmt = _detect_format(model, registry())
    forest = load_model(model)
    kw = {"pred_leaf": True} if output == "leaf" else {"pred_contribs": True}
    start = time.perf_counter()
    cf = sf.compile(forest).wait()
    report = BenchReport(model=model, model_format=fmt, trees=forest.num_trees, max_depth=forest.max_depth(),
                         features=forest.num_features, outputs=forest.num_outputs, target=cf.target, rep=cf.rep,
                         schedule=f"output: {output}", threads=threads, repeat=repeat, min_time=min_time,
                         batch_sizes=batch_sizes)
    report.versions = {"silvanforge": _version("silvanforge") or "?", "numpy": np.__version__}
    pool = random_rows(forest, pool_rows(batch_sizes[-1], forest.num_features * 8), seed)[:, :forest.input_features]
    X = pool[:batch_sizes[-1]]
    expected = cf.predict(X, **kw)  # (its first request also builds what it needs)
    report.notes.append(f"silvanforge: compile and first {output} request {time.perf_counter() - start:.2f} s "
                        "(what it builds then is not in the times)")
    ours = _Engine(OURS, lambda rows, n: cf.predict(rows, threads=n, **kw))
    candidates = []
    try:
        candidates.append(_library(model, fmt, output))
    except (PeerUnavailable, ImportError) as exc:
        report.notes.append(str(exc))
    if output == "contribs":
        candidates += _explainers(model, fmt, report.notes)
    engines = [(ours, None, None)]
    for engine in candidates:
        if peers is not None and engine.name not in peers:
            continue
        try:
            engine.set_threads(threads[0])
            diff, agrees = _agreement(expected, engine.predict(X), output, engine.drop_bias)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run this model is a note
            report.notes.append(f"{engine.name}: skipped ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
            continue
        engines.append((engine, diff, agrees))
    for t in threads:
        for engine, diff, agrees in engines:
            engine.set_threads(t)
            for b in batch_sizes:
                if progress is not None:
                    progress(f"timing {engine.name} {output} at {b} rows, {t} threads", 0, 0)
                batches = rotation(pool, b)
                if b >= SINGLE_CALL_ROWS:  # (a library takes minutes here: one call, not warmed)
                    begin = time.perf_counter()
                    engine.predict(batches[0])
                    seconds = time.perf_counter() - begin
                else:
                    seconds = time_call(engine.predict, batches, repeat, min_time)
                report.measurements.append(Measurement(engine.name, b, seconds, diff, agrees, t))
    return report
