#!/usr/bin/env bash
# ddp.cpp's ImageFolder loader (build/bench-loader) against PyTorch's (bench/loader_reference.py:
# torchvision's ImageFolder and transforms on PIL through DataLoader), on the same files and the
# same CPUs, in turns: per round ours then theirs for the train pipeline (RandomResizedCrop 224,
# flip, ToTensor, Normalize), the same for eval (Resize 256, CenterCrop 224, ToTensor,
# Normalize), then full-size decoding alone: ours over DIR/train's first files in order against
# libjpeg-turbo's tjbench (one core, decompression only, to RGB) on a sample of the same files.
# Medians over the rounds; per core = images/s over the cores used (ours: THREADS loader
# threads; PyTorch: num_workers = THREADS worker processes; tjbench: 1). Every file is read once
# before the first turn, so both sides decode from the page cache. The last line is the train
# pipeline's ratio ddp.cpp / PyTorch, as N.NNx.
#
# usage: bench/loader.sh [--tier native|avx512|avx2|sse41] DIR [THREADS (nproc)]
#   --tier: both sides decode and transform as on a CPU of that tier (scripts/cpu-tier.sh: the
#           resampler's copy, libjpeg-turbo's SIMD, LibTorch's kernels); the head names it.
#   DIR: an ImageFolder root with train/ and val/ (tools/make_imagefolder.py writes one:
#        .venv/bin/python tools/make_imagefolder.py /tmp/imagenet-like --classes 10 --train 160 --val 40)
#   ROUNDS=3         rounds of turns
#   IMAGES=1024      images timed per run (whole batches of 64; fewer where DIR has fewer)
#   WARMUP=2         batches not timed at the start of each run: passed to bench-loader as
#                    --warmup-batches when its --help lists that flag, else 0 for both sides
#   DECODE_FILES=16  files tjbench decodes (every k-th of DIR/train in ImageFolder's order)
#   DDP_BUILD=build  where bench-loader is; DDP_PYTHON the reference Python (bench/common.sh)
set -euo pipefail
usage="usage: bench/loader.sh [--tier TIER] DIR [THREADS]"
if [[ ${1:-} == --tier ]]; then
  tier=${2:?--tier needs native, avx512, avx2 or sse41}
  shift 2
  [[ ${DDP_CPU_TIER:-} == "$tier" ]] ||
    exec "$(dirname "$0")/../scripts/cpu-tier.sh" "$tier" "$0" "$@"
fi
dir=$(realpath "${1:?$usage}")
cd "$(dirname "$0")/.."
source bench/common.sh
threads=${2:-$(nproc)}
rounds=${ROUNDS:-3}
images=${IMAGES:-1024}
warmup=${WARMUP:-2}
decode_files=${DECODE_FILES:-16}
batch=64
ours=$build/bench-loader

[[ -d $dir/train && -d $dir/val ]] || { echo "loader: $dir has no train/ and val/ folders" >&2; exit 2; }
[[ -x $ours ]] || { echo "loader: $ours is missing (build it: cmake --build $build --target bench-loader)" >&2; exit 2; }
if ! command -v tjbench >/dev/null; then
  echo "loader: tjbench is missing: apt-get install libjpeg-turbo-progs (scripts/setup.sh installs it)" >&2
  exit 2
fi
((threads >= 1)) || { echo "loader: THREADS must be at least 1" >&2; exit 2; }

# Our binary's warm-up flag, when it has one; without it neither side skips batches.
ours_warmup=()
help=$("$ours" --help 2>&1 || true)
if [[ $help == *--warmup-batches* ]]; then
  ours_warmup=(--warmup-batches "$warmup")
else
  warmup=0
fi

