#!/usr/bin/env bash
# One prepared GPU check (under 8 minutes on one GPU): the GPU tests, then ddp / 16-mixed / fsdp
# smoke runs on generated data. Everything it finds goes to the results folder:
#   bash scripts/gpu_check.sh [results-folder]      (default: $OUT, else gpu_check_results/)
# On a machine without internet, put wheels of what is missing (hydra-core, omegaconf,
# antlr4-python3-runtime) in .whl/ first; they are installed from there.
set -uo pipefail
cd "$(dirname "$0")/.."
results=$(realpath -m "${1:-${OUT:-gpu_check_results}}")
mkdir -p "$results"
PY=${PY:-python3}
export BRISK_ROOT=$(mktemp -d) PYTHONUNBUFFERED=1

if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --find-links .whl .whl/*.whl >"$results/install.log" 2>&1
fi
# brisk itself, without letting pip replace the machine's torch or lightning
$PY -m pip install -q --no-deps -e . >>"$results/install.log" 2>&1 || echo "pip install -e . failed" >>"$results/install.log"
nvidia-smi >"$results/nvidia-smi.txt" 2>&1
$PY -c "import torch, lightning; print(torch.__version__, lightning.__version__, torch.cuda.get_device_name())" \
    >"$results/versions.txt" 2>&1

timeout 300 $PY -m pytest -q -m gpu tests/project/test_gpu.py -p no:cacheprovider >"$results/pytest_gpu.txt" 2>&1
echo "gpu tests: exit $?" | tee "$results/status.txt"

base="data=synthetic trainer=gpu trainer.max_epochs=2 callbacks.progress_bar=null"
while read -r name args; do
    timeout 90 $PY -m brisk.train $base $args >"$results/$name.log" 2>&1
    rc=$?
    run_dir=$(tail -n 1 "$results/$name.log")
    [ -f "$run_dir/summary.json" ] && cp "$run_dir/summary.json" "$results/$name.summary.json"
    echo "$name: exit $rc" | tee -a "$results/status.txt"
done <<'RUNS'
ddp_16mixed strategy=ddp trainer.devices=1 precision=16-mixed accumulation=2
fsdp_bf16 strategy=fsdp trainer.devices=1 precision=bf16-mixed
airbench_bf16_cl model=airbench precision=bf16-mixed data.channels_last=true data.batch_size=1024
RUNS
cat "$results/status.txt"
