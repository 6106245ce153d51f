"""The peers ``forge bench`` times SilvanForge against, one module each.

=================  ==========================  ================================================
engine             models                      how it is called
=================  ==========================  ================================================
xgboost            XGBoost JSON / UBJSON       ``Booster.inplace_predict`` (``nthread``)
lightgbm           LightGBM text               ``Booster.predict`` (``num_threads``)
onnxruntime        ONNX; XGBoost and LightGBM  ``InferenceSession.run`` (``intra_op_num_threads``);
                   converted with onnxmltools  one session per thread count
treelite-gtil      XGBoost, LightGBM           ``treelite.gtil.predict`` (``nthread``)
tl2cgen            XGBoost, LightGBM           a ``gcc -O3`` shared library built by TL2cgen, cached
                                               by model hash; ``Predictor(nthread)`` on a DMatrix
hummingbird        XGBoost, LightGBM           ``hummingbird.ml.convert(model, "torch")``
                                               (``torch.set_num_threads``)
lleaves            LightGBM text               ``lleaves.Model.predict`` (``n_jobs``), in its own
                                               environment when llvmlite here is >= 0.44
onedal             XGBoost, LightGBM           ``daal4py.mb.convert_model(booster)``
                   (numeric splits)            ``.predict_proba`` / ``.predict`` (``daalinit``)
catboost           CatBoost JSON / .cbm        ``CatBoost.predict`` (``thread_count``)
                   (no categorical features)
onnxruntime        CatBoost (no categorical    CatBoost's own ONNX export, ``InferenceSession.run``
                   features)                   (``intra_op_num_threads``)
=================  ==========================  ================================================

Each factory takes a :class:`PeerContext` and returns an :class:`Engine`; raising
:class:`PeerUnavailable` gives a note saying why (and how to fix it), any other exception a
"skipped" note.  None of them is required: ``pip install -r requirements-bench.txt``.
"""

from __future__ import annotations

from ._timing import time_call
from .base import (
    CACHE_ENV,
    Call,
    Engine,
    ExternalEngine,
    PeerContext,
    PeerUnavailable,
    cache_root,
    importable,
    model_digest,
    quiet_output,
    version,
    versions,
)
from .catboost_peer import catboost_engine, catboost_onnx_engine
from .hummingbird_peer import hummingbird_cuda_engine, hummingbird_engine
from .lleaves_peer import lleaves_engine
from .native import lightgbm_engine, xgboost_cuda_engine, xgboost_engine
from .onedal_peer import onedal_engine
from .onnx_runtime import onnxruntime_engine
from .treelite_peers import gtil_engine, tl2cgen_engine

XGB = ("xgboost-json", "xgboost-ubjson")
LGB = ("lightgbm-text",)
CB = ("catboost-json", "catboost-cbm")

# (engine, module that must be importable or None when the factory checks for itself,
#  model formats it applies to, factory(PeerContext) -> Engine)
PEERS = [
    ("xgboost", "xgboost", XGB, xgboost_engine),
    ("lightgbm", "lightgbm", LGB, lightgbm_engine),
    ("onnxruntime", "onnxruntime", ("onnx", *XGB, *LGB), onnxruntime_engine),
    ("treelite-gtil", "treelite", XGB + LGB, gtil_engine),
    ("tl2cgen", "tl2cgen", XGB + LGB, tl2cgen_engine),
    ("hummingbird", "hummingbird", XGB + LGB, hummingbird_engine),
    ("lleaves", None, LGB, lleaves_engine),  # may run from its own environment
    ("onedal", "daal4py", XGB + LGB, onedal_engine),
    ("catboost", "catboost", CB, catboost_engine),
    # the same name as ONNX Runtime above: it is that peer, on the model CatBoost exports
    ("onnxruntime", "onnxruntime", CB, catboost_onnx_engine),
]
# The peers of GPU targets (same rows copied in and results copied out per call).
GPU_PEERS = [
    ("hummingbird-cuda", "hummingbird", XGB + LGB, hummingbird_cuda_engine),
    ("xgboost-cuda", "xgboost", XGB, xgboost_cuda_engine),
]

# What to install when a peer's module is missing.
PIP = {
    "xgboost": "pip install xgboost",
    "lightgbm": "pip install lightgbm",
    "onnxruntime": "pip install onnxruntime onnxmltools",
    "treelite": "pip install treelite",
    "tl2cgen": "pip install treelite tl2cgen",
    "hummingbird": "pip install hummingbird-ml torch",
    "daal4py": "pip install scikit-learn-intelex",
    "catboost": "pip install catboost",
}

__all__ = [
    "CACHE_ENV",
    "GPU_PEERS",
    "LGB",
    "PEERS",
    "PIP",
    "XGB",
    "Call",
    "Engine",
    "ExternalEngine",
    "PeerContext",
    "PeerUnavailable",
    "cache_root",
    "importable",
    "model_digest",
    "quiet_output",
    "time_call",
    "version",
    "versions",
]
