#!/usr/bin/env bash
# One GPU slice of the cross-encoder training (issue 28), or of the bi-encoders' when CARRY_DIR holds
# dense_cv.py's bundle, as run on a lent GPU machine with no network.
#   benchmarks/gpu/device_run.sh CARRY_DIR OUT_DIR BUDGET_MIN [RESUME_DIR]
# CARRY_DIR holds what benchmarks/gpu/pack.sh packed (the bundle, the encoder as encoder.tar.xz and,
# optionally, wheels/*.whl: the transformers this repository is tested with). Checks the scripts on the
# GPU with the tiny test first, then trains until BUDGET_MIN minutes are spent (train_kar.py --resume
# continues a later slice from OUT_DIR's files). TRAIN_ARGS (environment) goes to the bi-encoders' trainer
# (TRAIN_ARGS="--objective batch_hard"; "--data vocab" for NCBI disease's synonyms). A second call in the same
# machine reuses the first one's set-up (the Python packages; the bundle of the same carry).
set -u
carry=$1; out=$2; budget=$3; resume=${4:-}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)
base=$PWD
if [ -d /tmp/site ]; then
  export PYTHONPATH=/tmp/site:$base
elif ls "$carry"/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$carry"/wheels/*.whl && export PYTHONPATH=/tmp/site:$base
  python3 -c "import transformers" 2>/dev/null || { echo "carried transformers does not import; using the machine's"; export PYTHONPATH=$base; }
else
  export PYTHONPATH=$base
fi
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# one bundle per carry (runs/gpu_ncbi/carry -> /tmp/bundle-gpu_ncbi): a second call with another carry in the
# same machine must not train on the first one's
bundle=/tmp/bundle-$(basename "$(cd "$carry/.." && pwd)")
[ -d $bundle/encoder ] || { mkdir -p $bundle && cp "$carry"/*.gz $bundle/ && tar -xJf "$carry"/encoder.tar.xz -C $bundle
  cp "$carry"/*_tagger.pkl $bundle/ 2>/dev/null; }
dense=$(ls $bundle/*_dense.pkl.gz 2>/dev/null)
[ -n "$dense" ] || python3 -m pytest -q -x -p no:cacheprovider --noconftest tests/test_gpu_kar.py 2>&1 | tail -3
used=$(( ($(date +%s) - start) ))
left=$(python3 -c "print(max(0.5, $budget - $used / 60))")
echo "setup took ${used}s; training for ${left} min"
if [ -n "$dense" ]; then  # the bi-encoders (dense_cv.py): OUT's finished folds are kept, so OUT is also the resume
  sets=$(for f in $dense; do basename "$f" _dense.pkl.gz; done | paste -sd,)
  python3 benchmarks/gpu/dense_cv.py train --bundle $bundle --out "$out" --sets "$sets" --budget-min "$left" \
    ${TRAIN_ARGS:-}
else
  python3 benchmarks/gpu/train_kar.py --bundle $bundle --out "$out" --budget-min "$left" ${resume:+--resume "$resume"}
fi
