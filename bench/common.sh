# Shared by the bench scripts (sourced): the build, the reference Python, the full-size synthetic
# data set, a median.
build=${DDP_BUILD:-build}  # the build folder whose programs are measured
# The bench programs, which scripts/setup.sh leaves to their first use (a no-op once built).
cmake --build "$build" --target bench-ceiling bench-loader bench-allreduce >/dev/null
bench_data=$build/bench-data

# The Python with torch that the build compares against (its CMake cache says which: .venv's by
# default, Debian's python3 with --libtorch debian); DDP_PYTHON overrides it.
reference_python() {
  local cached
  cached=$(sed -n 's/^DDP_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
  echo "${DDP_PYTHON:-${cached:-python3}}"
}
python=$(reference_python)

# Writes 50,000 + 10,000 CIFAR-format images to $bench_data once.
ensure_bench_data() {
  [[ -f $bench_data/cifar-10-batches-bin/test_batch.bin ]] ||
    "$build/ddp-train" make-data --out "$bench_data" --train 50000 --test 10000 >/dev/null
}

# The median of its arguments.
median() {
  printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The value of KEY in the last record of the --metrics file FILE that has it: last_metric FILE KEY.
last_metric() { sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" "$1" | tail -1; }

# A free TCP port on loopback.
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# images/s of the Python reference (bench/reference_ddp.py): 4 workers x 1 thread, STEPS steps
# of 64 images per worker on $bench_data.
reference_images_per_second() {
  "$python" bench/reference_ddp.py --data-dir "$bench_data" --world-size 4 --threads 1 \
    --epochs 1 --max-steps "$1" --no-eval --port "$(free_port)" 2>/dev/null |
    sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p'
}

# images/s of ddp-train with the reference settings (4 workers, batch 64) on $bench_data, STEPS
# steps, then any further flags.
ddp_train_images_per_second() {
  local steps=$1
  shift
  "$build/ddp-train" --nproc-per-node 4 --data-dir "$bench_data" --epochs 1 --max-steps "$steps" \
    --no-eval --log-every 1000000 "$@" | sed -n 's/.*epoch 1\/1 .* \([0-9.]*\) img\/s.*/\1/p'
}
