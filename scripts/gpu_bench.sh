#!/usr/bin/env bash
# The speed lab on a GPU machine (not yet timed on one; stopped after LIMIT, 330 s by default): bench.json, bench.md
# and PNG plots in one folder.
#
#   scripts/gpu_bench.sh [OUT] [more brisk-bench overrides...]
#
# OUT defaults to logs/gpu_bench/<date>_<time>. It sets up .venv if brisk or matplotlib is missing,
# then runs `brisk-bench preset=gpu` (src/brisk_lab/conf/preset/gpu.yaml) on generated data of CIFAR-10's shapes:
# the input pipeline, brisk vs a plain loop (airbench's net among them: its brisk / plain ratio is printed against
# the 0.90 target), airbench's net at batch 1024 in fp16/bf16 next to the ~154k images/s of airbench94, and the
# lever sweep. With several GPUs it adds 1 vs all GPUs.
# Then `brisk-train experiment=speedrun` on generated data of CIFAR-10's shape (50,000 + 10,000 images), compiled,
# in bf16, into OUT/speedrun: its summary.json holds images/s, seconds per epoch and the time-to-accuracy clock
# (airbench94 needs 8 epochs of 50,000 images in 2.59 s on an A100: about 154k images/s).
# The lab stops at LIMIT seconds (default 330), the speedrun at SPEEDRUN_LIMIT (default 110); bench.json is
# rewritten after each part, so what finished is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-logs/gpu_bench/$(date +%Y-%m-%d_%H-%M-%S)}
shift || true
LIMIT=${LIMIT:-330}
SPEEDRUN_LIMIT=${SPEEDRUN_LIMIT:-110}
PY=${PY:-python3}

if [ ! -d src/brisk_lab ]; then
    echo "gpu_bench: this project has no speed lab (src/brisk_lab); nothing to run." >&2
    exit 2
fi
if ! .venv/bin/python -c "import brisk_lab.bench, matplotlib" 2>/dev/null; then
    [ -x .venv/bin/python ] || "$PY" -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[plots]'
fi

GPUS=$(.venv/bin/python -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -lt 1 ]; then
    echo "gpu_bench: skipped: no CUDA GPU is visible to torch, so there is nothing to measure." >&2
    exit 0
fi
mkdir -p "$OUT"
{ nvidia-smi || true; } > "$OUT/nvidia-smi.txt" 2>&1

ARGS=(preset=gpu "hydra.run.dir=$OUT")
if [ "$GPUS" -gt 1 ]; then
    # 1 GPU vs all of them: the devices lever with this machine's count (src/brisk_lab/conf/bench.yaml has 1 vs 2).
    RUN=$(.venv/bin/python - <<'PY'
from hydra import compose, initialize_config_dir
from brisk_lab.bench import CONFIG_PATH
with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
    print(",".join(compose(config_name="bench", overrides=["preset=gpu"]).bench.run))
PY
)
    ARGS+=("bench.run=[$RUN,devices]" "~bench.levers.devices.values.2"
           "+bench.levers.devices.values.$GPUS=['trainer.devices=$GPUS','strategy=ddp']")
fi

status=0
# python -m: the lab of this checkout, even where .venv's console scripts are out of date.
timeout --signal=INT --kill-after=30 "$LIMIT" .venv/bin/python -m brisk_lab.bench "${ARGS[@]}" "$@" || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "gpu_bench: stopped at LIMIT=${LIMIT}s; $OUT/bench.json holds the parts that finished." >&2
elif [ "$status" -ne 0 ]; then
    echo "gpu_bench: brisk-bench failed (exit $status); see $OUT/bench.log." >&2
    exit "$status"
fi
.venv/bin/python - "$OUT/bench.json" <<'PY' || true
import json, sys
o = json.load(open(sys.argv[1]))["parts"]["overhead"]["airbench"]
print(f"airbench's net, batch {o['batch_size']}, {o['precision']}: brisk {o['brisk_images_per_sec']:,.0f} images/s, "
      f"plain loop {o['plain_images_per_sec']:,.0f}: brisk / plain (median of round ratios) {o['ratio']:.3f} (target: at least 0.90); "
      f"same loss: {o['same_loss']}")
PY

# The speedrun as airbench times it; generated data, so its accuracy says nothing of CIFAR-10's 94%.
timeout --signal=INT --kill-after=30 "$SPEEDRUN_LIMIT" .venv/bin/python -m brisk.train experiment=speedrun \
    data=synthetic data.synthetic.n_train=50000 data.synthetic.n_test=10000 trainer=gpu \
    model.compile=true precision=bf16-mixed "hydra.run.dir=$OUT/speedrun" > "$OUT/speedrun.log" 2>&1 \
    || echo "gpu_bench: the speedrun failed or ran past SPEEDRUN_LIMIT=${SPEEDRUN_LIMIT}s; see $OUT/speedrun.log." >&2
.venv/bin/python - "$OUT/speedrun/summary.json" <<'PY' || true
import json, sys
s = json.load(open(sys.argv[1]))
per_epoch = s["fit_seconds"] / max(1, s["epochs"])
print(f"speedrun: {s['images_per_sec']:,.0f} images/s, {per_epoch:.2f} s an epoch over {s['epochs']} epochs; "
      f"time_to_accuracy: {json.dumps(s['time_to_accuracy']['test'])} (airbench94 on an A100: ~154k images/s)")
PY
echo "$OUT"
