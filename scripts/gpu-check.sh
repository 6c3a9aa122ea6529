#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with an NVIDIA GPU (compute capability 9.0+) and nvcc: builds the
# release preset with CUDA, runs the op harness on CUDA (every matmul format against its reference twin, batch
# invariance, kept vs per-call device copies) with --perf, the fixture tests with every weight matmul on the GPU
# (logits against the transformers references, greedy identical, batched == alone), then an end-to-end benchmark on
# a Kimi-K3-shaped slice (prefill and decode, CPU and CUDA, in the same run), and prints one table last.
#   SLUICE_SKIP_DEPS=1       do not run scripts/install-deps.sh (a machine where the packages are not installable)
#   SLUICE_CMAKE_ARGS=...    extra configure arguments (e.g. -DCMAKE_PREFIX_PATH=... for headers kept elsewhere)
#   SLUICE_GPU_CHECK_OUT=DIR logs and the table (default build/gpu-check)
#   SLUICE_BENCH_SLICE=0     skip the K3-slice benchmark (it writes a 2.4 GB model to build/gpu-check)
#   SLUICE_BENCH_LONG=1      also a 4096-token prefill chunk of the slice on CUDA (--memory 40G --ctx 8192)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${SLUICE_GPU_CHECK_OUT:-build/gpu-check}
mkdir -p "$out"
[ "${SLUICE_SKIP_DEPS:-0}" = 1 ] || bash scripts/install-deps.sh || exit 1
# shellcheck disable=SC2086
cmake --preset release -DSLUICE_CUDA=ON ${SLUICE_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build --preset release -j "$(nproc)" --target sluice op_harness test_fixtures test_trained_model test_engine test_engine_requests \
    >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -30; exit 1; }
B=build/release/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

declare -a rows
step() {  # step NAME CMD...: runs CMD, logs it, keeps its last "N passed" style line for the table
    local name=$1; shift
    local t0=$SECONDS
    "$@" >"$out/$name.log" 2>&1
    local rc=$?
    local last
    last=$(grep -E "passed|PASSED|FAILED|failed" "$out/$name.log" | tail -1)
    rows+=("$(printf '%-28s %-6s %5ss  %s' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)) "$last")")
    return $rc
}
fail=0
# The card's bf16 tensor rate, measured here (the exact f32 split needs three bf16 products per f32 one).
python3 - >"$out/tensor_peak.txt" 2>/dev/null <<'PY' || echo "bf16 tensor peak: not measured (no PyTorch here)" >"$out/tensor_peak.txt"
import torch
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda"); b = torch.randn_like(a)
for _ in range(3): a @ b
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize(); s.record()
for _ in range(20): a @ b
e.record(); torch.cuda.synchronize()
tf = 20 * 2 * 8192 ** 3 / (s.elapsed_time(e) * 1e9)
print(f"bf16 tensor peak (PyTorch 8192^3 matmul, random data): {tf:.0f} TFLOP/s; / 3 for the exact f32 split: {tf / 3:.0f} TFLOP/s")
PY
step op_harness "$B/op_harness" --backend cuda --perf || fail=1
step fixtures_cuda env SLUICE_DEVICE=cuda "$B/test_fixtures" || fail=1
step trained_model_cuda env SLUICE_DEVICE=cuda "$B/test_trained_model" || fail=1
step engine_cuda env SLUICE_DEVICE=cuda "$B/test_engine" || fail=1
step engine_requests_cuda env SLUICE_DEVICE=cuda "$B/test_engine_requests" || fail=1

if [ "${SLUICE_BENCH_SLICE:-1}" = 1 ]; then
    slice="$out/k3-slice"
    [ -f "$slice/config.json" ] || "$B/sluice" synth --like kimi-k3 --layers 4 --experts 64 --vocab-size 32768 \
        --expert-dtype mxfp4 -o "$slice" >"$out/synth.log" 2>&1
    # streamed (a 6 GB budget for a 9.3 GB model) and cached (the experts fit: read once, then from RAM)
    for mem in 6G 40G; do
        for dev in cpu cuda; do
            step "bench_${mem}_$dev" "$B/sluice" bench -m "$slice" --device $dev --memory $mem --tokens 4 \
                --prompt-tokens 512 --chunk 512 || fail=1
        done
    done
    if [ "${SLUICE_BENCH_LONG:-0}" = 1 ]; then
        step bench_40G_cuda_4096 "$B/sluice" bench -m "$slice" --device cuda --memory 40G --ctx 8192 --tokens 2 \
            --prompt-tokens 4096 --chunk 4096 || fail=1
    fi
fi

echo
echo "== perf (op harness)"
sed -n '/== CUDA perf/,/passed/p' "$out/op_harness.log"
cat "$out/tensor_peak.txt"
echo
echo "== K3 slice (bench, same run)"
for f in "$out"/bench_*.log; do
    echo "-- $(basename "$f" .log)"
    grep -hE "^ *(prefill|decode|reads|device|blocks)" "$f"
done
echo
echo "== gpu-check: $(cat "$out/gpu.txt")"
printf '%s\n' "${rows[@]}"
[ $fail = 0 ] && echo "gpu-check: all steps passed" || echo "gpu-check: FAILED (logs in $out)"
exit $fail
