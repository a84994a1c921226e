# Shared by the bench scripts (sourced): the full-size synthetic data set and a median.
bench_data=build/bench-data

# Writes 50,000 + 10,000 CIFAR-format images to $bench_data once.
ensure_bench_data() {
  [[ -f $bench_data/cifar-10-batches-bin/test_batch.bin ]] ||
    build/ddp-train make-data --out "$bench_data" --train 50000 --test 10000 >/dev/null
}

# The median of its arguments.
median() {
  printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
