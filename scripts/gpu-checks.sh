#!/usr/bin/env bash
# The GPU checks, on a machine with a CUDA device and fl-gym installed (at most 910 s, the sum of
# the steps' limits; on one H200 the tests took 22-28 s and each vec step 39-59 s): the GPU tests,
# then the benchmark sections docs/performance.md quotes for a GPU, each step under its own time
# limit so that one slow step leaves the others' results. Logs go to OUT, seven files: steps.txt,
# then one per step, an id's eager and graphed vec runs in one.
# Usage: scripts/gpu-checks.sh OUT [PYTHON]   (PYTHON: the interpreter with fl-gym installed; default python3)
set -uo pipefail
out=${1:?usage: scripts/gpu-checks.sh OUT [PYTHON]}
python=${2:-python3}
if [[ $python == */* ]]; then  # a path: absolute, as the checks run from another folder (links kept: a venv's)
    python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(mktemp -d)"  # not the repo's root, whose fl_gym/ folder would shadow the installed package
step() {  # NAME SECONDS COMMAND...: run, append to OUT/NAME.txt (NAME's first word), say how it ended
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "== $name" >>"$out/${name%% *}.txt"
    timeout "$limit" "$@" >>"$out/${name%% *}.txt" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a "$out/steps.txt"
}
bench=("$python" -m fl_gym.training.cli bench)
"$python" -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" | tee "$out/steps.txt"
step tests 150 "$python" -m pytest -q -p no:cacheprovider "$repo/tests/test_gpu.py" "$repo/tests/test_vector.py" \
    -k "gpu or cuda"
step graphs 120 "${bench[@]}" --sections graphs --device cuda --scenarios S3,S4,S1 --repeats 9
# one process's 64 copies merged in turns of 16 (a CPU's) and of 64 (a GPU's)
step turns 100 "${bench[@]}" --sections turns --device cuda --vec-envs 64 \
    --vec-ids FLSelect-v0,FLAggregate-v0,FLLearningRate-v0
for id in FLSelect-v0 FLAggregate-v0 FLLearningRate-v0; do
    step "vec-$id" 90 "${bench[@]}" --sections vec --device cuda --vec-envs 16 --vec-ids "$id"
    # the batched env replaying CUDA graphs of the merged trainings whose shape recurs
    FL_GYM_CUDA_GRAPHS=1 step "vec-$id graphs" 90 "${bench[@]}" --sections vec --device cuda --vec-envs 16 \
        --vec-ids "$id"
done
