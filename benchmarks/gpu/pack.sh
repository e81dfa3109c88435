#!/usr/bin/env bash
# Pack the bundle of `benchmarks/gpu/kar_cv.py collect` (or dense_cv.py's) for a GPU machine without network:
#   benchmarks/gpu/pack.sh [WORK=runs/gpu]  ->  WORK/carry (the sets' files, encoder.tar.xz, wheels/);
#   WORK is runs/gpu_dense for the bi-encoders
# The encoder's bf16 weights are dequantised 4-bit values, so xz halves them (46 -> 19 MB). The wheel is
# the transformers this repository is tested with (a GPU image may hold an older one).
set -eu
work=${1:-runs/gpu}
mkdir -p "$work/carry/wheels"
# the cross-encoder's bundle (kar_cv.py collect) or the bi-encoders' (dense_cv.py collect)
cp "$work"/bundle/*.gz "$work/carry/"
cp "$work"/bundle/*_tagger.pkl "$work/carry/" 2>/dev/null || true
[ -f "$work/carry/encoder.tar.xz" ] || tar -C "$work/bundle" -cf - encoder | xz -T0 -6 > "$work/carry/encoder.tar.xz"
v=$(python3 -c "import transformers; print(transformers.__version__)")
ls "$work"/carry/wheels/transformers-"$v"-*.whl >/dev/null 2>&1 || \
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$work/carry/wheels" "transformers==$v"
if ls "$work"/bundle/*_dense.pkl.gz >/dev/null 2>&1; then
  # the bi-encoders' training mines hard negatives with faiss and loads them through sentence-transformers:
  # the GPU image has no faiss and may hold another sentence-transformers; Python 3.12 there
  for pkg in "faiss-cpu==$(python3 -c 'import faiss; print(faiss.__version__)')" \
             "sentence-transformers==$(python3 -c 'import sentence_transformers as s; print(s.__version__)')"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$work/carry/wheels" "$pkg"
  done
fi
du -sh "$work/carry"
