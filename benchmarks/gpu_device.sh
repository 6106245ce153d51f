#!/usr/bin/env bash
# Everything the cuda target needs checked on an NVIDIA GPU, in one command (a lent device machine
# starts bare and has no network): install carried wheels, build pycuda from its sdist (or reuse a
# wheel built by an earlier run), install SilvanForge, then
#   tests    the GPU tests (tests marked gpu run here): every schedule and representation against
#            the reference, device inputs (CuPy, torch, __cuda_array_interface__) and their errors,
#            the conformance kit on cuda, the benchmark-shaped models (XGBoost binary and
#            multi-class, categorical, LightGBM float64, wide rows, 1000 trees) exact against the
#            reference with host and CuPy rows, and PTX for sm_90;
#   cli      forge predict / compile / show on the GPU;
#   calls    whole call against kernel only at 512, 4096, 65536 and 1,048,576 rows, host (NumPy)
#            and device (CuPy) rows (benchmarks/gpu_calls.py);
#   tune     forge tune --target cuda (Algorithm 1 per band, kept in the artifact), its record,
#            and the tuned artifact loaded again and checked against the reference;
#   copies, explore   the copy strategies and the template sweep (benchmarks/gpu_explore.py);
#   bench    forge bench --target cuda against Hummingbird (torch on the same GPU).
#
#   benchmarks/gpu_device.sh WHEEL_DIR MODEL_DIR [STEPS]
#
# WHEEL_DIR holds pycuda's sdist (or a pycuda wheel) and the wheels of what the machine lacks
# (pytools, platformdirs, mako, siphash24, xgboost-cpu, lightgbm, hummingbird-ml,
# onnxconverter-common, dill; cupy-cuda12x or cupy-cuda13x for the driver's CUDA, and fastrlock,
# for device inputs; torch where Hummingbird or the torch device test should run); MODEL_DIR
# holds benchmarks/make_models.py's models and request_size_models.py's xgb_1000x8,
# lgb_flight_1000x255 and xgb_multiclass_8 (GPU_MODELS names others).  STEPS is a comma-separated subset of
# tests,cli,calls,tune,copies,explore,bench (default: tests,cli,calls,tune,bench).  Logs, the
# pycuda wheel and the markdown tables go to $OUT (default /tmp/gpu-out).
#
# A lease's minutes go further with everything built ahead on a machine without a GPU, for the
# GPU host's Python (3.12 there): this tree's wheels (pip wheel --no-deps --no-build-isolation -w
# WHEEL_DIR $(grep -v '^#' requirements.txt)), and pycuda's wheel from its sdist, configured with
# --no-cuda-enable-curand and --cudadrv-lib-dir pointing at an empty stub libcuda.so (soname
# libcuda.so.1), its _driver module linked with -Wl,--no-as-needed before -lcuda so that it
# records libcuda.so.1 (readelf -d shows it), the real driver's at run time.
set -uo pipefail

WHEELS=$(realpath "$1")
MODELS=$(realpath "$2")
STEPS=",${3:-tests,cli,calls,tune,bench},"
# the benchmark models the calls and bench steps time (MODEL_DIR's file names; GPU_MODELS overrides)
# PYTEST_ARGS go to the tests' pytest (-n 8: pytest-xdist, where installed).
# each step's command stops after STEP_S seconds (default: no limit), so one slow step cannot
# take a lease's last minutes from the steps after it
STEP_S=${STEP_S:-0}
TESTS_S=${TESTS_S:-$STEP_S}  # the tests step's own limit, where it needs more than the others
GPU_MODELS=${GPU_MODELS:-"xgb_100x8.json xgb_1000x8.json lgb_flight_1000x255.txt xgb_multiclass_8.json"}
OUT=${OUT:-/tmp/gpu-out}
REPO=$(pwd)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
nvcc --version | tail -1
nproc

