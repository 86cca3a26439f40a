// Images and PNG files: an 8-bit RGB raster to draw into, written and read through libpng's
// simplified API. The rest of viz/ (the font, heatmaps) draws into an Image.
//
// Every failure is an exception that names the function and the path or sizes involved: an
// ag::IoError for a file that cannot be written or read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/error.h"

namespace ag::viz {

// ---- images and PNG files -----------------------------------------------------------------------

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};
inline constexpr Rgb white{255, 255, 255}, black{0, 0, 0};

// An RGB image, 8 bits per channel, rows top to bottom, pixels left to right.
class Image {
 public:
  Image(int64_t width, int64_t height, Rgb background = white);  // throws ValueError for sizes <= 0
  int64_t width() const { return width_; }
  int64_t height() const { return height_; }
  Rgb at(int64_t x, int64_t y) const;          // throws ValueError outside the image
  void set(int64_t x, int64_t y, Rgb colour);  // drawing outside the image is ignored (clipping)
  void fill(int64_t x, int64_t y, int64_t w, int64_t h, Rgb colour);  // clipped rectangle
  void blit(const Image& source, int64_t x, int64_t y);     // clipped copy, top-left at (x, y)
  const std::vector<uint8_t>& rgb() const { return rgb_; }  // 3 · width · height bytes

 private:
  int64_t width_, height_;
  std::vector<uint8_t> rgb_;
};

// Writes 8-bit RGB pixels (3 · width · height bytes, row-major, top row first) as a PNG with
// libpng. Throws ShapeError if the sizes do not match, IoError naming the path and libpng's reason
// (e.g. "No such file or directory") if the file cannot be written.
void write_png(
    const std::string& path, int64_t width, int64_t height, const std::vector<uint8_t>& rgb);
void write_png(const std::string& path, const Image& image);

// Reads any PNG (palette, grey, 16-bit and alpha are converted; alpha is composited on white) as
// 8-bit RGB. Throws IoError naming the path and the reason.
Image read_png(const std::string& path);

}  // namespace ag::viz
