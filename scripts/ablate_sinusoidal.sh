#!/usr/bin/env bash
# Which setup makes sinusoidal a fair baseline for learned at the training length?
# Trains each variant below at the claim suite's CPU scale (L=64, 1M tokens, tiny model,
# 16,384 scored tokens), then writes the report whose table docs/encodings.md's "Fair baselines"
# section quotes: the learning rate for both encodings, then at the claim suite's rate
# (0.004) sinusoidal's token scale, token initialisation, head tying and frequency base, and
# learned's head tying.  Every variant spells out its head and initialisation, so none
# depends on the defaults it tests.  About 2 minutes per run on one core; JOBS=2 trains two
# at a time, one thread each.  VARIANTS="learned-lr4e-3 default-lr4e-3" limits it to those.
#   scripts/ablate_sinusoidal.sh            (results under results/ablate-sinusoidal)
set -euo pipefail
jobs=${JOBS:-1}
if [[ "$jobs" -gt 1 && -z "${OMP_NUM_THREADS:-}" ]]; then
  OMP_NUM_THREADS=$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))
  export OMP_NUM_THREADS
fi
common="experiment=ablate-sinusoidal train.seq_len=64 train.tokens=1000000 eval.tokens=16384 eval.lengths=[64,128,256]"
d_inv_sqrt=0.08838834764831845   # d_model^-1/2 for d_model 128 (model=tiny)
learned="encoding=learned model.tie_weights=true"
sin="encoding=sinusoidal encoding.hparams.scale_tokens=true"
default="$sin encoding.hparams.unit_tokens=true model.tie_weights=false"
# name|seeds|overrides
variants=(
  "learned-lr1e-3|0|$learned train.lr=0.001"
  "learned-lr2e-3|0|$learned train.lr=0.002"
  "learned-lr4e-3|0 1|$learned train.lr=0.004"
  "learned-lr8e-3|0|$learned train.lr=0.008"
  "default-lr1e-3|0|$default train.lr=0.001"
  "default-lr2e-3|0|$default train.lr=0.002"
  "default-lr4e-3|0 1|$default train.lr=0.004"
  "default-lr8e-3|0|$default train.lr=0.008"
  "learned-untied-lr4e-3|0|encoding=learned model.tie_weights=false train.lr=0.004"
  "std002-tied-lr4e-3|0|$sin encoding.hparams.unit_tokens=false model.tie_weights=true train.lr=0.004"
  "std002-untied-lr4e-3|0 1|$sin encoding.hparams.unit_tokens=false model.tie_weights=false train.lr=0.004"
  "unit-tied-lr4e-3|0|$sin encoding.hparams.unit_tokens=true model.tie_weights=true train.lr=0.004"
  "table-rsqrt-d-lr4e-3|0|encoding=sinusoidal encoding.hparams.scale_tokens=false encoding.hparams.unit_tokens=false encoding.hparams.table_scale=$d_inv_sqrt model.tie_weights=true train.lr=0.004"
  "default-base1e5-lr4e-3|0|$default encoding.base=100000 train.lr=0.004"
)
commands=()
for variant in "${variants[@]}"; do
  IFS='|' read -r name seeds overrides <<< "$variant"
  if [[ -n "${VARIANTS:-}" && " $VARIANTS " != *" $name "* ]]; then continue; fi
  for seed in $seeds; do
    commands+=("posexp train $common $overrides seed=$seed run_name=$name-s$seed")
  done
done
# set -f: eval.lengths=[64,128,256] is an override, not a file pattern
printf '%s\n' "${commands[@]}" | xargs -P "$jobs" -I{} bash -fc '{}'
posexp report results/ablate-sinusoidal
