"""SilvanForge's benchmark tooling, outside the core: ``forge bench`` (:mod:`.cli`), the timing
and reports (:mod:`.bench`) and the peers it times against (:mod:`.bench_peers`: XGBoost,
LightGBM, ONNX Runtime, Treelite/TL2cgen, lleaves, Hummingbird, each optional)."""