# ImageFolder's files of a split in its order (classes and files sorted by name, extensions as
# torchvision's IMG_EXTENSIONS); the reference Python lists them so the order is torchvision's.
list_files() {
  "$python" - "$1" <<'EOF'
import sys
import torchvision.datasets as d
for path, _ in d.ImageFolder(sys.argv[1]).samples:
    print(path)
EOF
}
mapfile -t train_files < <(list_files "$dir/train")
mapfile -t val_files < <(list_files "$dir/val")
# Images per run: IMAGES in whole batches, at most what the split has after the warm-up.
run_images() {
  local have=$(($1 / batch - warmup))
  local want=$(((images + batch - 1) / batch))
  ((have >= 1)) || { echo "loader: $1 images are fewer than $((warmup + 1)) batches of $batch" >&2; exit 2; }
  echo $(((want < have ? want : have) * batch))
}
train_images=$(run_images "${#train_files[@]}")
eval_images=$(run_images "${#val_files[@]}")
decode_images=$((images < ${#train_files[@]} ? images : ${#train_files[@]}))

# The files' mean megapixels: FILE... (read from the headers).
mean_megapixels() {
  "$python" - "$@" <<'EOF'
import sys
from PIL import Image
pixels = 0
for path in sys.argv[1:]:
    with Image.open(path) as im:
        pixels += im.width * im.height
print(f"{pixels / 1e6 / max(1, len(sys.argv) - 1):.4f}")
EOF
}
decode_mp=$(mean_megapixels "${train_files[@]:0:decode_images}")
# tjbench's sample: every k-th training file.
step=$(((${#train_files[@]} + decode_files - 1) / decode_files))
sample=()
for ((i = 0; i < ${#train_files[@]}; i += step)); do sample+=("${train_files[i]}"); done

# The page cache holds every file before the first turn, so that neither side reads the disk.
cat "${train_files[@]}" "${val_files[@]}" >/dev/null

field() { sed -n "s/.*$1=\([0-9.e+-]*\).*/\1/p" | tail -1; }
run_ours() {
  "$ours" --dir "$dir" --pipeline "$1" --threads "$threads" --batch-size "$batch" --images "$2" \
    "${ours_warmup[@]}" | field images_per_second
}
run_theirs() {
  "$python" bench/loader_reference.py --dir "$dir" --pipeline "$1" --workers "$threads" \
    --images "$2" --warmup-batches "$warmup" --batch-size "$batch" | field images_per_second
}
# tjbench over the sample, one core: images/s and megapixels/s (the time per file is its pixels
# over tjbench's decompression megapixels/s, -quiet's last column).
run_tjbench() {
  local f seconds=0 pixels=0 line w h rate
  for f in "${sample[@]}"; do
    line=$(tjbench "$f" -rgb -nowrite -quiet -benchtime 0.1 -warmup 0.02 | awk 'NF >= 9 && $1 == "RGB" { l = $0 } END { print l }')
    read -r w h rate < <(awk '{ print $(NF-4), $(NF-3), $NF }' <<<"$line")
    [[ -n $rate ]] || { echo "loader: tjbench printed no result for $f" >&2; exit 1; }
    pixels=$(awk -v p="$pixels" -v w="$w" -v h="$h" 'BEGIN { printf "%.0f", p + w * h }')
    seconds=$(awk -v s="$seconds" -v w="$w" -v h="$h" -v r="$rate" 'BEGIN { printf "%.9f", s + w * h / (r * 1e6) }')
  done
  awk -v n="${#sample[@]}" -v s="$seconds" -v p="$pixels" 'BEGIN { printf "%.1f %.1f\n", n / s, p / 1e6 / s }'
}

versions=$("$python" -c 'import torch, torchvision, PIL; print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, pillow {PIL.__version__}")')
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
jsimd=$(env | sed -n 's/^\(JSIMD_FORCE[A-Z0-9]*\)=.*/\1/p' | xargs)
resampler=$("$ours" --dir "$dir" --pipeline index | sed -n 's/.* resampler=\([a-z0-9]*\).*/\1/p')
echo "tier: ${DDP_CPU_TIER:-native} (ours: resampler's $resampler copy; libjpeg-turbo: ${jsimd:-its best SIMD})"
echo "reference: $versions ($python); libjpeg-turbo $(dpkg-query -W -f='${Version}' libjpeg-turbo-progs 2>/dev/null || echo '?') tjbench"
echo "files: $dir: ${#train_files[@]} in train/, ${#val_files[@]} in val/; $(du -sh "$dir" | cut -f1)"
echo "runs: $rounds rounds, train $train_images and eval $eval_images images per run after $warmup warm-up batches of $batch," \
  "$threads loader threads (ours) / num_workers $threads (PyTorch); decode: our first $decode_images train files" \
  "(mean $decode_mp megapixels), tjbench ${#sample[@]} of them"
echo
echo "| round | train ddp.cpp | train PyTorch | eval ddp.cpp | eval PyTorch | decode ddp.cpp | decode tjbench (1 core) |"
echo "|---|---|---|---|---|---|---|"
ours_train=() theirs_train=() ours_eval=() theirs_eval=() ours_decode=() tj_ips=() tj_mps=()
for ((r = 1; r <= rounds; r++)); do
  a=$(run_ours train "$train_images")
  b=$(run_theirs train "$train_images")
  c=$(run_ours eval "$eval_images")
  d=$(run_theirs eval "$eval_images")
  e=$(run_ours decode "$decode_images")
  read -r f g < <(run_tjbench)
  for v in "$a" "$b" "$c" "$d" "$e" "$f"; do
    [[ -n $v ]] || { echo "loader: a run printed no images_per_second (round $r)" >&2; exit 1; }
  done
  ours_train+=("$a") theirs_train+=("$b") ours_eval+=("$c") theirs_eval+=("$d")
  ours_decode+=("$e") tj_ips+=("$f") tj_mps+=("$g")
  echo "| $r | $a | $b | $c | $d | $e | $f ($g MP/s) |"
done

fmt() { awk -v a="$1" 'BEGIN { printf "%.1f", a }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "medians of $rounds rounds (img/s; per core: over the $threads cores each side used)"
echo
echo "| pipeline | ddp.cpp img/s | per core | PyTorch img/s (num_workers=$threads) | per core | ratio |"
echo "|---|---|---|---|---|---|"
for p in train eval; do
  declare -n o=ours_$p t=theirs_$p
  mo=$(fmt "$(median "${o[@]}")")
  mt=$(fmt "$(median "${t[@]}")")
  echo "| $p | $mo | $(div "$mo" "$threads") | $mt | $(div "$mt" "$threads") | $(ratio "$mo" "$mt")x |"
  unset -n o t
done
md=$(fmt "$(median "${ours_decode[@]}")")
md_mp=$(awk -v i="$md" -v m="$decode_mp" -v t="$threads" 'BEGIN { printf "%.1f", i * m / t }')
mtj=$(fmt "$(median "${tj_ips[@]}")")
mtj_mp=$(fmt "$(median "${tj_mps[@]}")")
echo "| decode (full size, no transforms) vs tjbench | $md | $(div "$md" "$threads") ($md_mp MP/s) | tjbench, 1 core: $mtj | $mtj ($mtj_mp MP/s) | $(ratio "$md_mp" "$mtj_mp")x per core in MP/s |"
echo
awk -v a="$(median "${ours_train[@]}")" -v b="$(median "${theirs_train[@]}")" 'BEGIN { printf "%.2fx\n", a / b }'
