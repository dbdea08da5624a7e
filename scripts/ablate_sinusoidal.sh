#!/usr/bin/env bash
# Which setup makes sinusoidal (and learned) a fair baseline at the training length?
# Trains each variant below at the claim suite's CPU scale (L=64, 1M tokens, tiny model,
# 16,384 scored tokens) for the seeds given (default 0 1), then writes the report whose
# table the README's "Fair baselines" section quotes.  About 1-3 minutes per run on 2 CPU
# cores.  VARIANTS="learned paper-untied" limits it to those variants.
#   scripts/ablate_sinusoidal.sh [SEED ...]      (results under results/ablate-sinusoidal)
# The committed report (results/ablate-sinusoidal/report) is of
#   scripts/ablate_sinusoidal.sh 0 && VARIANTS="learned paper-untied" scripts/ablate_sinusoidal.sh 1
set -euo pipefail
seeds=("${@:-0}")
[[ $# -eq 0 ]] && seeds=(0 1)
common=(experiment=ablate-sinusoidal train.seq_len=64 train.tokens=1000000 eval.tokens=16384
        eval.lengths=[64,128,256])
d_inv_sqrt=0.08838834764831845   # d_model^-1/2 for d_model 128 (model=tiny)
matched=0.028284271247461905     # 0.02 * sqrt(2): the table's RMS equals learned's init std
variants=(
  "learned|encoding=learned"
  "paper|encoding=sinusoidal encoding.hparams.scale_tokens=true encoding.hparams.table_scale=1"
  "paper-untied|encoding=sinusoidal encoding.hparams.scale_tokens=true model.tie_weights=false"
  "table-rsqrt-d|encoding=sinusoidal encoding.hparams.scale_tokens=false encoding.hparams.table_scale=$d_inv_sqrt"
  "learned-scale|encoding=sinusoidal encoding.hparams.scale_tokens=false encoding.hparams.table_scale=$d_inv_sqrt encoding.hparams.learn_scale=true"
  "table-matched|encoding=sinusoidal encoding.hparams.scale_tokens=false encoding.hparams.table_scale=$matched"
  "table-0.25|encoding=sinusoidal encoding.hparams.scale_tokens=false encoding.hparams.table_scale=0.25"
  "table-1|encoding=sinusoidal encoding.hparams.scale_tokens=false encoding.hparams.table_scale=1"
  "learned-untied|encoding=learned model.tie_weights=false"
)
for seed in "${seeds[@]}"; do
  for variant in "${variants[@]}"; do
    name=${variant%%|*}
    if [[ -n "${VARIANTS:-}" && " $VARIANTS " != *" $name "* ]]; then continue; fi
    read -r -a overrides <<< "${variant#*|}"
    posexp train "${common[@]}" "${overrides[@]}" seed="$seed" run_name="$name-s$seed"
  done
done
posexp report results/ablate-sinusoidal
