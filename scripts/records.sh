#!/usr/bin/env bash
# The records of an experiment's completed runs -- each run's directory without its
# checkpoint (results/.gitignore's rule) -- and the experiment's reports, in one archive: what
# a lent GPU sends back to be committed under results/ (scripts/gpu.sh).  A run that did not
# complete is left out: without its checkpoint it could not be resumed, only trained again.
#
#   bash scripts/records.sh ROOT EXPERIMENT ARCHIVE.tgz
#
# ROOT holds EXPERIMENT/; the archive unpacks to EXPERIMENT/... (tar -xzf ARCHIVE -C results).
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: bash scripts/records.sh ROOT EXPERIMENT ARCHIVE.tgz" >&2
    exit 2
fi
root=$1 experiment=$2 archive=$(realpath -m "$3")
if [ ! -d "$root/$experiment" ]; then
    echo "records: no experiment $experiment under $root" >&2
    exit 2
fi
cd "$root"
members=() runs=0
for run_json in "$experiment"/*/run.json; do
    [ -f "$run_json" ] || continue
    if grep -q '"status": "completed"' "$run_json"; then
        members+=("$(dirname "$run_json")")
        runs=$((runs + 1))
    fi
done
for report in "$experiment"/report*/; do
    [ -d "$report" ] && members+=("${report%/}")
done
tar --exclude=checkpoint.pt --exclude='.*.tmp' --exclude='eval.json.*' \
    -czf "$archive" "${members[@]}" --files-from /dev/null
echo "records: $experiment: $runs completed runs, $(( ${#members[@]} - runs )) reports -> $archive"
