// Where a parameter's rows live when it is sharded on dim 0 as torch.chunk cuts it: rank r
// holds rows [r·c, min(rows, (r+1)·c)) with c = ceil(rows / N), so the last ranks' chunks are
// shorter or empty. In a unit's flat all-gather and reduce-scatter buffers each rank's part
// holds every parameter's chunk padded to c rows, one after the other. Internal to libddp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ddp::fsdp {

struct ShardLayout {
  std::vector<int64_t> shape;  // the whole parameter's (a 0-dim parameter as {1})
  int64_t rows = 0;            // shape[0]
  int64_t row_numel = 1;       // elements per row
  int64_t chunk_rows = 0;      // c, the padded chunk
  int64_t offset = 0;          // of this parameter's chunk in a rank's part of the unit buffer

  ShardLayout(std::vector<int64_t> whole, int world, int64_t offset_in_unit)
      : shape(whole.empty() ? std::vector<int64_t>{1} : std::move(whole)), offset(offset_in_unit) {
    rows = shape[0];
    for (size_t d = 1; d < shape.size(); ++d) row_numel *= shape[d];
    chunk_rows = (rows + world - 1) / world;
  }

  int64_t first_row(int rank) const { return std::min(rows, rank * chunk_rows); }
  int64_t local_rows(int rank) const {
    return std::min(rows, (rank + 1) * chunk_rows) - first_row(rank);
  }
  int64_t local_numel(int rank) const { return local_rows(rank) * row_numel; }
  int64_t padded_numel() const { return chunk_rows * row_numel; }
  std::vector<int64_t> local_shape(int rank) const {
    std::vector<int64_t> s = shape;
    s[0] = local_rows(rank);
    return s;
  }
};

}  // namespace ddp::fsdp
