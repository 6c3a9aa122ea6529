#!/usr/bin/env bash
# Records the routing traces docs/routing.md analyses and runs the analysis:
#   tools/routing/make_traces.sh SLUICE_BINARY OUT_DIR [MEMORY] [POLICY]
# Six English prompts, 64 sampled tokens each (temperature 0.8, a seed per prompt, past end-of-text tokens), on the
# trained model models/sluice-k2-tiny with its experts streamed under MEMORY (default 78M with --ctx 512: 33 cache
# slots of the 120 routed experts), one trace per prompt; then the same
# prompts' token ids on a random synth model of the same shape (6 layers, 24 experts, top-4, kimi-k2 layout), which
# has its own byte-level tokenizer, so the prompts are its bytes. Writes OUT_DIR/{trained,synth}/*.trace and the
# plots and tables into docs/routing/ (named trained*, synth*; with a POLICY other than lru, trained-POLICY*, ...) (needs .venv with numpy and matplotlib: pip install numpy matplotlib xxhash).
set -euo pipefail
sluice=${1:?usage: make_traces.sh SLUICE_BINARY OUT_DIR [MEMORY] [POLICY]}
out=${2:?usage: make_traces.sh SLUICE_BINARY OUT_DIR [MEMORY] [POLICY]}
memory=${3:-78M}
policy=${4:-lru}
cd "$(dirname "$0")/../.."
python=python3
[ -x .venv/bin/python3 ] && python=.venv/bin/python3
prompts=(
  "And it came to pass in those days, that"
  "The programmer looked at the terminal and said"
  "A fool and his money are soon"
  "In the beginning of the winter the farmers of the valley"
  "Hacker, n. A person who enjoys exploring the details of"
  "Love is patient and kind; the letter said that"
)
mkdir -p "$out/trained" "$out/synth"
synth_dir="$out/synth-model"
if [ ! -f "$synth_dir/config.json" ]; then
  "$sluice" synth --like kimi-k2 --layers 6 --experts 24 --top-k 4 --scale-down 28 --seed 7 -o "$synth_dir" --no-sync
fi
for i in "${!prompts[@]}"; do
  "$sluice" generate -m models/sluice-k2-tiny --memory "$memory" --cache-policy "$policy" -t 2 \
    -p "${prompts[$i]}" -n 64 --temp 0.8 --seed "$((i + 1))" --stats --ignore-eos --ctx 512 \
    --trace-experts "$out/trained/p$i.trace" > "$out/trained/p$i.txt" 2> "$out/trained/p$i.stats"
  "$sluice" generate -m "$synth_dir" --memory "$memory" --cache-policy "$policy" -t 2 \
    -p "${prompts[$i]}" -n 64 --temp 0.8 --seed "$((i + 1))" --stats --ignore-eos --ctx 512 \
    --trace-experts "$out/synth/p$i.trace" > "$out/synth/p$i.txt" 2> "$out/synth/p$i.stats"
done
suffix=""
[ "$policy" = lru ] || suffix="-$policy"
$python tools/routing/analyze_trace.py --name "trained$suffix" --out docs/routing --model models/sluice-k2-tiny "$out"/trained/p*.trace
$python tools/routing/analyze_trace.py --name "synth$suffix" --out docs/routing --model "$synth_dir" "$out"/synth/p*.trace
