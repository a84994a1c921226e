#include "tools/preview.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ddp/atomic_file.h"
#include "ddp/checkpoint/checkpoint.h"
#include "ddp/data/loader.h"
#include "ddp/error.h"
#include "ddp/sampler.h"
#include "ddp_build_config.h"
#include "options.h"
#include "train/training_data.h"
#include "train/training_setup.h"

#if defined(DDP_HAVE_CAIRO)
#include <cairo.h>

#include <c10/util/StringUtil.h>
#endif

namespace ddp::train {
namespace {

constexpr const char* kUsage =
    "usage: ddp-train preview --dataset NAME [--data-dir DIR] [--split train|val] -o GRID.png\n"
    "                         [--save-tensor FILE] [training flags: --batch-size, --image-size,\n"
    "                         --hflip, --normalize, --random-crop, --seed, ...]\n\n"
    "Draws the first batch as the model sees it: --split train (default) after the training\n"
    "augmentation of epoch 1 on one rank, val through the evaluation pipeline, each image with\n"
    "its class name. --save-tensor also writes the batch as a dict (images, labels, indices\n"
    "into the data set) that Python's torch.load reads.\n";

struct PreviewRequest {
  std::string out, save_tensor;
  bool val = false;
  std::vector<std::string> train_flags;  // everything else
};

PreviewRequest parse_request(const std::vector<std::string>& args) {
  PreviewRequest r;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "-o" || a == "--out" || a == "--save-tensor" || a == "--split") {
      if (!has_value) throw InvalidArgument(c10::str("preview: ", a, " needs a value\n", kUsage));
      const std::string& v = args[++i];
      if (a == "--save-tensor") {
        r.save_tensor = v;
      } else if (a == "--split") {
        if (v != "train" && v != "val") {
          throw InvalidArgument(c10::str("preview: --split is train or val, not '", v, "'"));
        }
        r.val = v == "val";
      } else {
        r.out = v;
      }
    } else {
      r.train_flags.push_back(a);
    }
  }
  if (r.out.empty()) throw InvalidArgument(c10::str("preview needs -o GRID.png\n", kUsage));
  if (r.out.size() < 4 || r.out.compare(r.out.size() - 4, 4, ".png") != 0) {
    throw InvalidArgument(c10::str("preview -o ", r.out, ": the file must end in .png"));
  }
  return r;
}

// The batch's images back in [0, 255], as uint8 [B, H, W, 3] (grey images repeated).
torch::Tensor displayable(const torch::Tensor& images, const TrainOptions& o) {
  torch::Tensor x = images.to(torch::kFloat32).contiguous();
  if (o.normalize) {
    std::vector<float> mean, std;
    data::default_normalization(o.dataset, mean, std);
    const int64_t c = x.size(1);
    x = x * torch::tensor(std).view({1, c, 1, 1}) + torch::tensor(mean).view({1, c, 1, 1});
  }
  x = (x.clamp(0, 1) * 255).round().to(torch::kUInt8);
  if (x.size(1) == 1) x = x.expand({x.size(0), 3, x.size(2), x.size(3)});
  return x.permute({0, 2, 3, 1}).contiguous();
}

