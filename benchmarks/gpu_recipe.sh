#!/usr/bin/env bash
# One prepared GPU call (issue 34, ../shared/GPU.md): parity of every shipped scenario on CUDA, the
# CPU-vs-CUDA benchmark (benchmarks/gpu.py: its big, lm, cnn and attack rows) and whole runs under
# device: cpu | auto — all in one go, because a cold machine costs minutes.
#
# Before (on a machine with the package index; the GPU machines have none):
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl \
#       pydantic pydantic-core annotated-types typing-inspection junitparser opacus fastapi \
#       starlette uvicorn pytest-xdist execnet
#   echo .whl/ >> .git/info/exclude
# Then, through the device tool (carry [".whl"], timeout_s 600):
#   bash benchmarks/gpu_recipe.sh
# Everything lands in $OUT (default ./gpu-out): parity.txt, bench.txt, runs.txt, env.txt, and
# summary.txt (the table for the closing note). Every step has its own timeout; together they stay
# under 590 s (30 + 210 + 250 + 2 × 45, plus the install), so the whole script fits one 600 s
# device call. STEPS="bench" (or any subset) reruns only those steps in a second call.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
THREADS=${THREADS:-8}
PY=${PY:-python3}
export LEAKMETER_PROGRESS=0 LEAKMETER_THREADS=$THREADS
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --target .site .whl/*.whl >"$OUT/install.txt" 2>&1
fi
export PYTHONPATH="$PWD/.site:$PWD"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.version.cuda)"
  nproc
} >"$OUT/env.txt" 2>&1

STEPS=${STEPS:-"invariance parity bench runs"}  # a subset reruns only those steps
has() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
XDIST=""
$PY -c "import xdist" 2>/dev/null && XDIST="-n $THREADS"

# 1. the cause: answers do not depend on the batch (CPU and CUDA), the policy's choices
has invariance && timeout 30 $PY - >"$OUT/batch_invariance_cuda.txt" 2>&1 <<'EOF'
import torch
from torch import nn
from victims.local import LocalBackend
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
from victims import devices
devices.strict_numerics()
iface = type("I", (), {"gradient_of": "predicted", "gradient_class": 0})()
for dt in (torch.float32, torch.float64):
    m = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev, dt)
    b = LocalBackend(m, "multiclass", 10, iface, torch.device(dev), dt)
    x = torch.randn(2000, 784, dtype=dt, device=dev)
    ref, g = b.logits(x), b.gradient(x)
    same = all(torch.equal(b.logits(x[:n]), ref[:n]) and torch.equal(b.gradient(x[:n]), g[:n])
               for n in (1, 2, 7, 33, 1000, 1025))
    with torch.no_grad():
        raw = any(not torch.equal(m(x[:n]), m(x)[:n]) for n in (1, 2, 7, 33, 1000, 1025))
    print(f"{dev} {dt}: blocked answers batch-invariant: {same}; raw model batch-dependent: {raw}")
EOF

# 2. parity of every shipped scenario (CPU vs CUDA findings)
has parity && timeout 210 $PY -m pytest -q -p no:cacheprovider $XDIST -m cuda tests/test_device_parity.py \
  tests/attacks/extraction/test_extraction_cuda.py -rf >"$OUT/parity.txt" 2>&1

# 3. the benchmark (per row its CPU half then its CUDA half, same process; a row is printed when
#    done, so a group cut by its timeout keeps its finished rows): the issue's targets at full size
#    first (256 reference models, a surrogate at 20,000 queries, reconn), then the arch: lm decoder
#    (vocab 8192, hidden 256, 6 layers), the Fashion-MNIST CNN (sized to its time slot: 10,000
#    images for 1 epoch, 16 reference CNNs, a surrogate at 2,000 queries with 100 steps per
#    snapshot); the per-attack rows (measured in ../shared/GPU.md) only with BENCH_ATTACKS=1
if has bench; then
  G="$PY benchmarks/gpu.py --threads $THREADS"
  { timeout 110 $G --only big
    timeout 75 $G --only lm
    timeout 65 $G --only cnn --cnn-epochs 1 --cnn-refs 16 --cnn-queries 2000 --surrogate-steps 100
    [ "${BENCH_ATTACKS:-0}" = 1 ] && timeout 60 $G --only attacks; } >"$OUT/bench.txt" 2>&1
fi

# 4. whole runs: the quickstart (issue 34: no slower on CUDA) under device cpu and auto (DEVICES
#    may add cuda: everything on the GPU)
SCENARIOS=${SCENARIOS:-quickstart}
DEVICES=${DEVICES:-"cpu auto"}
has runs || SCENARIOS=""
for sc in $SCENARIOS; do
  for dev in $DEVICES; do
    t0=$(date +%s.%N)
    timeout 45 $PY -m harness.cli run "scenarios/$sc.yaml" --no-tracking --threads "$THREADS" \
      --set "device=$dev" --json "$OUT/$sc-$dev.json" >/dev/null 2>"$OUT/$sc-$dev.err"
    rc=$?
    t1=$(date +%s.%N)
    echo "$sc $dev rc=$rc $(awk "BEGIN {print $t1 - $t0}") s" >>"$OUT/runs.txt"
  done
done

{
  echo "## parity"; tail -n 15 "$OUT/parity.txt" 2>&1
  echo "## batch invariance on CUDA"; cat "$OUT/batch_invariance_cuda.txt" 2>&1
  echo "## benchmark"; cat "$OUT/bench.txt" 2>&1
  echo "## whole runs ($THREADS threads)"; cat "$OUT/runs.txt" 2>&1
  echo "## devices entries (auto)"
  for sc in $SCENARIOS; do
    $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1], {k: v['device'] for k, v in r['devices']['parts'].items()}, r['verdict'])" \
      "$OUT/$sc-auto.json" 2>&1
  done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
