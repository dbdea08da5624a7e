#!/usr/bin/env bash
# Eager against train.compile=true over a campaign's consecutive runs (issue #32): three runs
# of the cpu suites' sweep scale (RoPE, L = 128, 2M tokens, scored at L) one after another in
# each mode, end to end as a campaign pays for them -- process start, compile (its cache warm
# after the first), training, scoring.  Run it on idle cores; it prints each run's wall time.
#   bash scripts/bench_compile.sh [TOKENS]
set -euo pipefail
tokens=${1:-2000000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
posexp=${POSEXP:-posexp}
for compile in false true; do
    for seed in 0 1 2; do
        start=$(date +%s.%N)
        "$posexp" train sweep=lr-cpu encoding=rope seed="$seed" train.lr=0.004 \
            train.tokens="$tokens" "eval.lengths=[128]" train.compile="$compile" \
            results_dir="$out/$compile" > /dev/null 2>&1
        end=$(date +%s.%N)
        tps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tok_per_s'])" \
              "$out/$compile/default/rope-L128-s$seed/run.json")
        printf 'compile=%s seed=%s: %.1f s end to end, %s training tokens/s\n' \
            "$compile" "$seed" "$(echo "$end - $start" | bc)" "$tps"
    done
done