#if defined(DDP_HAVE_CAIRO)
// A grid of tiles, each an image scaled (nearest) to at least 96 pixels with its name below.
void draw_grid(const torch::Tensor& hwc, const std::vector<std::string>& names,
               const std::string& out) {
  const int count = int(hwc.size(0)), h = int(hwc.size(1)), w = int(hwc.size(2));
  const int cols = int(std::ceil(std::sqrt(double(count))));
  const int rows = (count + cols - 1) / cols;
  const double zoom = std::max(1, 96 / std::max(h, w));
  const int tile_w = int(w * zoom), tile_h = int(h * zoom), label = 18, gap = 4;
  cairo_surface_t* grid = cairo_image_surface_create(
      CAIRO_FORMAT_RGB24, cols * (tile_w + gap) + gap, rows * (tile_h + label + gap) + gap);
  cairo_t* cr = cairo_create(grid);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 12);
  const uint8_t* pixels = hwc.data_ptr<uint8_t>();
  for (int i = 0; i < count; ++i) {
    cairo_surface_t* tile = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    uint8_t* dst = cairo_image_surface_get_data(tile);
    const int stride = cairo_image_surface_get_stride(tile);
    for (int y = 0; y < h; ++y) {
      auto* row = reinterpret_cast<uint32_t*>(dst + y * stride);
      const uint8_t* src = pixels + (size_t(i) * h + y) * w * 3;
      for (int x = 0; x < w; ++x) {
        row[x] = (uint32_t(src[3 * x]) << 16) | (uint32_t(src[3 * x + 1]) << 8) | src[3 * x + 2];
      }
    }
    cairo_surface_mark_dirty(tile);
    const double x0 = gap + (i % cols) * (tile_w + gap),
                 y0 = gap + (i / cols) * (tile_h + label + gap);
    cairo_save(cr);
    cairo_translate(cr, x0, y0);
    cairo_scale(cr, zoom, zoom);
    cairo_set_source_surface(cr, tile, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_paint(cr);
    cairo_restore(cr);
    cairo_surface_destroy(tile);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_move_to(cr, x0 + 1, y0 + tile_h + 13);
    cairo_show_text(cr, names[size_t(i)].c_str());
  }
  // Into memory, then written whole: a file that is there is complete.
  std::string png;
  const cairo_status_t status = cairo_surface_write_to_png_stream(
      grid,
      [](void* closure, const unsigned char* data, unsigned int length) {
        static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
        return CAIRO_STATUS_SUCCESS;
      },
      &png);
  cairo_destroy(cr);
  cairo_surface_destroy(grid);
  if (status != CAIRO_STATUS_SUCCESS) {
    throw Error(
        c10::str("preview: cairo could not make the PNG (", cairo_status_to_string(status), ")"));
  }
  write_file_atomic(out, png);
}
#else
void draw_grid(const torch::Tensor&, const std::vector<std::string>&, const std::string& out) {
  throw InvalidArgument(c10::str("preview: cannot draw ", out,
                                 ": this ddp-train was built without cairo (DDP_WITH_CAIRO=OFF; "
                                 "Debian: libcairo2-dev)"));
}
#endif  // DDP_HAVE_CAIRO

}  // namespace

int run_preview(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--help") != args.end()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const PreviewRequest r = parse_request(args);
  bool help = false;
  const TrainOptions o = parse_train_options(r.train_flags, help);
  const TrainingData d = open_training_data(o, data_dir_of(o));
  const auto& source = r.val ? d.test : d.train;
  std::vector<int64_t> indices;
  if (r.val) {  // evaluation's order: the data set's
    for (int64_t i = 0; i < std::min<int64_t>(o.batch_size, int64_t(source->size())); ++i)
      indices.push_back(i);
  } else {  // epoch 1's shuffled order on one rank
    DistributedSampler sampler(int64_t(source->size()), 1, 0, SamplerOptions().seed(o.seed));
    indices = sampler.indices();
  }
  data::LoaderOptions l = loader_options(o, 1, torch::kCPU);
  data::Loader loader(source, l);
  const data::Batch batch = loader.make_batch(indices, 0, 0);
  std::vector<std::string> names;
  for (int64_t i = 0; i < batch.labels.size(0); ++i) {
    const int64_t label = batch.labels[i].item<int64_t>();
    names.push_back(label < int64_t(d.class_names.size()) ? d.class_names[size_t(label)]
                                                          : std::to_string(label));
  }
  draw_grid(displayable(batch.images, o), names, r.out);
  std::printf("preview: %lld %s image(s) of %s drawn to %s\n", (long long)batch.labels.size(0),
              r.val ? "val" : "train", (r.val ? d.test_description : d.train_description).c_str(),
              r.out.c_str());
  if (!r.save_tensor.empty()) {
    save_tensors(r.save_tensor, {{"images", batch.images},
                                 {"labels", batch.labels},
                                 {"indices", torch::tensor(batch.samples, torch::kInt64)}});
    std::printf("preview: the batch written to %s (images, labels, indices)\n",
                r.save_tensor.c_str());
  }
  return 0;
}

}  // namespace ddp::train
