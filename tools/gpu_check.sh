#!/usr/bin/env bash
# The device check of issue 46 (docs/bundle.md#the-device-check), in three steps:
#   tools/gpu_check.sh prepare DIR   here: bundle ResNet-18 built for {"kind": "cuda", "arch": "sm_90"}, put the
#                                    Python 3.12 build of tvm_ffi and the PyTorch anchor beside it, write DIR/check.sh
#   bash DIR/check.sh                on the GPU host (Python 3.12, PyTorch, numpy, no TVM): the one command; every
#                                    result into DIR/results/ (at most ~6 minutes)
#   tools/gpu_check.sh report DIR    here, with DIR/results/ brought back: the reports, DIR/reports/NAME/
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PY:-$REPO/.venv/bin/python}
TARGET='{"kind": "cuda", "arch": "sm_90"}'
step=${1:-}; dir=${2:-}
[ -n "$step" ] && [ -n "$dir" ] || { echo "usage: tools/gpu_check.sh prepare|report DIR" >&2; exit 2; }

case "$step" in
prepare)
  [ ! -e "$dir" ] || { echo "gpu_check: $dir exists: give a new DIR" >&2; exit 1; }
  mkdir -p "$dir"
  "$PY" -m relaytrace.cli bundle demo:resnet18 --target "$TARGET" --out "$dir/resnet18"
  # the MLC-style Llama (4 blocks, hidden 256, head dim 64, nn.llm's TIR paged KV cache for cuda): its decode,
  # served by run.py through the cache the build's create entry makes, at a context of 256 tokens
  printf 'from relaytrace.zoo.mlc_llama import llama\n\n\ndef make():\n    return llama(layers=4, target="cuda", hidden=256)\n' \
    > "$dir/llm.py"
  "$PY" -m relaytrace.cli bundle "$dir/llm.py:make" --entry decode --context 256 --target "$TARGET" \
    --out "$dir/llama-decode"
  # the same runtime libraries as ResNet-18's: copied there by check.sh, so that DIR stays under 64 MiB
  cmp -s "$dir/resnet18/lib/libtvm_runtime.so" "$dir/llama-decode/lib/libtvm_runtime.so" ||
    { echo "gpu_check: the Llama bundle's runtime differs from ResNet-18's: it cannot share it" >&2; exit 1; }
  rm -rf "$dir/llama-decode/lib"
  ffi=$("$PY" -c "from importlib import metadata; print(metadata.version('apache-tvm-ffi'))")
  "$PY" -m pip install -q --disable-pip-version-check --target "$dir/site" --python-version 3.12 \
    --only-binary=:all: --platform manylinux_2_28_x86_64 "apache-tvm-ffi==$ffi"
  # what importing tvm_ffi does not need (its C++ sources, headers, bundled libbacktrace): the copy stays under 64 MiB
  rm -rf "$dir/site/tvm_ffi/3rdparty" "$dir/site/tvm_ffi/include" "$dir/site/tvm_ffi/src" "$dir/site/bin"
  find "$dir/site" -name __pycache__ -prune -exec rm -rf {} +
  cp tools/gpu_anchor.py "$dir/gpu_anchor.py"
  cp relaytrace/zoo/models.py "$dir/resnet_models.py"
  cat > "$dir/check.sh" <<'HOST'
#!/usr/bin/env bash
# On the GPU host: bash DIR/check.sh (no TVM, no relaytrace needed; Python 3.12, numpy, PyTorch for the anchor).
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH="$D/site:$D${PYTHONPATH:+:$PYTHONPATH}"
R="$D/results"; mkdir -p "$R"
run() {  # NAME SECONDS COMMAND...: one step, its output in results/NAME.log, never stopping the others
  local name=$1 limit=$2; shift 2
  echo "gpu_check: $name"
  timeout "$limit" "$@" > "$R/$name.out" 2> "$R/$name.log"; echo "$name exit $?" >> "$R/steps.txt"
}
[ -d "$D/llama-decode/lib" ] || cp -r "$D/resnet18/lib" "$D/llama-decode/lib"
(nvidia-smi; "$PY" -c "import sys, numpy, tvm_ffi; print(sys.version, numpy.__version__, tvm_ffi.__file__)") \
  > "$R/host.txt" 2>&1
run resnet18-sync 90 "$PY" "$D/resnet18/run.py" --repeat 20 --out "$R/resnet18-sync.json"
run resnet18-events 90 "$PY" "$D/resnet18/run.py" --repeat 20 --events --out "$R/resnet18-events.json"
run resnet18-isolated 120 "$PY" "$D/resnet18/run.py" --mode isolated --repeat 10 --out "$R/resnet18-isolated.json"
run resnet18-nvtx 60 "$PY" "$D/resnet18/run.py" --nvtx --repeat 3 --out "$R/resnet18-nvtx.json"
if command -v nsys > /dev/null; then
  run resnet18-nsys 120 nsys profile --trace=cuda,nvtx --force-overwrite=true -o "$R/resnet18" \
    "$PY" "$D/resnet18/run.py" --nvtx --repeat 3 --out "$R/resnet18-nsys.json"
  run resnet18-nsys-stats 60 nsys stats --report nvtx_sum "$R/resnet18.nsys-rep"
fi
(cd "$D" && run torch-anchor 120 "$PY" "$D/gpu_anchor.py" --repeat 20)
run llama-decode 120 "$PY" "$D/llama-decode/run.py" --repeat 20 --out "$R/llama-decode.json"
cat "$R/steps.txt"
echo "gpu_check: done; bring $R back beside the bundle and run tools/gpu_check.sh report DIR"
HOST
  du -sh "$dir" ;;
report)
  [ -d "$dir/results" ] || { echo "gpu_check: $dir/results is missing: run bash $dir/check.sh on the GPU host" >&2
                             exit 1; }
  for mode in sync events isolated nvtx; do
    profile="$dir/results/resnet18-$mode.json"
    [ -s "$profile" ] || { echo "gpu_check: no $profile (see $dir/results/resnet18-$mode.log)"; continue; }
    copy="$dir/reports/bundle-$mode"
    rm -rf "$copy"; mkdir -p "$dir/reports"; cp -r "$dir/resnet18" "$copy"; cp "$profile" "$copy/profile.json"
    # the peaks run.py measured on the GPU (its peak kernels); an H200's data sheet for comparison: FP32 67 TFLOPS
    # (as the H100 SXM), HBM3e 4.8 TB/s
    "$PY" -m relaytrace.cli report "$copy" --out "$dir/reports/$mode" --force \
      > "$dir/reports/$mode.txt" || echo "gpu_check: report of $mode failed"
    head -12 "$dir/reports/$mode.txt"
  done
  if [ -s "$dir/results/llama-decode.json" ]; then
    rm -rf "$dir/reports/bundle-llama"; cp -r "$dir/llama-decode" "$dir/reports/bundle-llama"
    cp "$dir/results/llama-decode.json" "$dir/reports/bundle-llama/profile.json"
    "$PY" -m relaytrace.cli report "$dir/reports/bundle-llama" --out "$dir/reports/llama-decode" --force \
      > "$dir/reports/llama-decode.txt" || echo "gpu_check: report of the Llama's decode failed"
    head -16 "$dir/reports/llama-decode.txt"
  fi
  if [ -s "$dir/results/torch-anchor.out" ]; then head -c 2000 "$dir/results/torch-anchor.out"; fi ;;
*) echo "usage: tools/gpu_check.sh prepare|report DIR" >&2; exit 2 ;;
esac
