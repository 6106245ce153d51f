"""The codes and limits of ONNX-ML tree ensembles as onnxruntime reads them (:mod:`.onnx_trees`
explains the semantics)."""

from __future__ import annotations

from silvanforge.ir.hir import Aggregation

_ENSEMBLE_OPS = ("TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble")
_ML = "ai.onnx.ml"

# onnxruntime's POST_EVAL_TRANSFORM order (also the codes of the "onnx" transforms).
_POST_NAMES = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
_PROBIT = 4
# TreeEnsemble (opset 5) aggregate_function codes.
_AGG_V5 = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
_AGG = {"SUM": Aggregation.SUM, "AVERAGE": Aggregation.AVERAGE, "MIN": Aggregation.MIN,
        "MAX": Aggregation.MAX}
_V3_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_LEAF = -1

# TensorProto element types.
_FLOAT, _INT32, _INT64, _FLOAT16, _DOUBLE = 1, 6, 7, 10, 11
_TYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 8: "string",
               9: "bool", 10: "float16", 11: "double", 16: "bfloat16"}

# onnxruntime evaluates a membership set exactly when it has at most this many members, all
# in [0, _EXACT_MAX_MEMBER]; otherwise it truncates the feature to int32.
_EXACT_MAX_COUNT = 30
_EXACT_MAX_MEMBER = 30
# Outputs a model may have without a weight for each (each costs memory for every row).
_FREE_OUTPUTS = 4096
# Copying shared subtrees (or unrolling exact sets) must not explode.
_MAX_NODES = 5_000_000
