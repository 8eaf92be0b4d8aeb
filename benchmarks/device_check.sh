#!/usr/bin/env bash
# The one command of a GPU lease (docs/benchmarks.md, "A GPU lease"): the GPU check's default phases,
# the papers' 2x2 x 4 seeds at 5,000 steps last, within 9 minutes, everything under $OUT.
#
#   harness device kit                        # here, once: prints the carry list (.device-kit) and this command
#   run(command="bash benchmarks/device_check.sh", carry=[".device-kit"], timeout_s=600)   # the lease
#   harness device record <its files>/study   # here: the 2x2 in MLflow, then harness report / scorecard --from
#
# Arguments go to benchmarks/gpu_check.py (e.g. --cpu-smoke, --phase import,train). The kit's wheels
# (pydantic: the image lacks it) are installed into a folder of their own, and its corpora are the
# data folder. PYTHON names the interpreter (default python3); HARNESS_DEVICE_KIT the kit
# (default .device-kit); CHECK_TIMEOUT_S the check's hard limit (default 560: the lease's command
# may run 600 s, and what is under $OUT comes back even when it is stopped).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder the results go to (a lease sets it)}"
PYTHON=${PYTHON:-python3}
KIT=${HARNESS_DEVICE_KIT:-.device-kit}
case "$KIT" in /*) ;; *) KIT="$PWD/$KIT" ;; esac
mkdir -p "$OUT"
if [ ! -d "$KIT/data" ]; then
    echo "error: no kit at $KIT: run 'harness device kit' here and carry it" >&2
    exit 2
fi
site=""
if compgen -G "$KIT/wheels/*.whl" >/dev/null; then
    site=$(mktemp -d /tmp/harness-site.XXXXXX)
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$KIT"/wheels/*.whl \
        || { echo "error: the kit's wheels did not install" >&2; exit 2; }
fi
export PYTHONPATH="$PWD${site:+:$site}" HARNESS_DATA_DIR="$KIT/data" PYTHONUNBUFFERED=1
export MLFLOW_DISABLE_TELEMETRY=true RAY_USAGE_STATS_ENABLED=0
"$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'
timeout -k 10 "${CHECK_TIMEOUT_S:-560}" "$PYTHON" benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
