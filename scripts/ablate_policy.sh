#!/usr/bin/env bash
# Which initialisation and head tying should every encoding share?  Trains the five seed
# encodings (nope, learned, sinusoidal, rope, alibi) under each policy below at the CPU
# claim suites' scale (L=128, 2M tokens, lr 0.004, seed 0), then writes the report and the
# table scripts/choose.py makes of it (results/ablate-policy/report/choice.md).  The rule,
# fixed before the runs: the policy whose mean final training loss over the five encodings
# is lowest (training loss, not the scored validation text: one pass over the data, so it
# estimates the held-out loss without touching the text the claims are judged on).
#   gpt2-tied     GPT-2's N(0, 0.02) everywhere, residual projections / sqrt(2 layers), tied
#                 head; sinusoidal with Vaswani et al.'s recipe (tokens x sqrt(d), drawn with
#                 std d^-1/2), without which its sines drown tokens of std 0.02
#   gpt2-untied   the same with an untied head
#   torch-untied  PyTorch's defaults (nn.Embedding N(0, 1), nn.Linear Kaiming-uniform),
#                 untied head; sinusoidal's sines added to the N(0, 1) tokens as they are
# About 4 minutes per run on one core; JOBS=2 trains two at a time, one thread each.
#   scripts/ablate_policy.sh            (results under results/ablate-policy)
set -euo pipefail
jobs=${JOBS:-1}
if [[ "$jobs" -gt 1 && -z "${OMP_NUM_THREADS:-}" ]]; then
  OMP_NUM_THREADS=$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))
  export OMP_NUM_THREADS
fi
results=${RESULTS_DIR:-results}
common="results_dir=$results experiment=ablate-policy train.seq_len=128 train.tokens=2000000 train.lr=0.004 train.log_every=5 train.val_every_tokens=200000 eval.tokens=131072 eval.lengths=[128,256,512]"
recipe="encoding.hparams.scale_tokens=true encoding.hparams.unit_tokens=true"
plain="encoding.hparams.scale_tokens=false encoding.hparams.unit_tokens=false"
# name|model overrides|sinusoidal's overrides
policies=(
  "gpt2-tied|model.init=gpt2 model.tie_weights=true|$recipe"
  "gpt2-untied|model.init=gpt2 model.tie_weights=false|$recipe"
  "torch-untied|model.init=torch model.tie_weights=false|$plain"
)
commands=()
for policy in "${policies[@]}"; do
  IFS='|' read -r name model sin <<< "$policy"
  for enc in nope learned sinusoidal rope alibi; do
    extra=$([[ $enc == sinusoidal ]] && echo "$sin" || true)
    commands+=("posexp train $common encoding=$enc $model $extra run_name=$enc-$name-s0")
  done
done
# set -f: eval.lengths=[128,256,512] is an override, not a file pattern
printf '%s\n' "${commands[@]}" | xargs -P "$jobs" -I{} bash -fc '{}'
posexp report "$results/ablate-policy"
python "$(dirname "$0")/choose.py" "$results/ablate-policy" --by policy