echo "== wheels"
SITE=/tmp/site
mkdir -p "$SITE"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    $(ls "$WHEELS"/*.whl | grep -v '/pycuda-') || exit 1
export PYTHONPATH=$SITE

echo "== pycuda"
if ls "$WHEELS"/pycuda-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/pycuda-*.whl || exit 1
else
    t0=$(date +%s)
    rm -rf /tmp/pycuda-src && mkdir -p /tmp/pycuda-src
    tar xzf "$WHEELS"/pycuda-*.tar.gz -C /tmp/pycuda-src
    (cd /tmp/pycuda-src/pycuda-* \
        && python3 configure.py --cuda-root="$(dirname "$(dirname "$(command -v nvcc)")")" \
        && python3 setup.py -q build_ext -j "$(nproc)" bdist_wheel -d "$OUT" >"$OUT/pycuda_build.log" 2>&1) \
        || { tail -40 "$OUT/pycuda_build.log"; exit 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$OUT"/pycuda-*.whl || exit 1
    echo "built pycuda in $(( $(date +%s) - t0 )) s"
fi
python3 -c "import pycuda.autoinit, pycuda.driver as d; print('pycuda', d.get_version(), d.Device(0).name())" || exit 1
python3 -c "import cupy; print('cupy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'GPU')" \
    || echo "no CuPy: device-input tests skip, calls time host rows only"

echo "== silvanforge"
# Wheels of this tree built ahead (pip wheel --no-deps -w WHEEL_DIR -r requirements.txt, for the
# machine's Python) came in with the others; else every distribution is built here from source.
if ls "$WHEELS"/silvanforge-[0-9]*.whl >/dev/null 2>&1; then
    echo "from the carried wheels"
else
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$SITE" \
        $(grep -v '^#' "$REPO"/requirements.txt) >"$OUT/install.log" 2>&1 \
        || { tail -30 "$OUT/install.log"; exit 1; }
fi
FORGE="python3 -m silvanforge.cli"
$FORGE plugins

if [[ $STEPS == *,tests,* ]]; then
    echo "== tests"
    # OpenMP teams of one: with pytest-xdist's workers, each library's machine-wide team spins
    # against the others' (a test 13x slower with 8 workers on 16 cores)
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} timeout "$TESTS_S" python3 -m pytest -q -p no:cacheprovider -rs ${PYTEST_ARGS:-} \
        tests/plugins/target_cuda/test_gpu_cuda.py tests/core/inputs/test_device_inputs.py \
        tests/plugins/gpu/test_gpu_lowering.py 2>&1 | tee "$OUT/pytest_cuda.log" | tail -25
fi

if [[ $STEPS == *,cli,* ]]; then
    echo "== cli"
    $FORGE predict examples/model.json --input examples/X.csv --output /tmp/y_cuda.csv --target cuda \
        && $FORGE predict examples/model.json --input examples/X.csv --output /tmp/y_cpu.csv \
        && python3 -c "import numpy as np; a=np.loadtxt('/tmp/y_cuda.csv',delimiter=',',ndmin=1); \
b=np.loadtxt('/tmp/y_cpu.csv',delimiter=',',ndmin=1); print('cuda vs cpu max abs diff', np.abs(a-b).max(), len(a), 'rows')"
    $FORGE compile "$MODELS"/xgb_100x8.json --rep reorg --target cuda --output /tmp/m.forge && ls -la /tmp/m.forge
    $FORGE show "$MODELS"/xgb_100x8.json --level target --target cuda | head -20
fi

if [[ $STEPS == *,calls,* ]]; then
    echo "== calls"
    timeout "$STEP_S" python3 benchmarks/gpu_calls.py --repeat "${CALL_REPEAT:-20}" $(for m in $GPU_MODELS; do echo "$MODELS/$m"; done) --hummingbird \
        --sizes 512,4096,65536,1048576 --markdown "$OUT/calls.md" 2>&1 | tee "$OUT/calls.log" | tail -20
fi

if [[ $STEPS == *,tune,* ]]; then
    echo "== tune"
    $FORGE tune "$MODELS"/xgb_100x8.json --target cuda --budget 120 -o /tmp/tuned.forge 2>&1 | tee "$OUT/tune.log"
    $FORGE show /tmp/tuned.forge --tuning 2>&1 | tee -a "$OUT/tune.log"
    python3 - "$MODELS"/xgb_100x8.json <<'PY' 2>&1 | tee -a "$OUT/tune.log"
import sys, warnings
import numpy as np
import silvanforge as sf
from silvanforge.runtime import reference
from silvanforge.frontend.sampling import random_rows
with warnings.catch_warnings():
    warnings.simplefilter("error")  # tuned here: no fallback
    cf = sf.load_compiled("/tmp/tuned.forge", trust_code=True)  # our own artifact: its PTX runs
forest = sf.load_model(sys.argv[1])
assert cf.tuning is not None
X = random_rows(forest, 70000, seed=5).astype(np.float32)
for n in (1, 600, 5000, 70000):
    np.testing.assert_allclose(cf.predict(X[:n]), reference.predict(forest, X[:n]), rtol=1e-5, atol=1e-6)
print("tuned artifact reloaded without exploring; plan:", cf.plan_text())
PY
fi

if [[ $STEPS == *,copies,* ]]; then
    echo "== copies"
    python3 benchmarks/gpu_explore.py "$MODELS"/xgb_100x8.json --skip-schedules --out "$OUT" 2>&1 | tee "$OUT/copies.log"
fi

if [[ $STEPS == *,explore,* ]]; then
    echo "== explore"
    python3 benchmarks/gpu_explore.py "$MODELS"/xgb_100x8.json "$MODELS"/lgb_100x8.txt --out "$OUT" 2>&1 \
        | tee "$OUT/explore.log"
fi

if [[ $STEPS == *,bench,* ]]; then
    echo "== bench"
    if [[ -f $OUT/best_copy ]]; then export SILVANFORGE_CUDA_COPY=$(cat "$OUT/best_copy"); fi
    echo "rows reach the device: ${SILVANFORGE_CUDA_COPY:-default}"
    for m in $GPU_MODELS; do
        timeout "$STEP_S" $FORGE bench "$MODELS/$m" --target cuda --batch-sizes 512,4096,65536 --repeat 5 --min-time 0.2 \
            --peers "${GPU_PEERS:-hummingbird-cuda,xgboost-cuda}" \
            --markdown "$OUT/bench_${m%%.*}.md" --overwrite 2>&1 | tail -30
    done
fi
