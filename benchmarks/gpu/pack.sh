#!/usr/bin/env bash
# Pack the bundle of `benchmarks/gpu/kar_cv.py collect` for a GPU machine without network:
#   benchmarks/gpu/pack.sh [WORK=runs/gpu]  ->  WORK/carry (the sets' files, encoder.tar.xz, wheels/)
# The encoder's bf16 weights are dequantised 4-bit values, so xz halves them (46 -> 19 MB). The wheel is
# the transformers this repository is tested with (a GPU image may hold an older one).
set -eu
work=${1:-runs/gpu}
mkdir -p "$work/carry/wheels"
cp "$work"/bundle/*.json.gz "$work"/bundle/*_tagger.pkl "$work/carry/"
[ -f "$work/carry/encoder.tar.xz" ] || tar -C "$work/bundle" -cf - encoder | xz -T0 -6 > "$work/carry/encoder.tar.xz"
v=$(python3 -c "import transformers; print(transformers.__version__)")
ls "$work"/carry/wheels/transformers-"$v"-*.whl >/dev/null 2>&1 || \
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$work/carry/wheels" "transformers==$v"
du -sh "$work/carry"
