#!/usr/bin/env bash
# The prepared GPU checks, for a lent H200 (the device tool) or any CUDA machine.
#
#   bash scripts/gpu.sh bench       # scripts/bench.py at the reference shape, eager + compiled,
#                                   # one ALiBi row per kernel (flex, sdpa; flash if installed),
#                                   # x-transformers side by side when it is installed; then
#                                   # scripts/bench_train.py: posexp train end to end there
#   bash scripts/gpu.sh reproduce   # a chunk of posexp reproduce --preset gpu: it carries on
#                                   # from the records committed under results/reproduce-gpu,
#                                   # trains what fits in TIME_LIMIT (default 6m: one 10-minute
#                                   # device command with the install, the start-up and the
#                                   # report beside) and returns every completed run's record
#                                   # and the report in $OUT/reproduce-gpu-records.tgz
#   bash scripts/gpu.sh encodings   # the same for --preset encodings-gpu (the other encodings
#                                   # and the randomized runs beside the gpu preset's)
#   bash scripts/gpu.sh pretrained  # posexp pretrained --preset tinyllama-gpu: TinyLlama 1.1B,
#                                   # every RoPE scaling at factors 2-8 to 4x its context, and
#                                   # passkey (expected time in configs/pretrained/
#                                   # tinyllama-gpu.yaml; unmeasured). Needs transformers among
#                                   # the wheels, and the model in HF_HUB_CACHE or a local copy
#                                   # named by PRETRAINED_MODEL=DIR: the machine has no network
#
# On the device machine (no internet, no hydra/omegaconf/datasets/x-transformers): run
#   ../shared/tools/device-wheels.sh x-transformers==2.31.10 einops einx frozendict loguru \
#       torch-einops-utils
# here once, then call the device tool with carry [".whl"]
# and the command `bash scripts/gpu.sh bench` (then `... reproduce`, a second call: each is
# sized to fit one 10-minute command; bench.py rewrites its files after every row, so one
# cut short by the limit still returns what it measured, marked incomplete). Results land
# in $OUT (or ./gpu-out elsewhere); copy the bench's to results/bench/, unpack the records
# into results/ (tar -xzf reproduce-gpu-records.tgz -C results) and commit them.
set -euo pipefail
case "${1:-}" in
    bench|reproduce|encodings|pretrained) ;;
    *) echo "usage: bash scripts/gpu.sh bench|reproduce|encodings|pretrained" >&2; exit 2 ;;
esac
out=${OUT:-gpu-out}
mkdir -p "$out"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
fi
# posexp installed, not read from the tree: the wheel maps configs/ to posexp.configs, which
# the source tree does not have; PYTHONSAFEPATH keeps ./posexp off the path of `python3 -m`
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target /tmp/site .
export PYTHONPATH=/tmp/site PYTHONSAFEPATH=1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
case "${1:-}" in
    bench)
        kernels=flex,sdpa
        if python3 -c "import flash_attn" 2>/dev/null; then kernels=flash,$kernels; fi
        xt=()
        if python3 -c "import x_transformers" 2>/dev/null; then xt=(--xtransformers); fi
        python3 scripts/bench.py --compile --bias-kernels "$kernels" "${xt[@]}" --out "$out" \
            2>&1 | tee "$out/bench.log"
        # posexp train end to end at the same shape, two processes an encoding, beside the
        # bench's step rate (E2E_ENCODINGS, default rope,alibi: about 2 minutes each)
        python3 scripts/bench_train.py --encodings "${E2E_ENCODINGS:-rope,alibi}" \
            --bench "$(ls -t "$out"/bench-cuda-*.json | head -1)" --out "$out" \
            2>&1 | tee "$out/bench_train.log"
        ;;
    reproduce|encodings)
        preset=gpu
        if [ "$1" = encodings ]; then preset=encodings-gpu; fi
        # a campaign carries on from its records: those committed are copied in first
        mkdir -p /tmp/posexp-gpu
        if [ -d results/reproduce-gpu ]; then cp -r results/reproduce-gpu /tmp/posexp-gpu/; fi
        rc=0
        python3 -m posexp reproduce --preset "$preset" --results-dir /tmp/posexp-gpu \
            --time-limit "${TIME_LIMIT:-6m}" 2>&1 | tee "$out/$1.log" || rc=$?
        # every completed run's record (its directory without the checkpoint) and the
        # reports, to be unpacked into results/ and committed: tar -xzf ... -C results
        bash scripts/records.sh /tmp/posexp-gpu reproduce-gpu "$out/reproduce-gpu-records.tgz"
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then exit "$rc"; fi  # 3: the time limit
        ;;
    pretrained)
        model=()
        if [ -n "${PRETRAINED_MODEL:-}" ]; then model=("$PRETRAINED_MODEL"); fi
        HF_HUB_OFFLINE=1 python3 -m posexp pretrained "${model[@]}" --preset tinyllama-gpu \
            results_dir=/tmp/posexp-gpu 2>&1 | tee "$out/pretrained.log"
        python3 -m posexp report /tmp/posexp-gpu/pretrained-gpu 2>&1 | tee -a "$out/pretrained.log"
        tar -czf "$out/pretrained-gpu.tgz" -C /tmp/posexp-gpu pretrained-gpu
        ;;
esac
