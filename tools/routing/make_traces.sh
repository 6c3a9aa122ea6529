#!/usr/bin/env bash
# Records the routing traces docs/routing.md analyses and runs the analysis:
#   tools/routing/make_traces.sh SLUICE_BINARY OUT_DIR [MEMORY] [POLICY] [PROMPTS]
# Six English prompts, 64 sampled tokens each (temperature 0.8, a seed per prompt, past end-of-text tokens), on the
# trained model models/sluice-k2-tiny with its experts streamed under MEMORY (default 19.4M with --ctx 512: 32 cache
# slots of the 120 routed experts; the traces in docs/ were recorded under 78M before the plan sized activations
# exactly, which gave the same 32), one trace per prompt; then the same
# prompts' token ids on a random synth model of the same shape (6 layers, 24 experts, top-4, kimi-k2 layout), which
# has its own byte-level tokenizer, so the prompts are its bytes. Writes OUT_DIR/{trained,synth}/*.trace and the
# plots and tables into docs/routing/ (named trained*, synth*; with a POLICY other than lru, trained-POLICY*, ...) (needs .venv with numpy and matplotlib: pip install numpy matplotlib xxhash).
# PROMPTS: tuning (default; the six prompts the policies were designed on, seeds 1-6) or held-out (six others,
# seeds 11-16, that no policy was tuned on; the names get -held-out). Environment: SLUICE_TRACE_ARGS adds arguments
# to every generate (e.g. --no-prefetch, for tools/routing/check_replay.py); ANALYZE=0 skips the analysis.
set -euo pipefail
usage="usage: make_traces.sh SLUICE_BINARY OUT_DIR [MEMORY] [POLICY] [tuning|held-out]"
sluice=${1:?$usage}
out=${2:?$usage}
memory=${3:-19.4M}
policy=${4:-lru}
set_name=${5:-tuning}
read -r -a extra <<< "${SLUICE_TRACE_ARGS:-}"
cd "$(dirname "$0")/../.."
python=python3
[ -x .venv/bin/python3 ] && python=.venv/bin/python3
case "$set_name" in
tuning)
  prompts=(
    "And it came to pass in those days, that"
    "The programmer looked at the terminal and said"
    "A fool and his money are soon"
    "In the beginning of the winter the farmers of the valley"
    "Hacker, n. A person who enjoys exploring the details of"
    "Love is patient and kind; the letter said that"
  )
  first_seed=1 ;;
held-out)
  prompts=(
    "Blessed are they that mourn, for"
    "The system administrator rebooted the server because"
    "He who laughs last"
    "Dear Sir, I write to inform you that the ship"
    "Kludge, n. A clever programming trick that"
    "The old man walked along the river and thought about"
  )
  first_seed=11 ;;
*) echo "$usage" >&2; exit 2 ;;
esac
mkdir -p "$out/trained" "$out/synth"
synth_dir="$out/synth-model"
if [ ! -f "$synth_dir/config.json" ]; then
  "$sluice" synth --like kimi-k2 --layers 6 --experts 24 --top-k 4 --scale-down 28 --seed 7 -o "$synth_dir" --no-sync
fi
for i in "${!prompts[@]}"; do
  "$sluice" generate -m models/sluice-k2-tiny --memory "$memory" --cache-policy "$policy" -t 2 \
    -p "${prompts[$i]}" -n 64 --temp 0.8 --seed "$((i + first_seed))" --stats --ignore-eos --ctx 512 \
    ${extra[@]+"${extra[@]}"} --trace-experts "$out/trained/p$i.trace" > "$out/trained/p$i.txt" 2> "$out/trained/p$i.stats"
  "$sluice" generate -m "$synth_dir" --memory "$memory" --cache-policy "$policy" -t 2 \
    -p "${prompts[$i]}" -n 64 --temp 0.8 --seed "$((i + first_seed))" --stats --ignore-eos --ctx 512 \
    ${extra[@]+"${extra[@]}"} --trace-experts "$out/synth/p$i.trace" > "$out/synth/p$i.txt" 2> "$out/synth/p$i.stats"
done
[ "${ANALYZE:-1}" = 0 ] && exit 0
suffix=""
[ "$policy" = lru ] || suffix="-$policy"
[ "$set_name" = tuning ] || suffix="$suffix-$set_name"
$python tools/routing/analyze_trace.py --name "trained$suffix" --out docs/routing --model models/sluice-k2-tiny "$out"/trained/p*.trace
$python tools/routing/analyze_trace.py --name "synth$suffix" --out docs/routing --model "$synth_dir" "$out"/synth/p*.trace
