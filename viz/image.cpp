#include "viz/image.h"

#include <png.h>

#include <cstring>
#include <string>

#include "io/file.h"

namespace ag::viz {

// ---- Image --------------------------------------------------------------------------------------

Image::Image(int64_t width, int64_t height, Rgb background) : width_(width), height_(height) {
  if (width <= 0 || height <= 0 || width > (1 << 15) || height > (1 << 15))
    fail<ValueError>("Image: size ", width, "x", height, " is not in 1…32768 x 1…32768");
  rgb_.resize(static_cast<std::size_t>(3 * width * height));
  for (std::size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = background.r;
    rgb_[i + 1] = background.g;
    rgb_[i + 2] = background.b;
  }
}

Rgb Image::at(int64_t x, int64_t y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_)
    fail<ValueError>(
        "Image::at: pixel (", x, ", ", y, ") is outside the ", width_, "x", height_, " image");
  const std::size_t i = static_cast<std::size_t>(3 * (y * width_ + x));
  return {rgb_[i], rgb_[i + 1], rgb_[i + 2]};
}

void Image::set(int64_t x, int64_t y, Rgb colour) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const std::size_t i = static_cast<std::size_t>(3 * (y * width_ + x));
  rgb_[i] = colour.r;
  rgb_[i + 1] = colour.g;
  rgb_[i + 2] = colour.b;
}

void Image::fill(int64_t x, int64_t y, int64_t w, int64_t h, Rgb colour) {
  for (int64_t row = std::max<int64_t>(y, 0); row < std::min(y + h, height_); ++row)
    for (int64_t col = std::max<int64_t>(x, 0); col < std::min(x + w, width_); ++col)
      set(col, row, colour);
}

void Image::blit(const Image& source, int64_t x, int64_t y) {
  for (int64_t row = 0; row < source.height(); ++row)
    for (int64_t col = 0; col < source.width(); ++col) set(x + col, y + row, source.at(col, row));
}

// ---- PNG files ----------------------------------------------------------------------------------

// libpng's simplified API (png_image): no setjmp/longjmp in our code; a failure comes back as a
// zero return with the reason in image.message.

void write_png(
    const std::string& path, int64_t width, int64_t height, const std::vector<uint8_t>& rgb) {
  if (width <= 0 || height <= 0 || width > (1 << 15) || height > (1 << 15))
    fail<ShapeError>(
        "write_png: size ", width, "x", height, " of '", path, "' is not in 1…32768 x 1…32768");
  if (rgb.size() != static_cast<std::size_t>(3 * width * height))
    fail<ShapeError>("write_png: a ", width, "x", height, " RGB image needs 3·", width, "·", height,
        " = ", 3 * width * height, " bytes, got ", rgb.size(), " (for '", path, "')");
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  // Encoded in memory, then written atomically (io/file.h): libpng's own file writer truncates the
  // path first and deletes it when a write fails — an earlier picture, or /dev/null as root.
  const auto stride = static_cast<png_int_32>(3 * width);
  png_alloc_size_t bytes = 0;
  std::string encoded;
  if (png_image_write_to_memory(&image, nullptr, &bytes, 0, rgb.data(), stride, nullptr)) {
    encoded.resize(bytes);
    if (!png_image_write_to_memory(&image, encoded.data(), &bytes, 0, rgb.data(), stride, nullptr))
      bytes = 0;
  }
  if (bytes == 0 || image.warning_or_error > 1) {
    const std::string reason = image.message;
    png_image_free(&image);
    throw IoError("write_png: cannot encode '" + path + "': " + reason);
  }
  encoded.resize(bytes);
  write_file_atomically(path, encoded, "write_png:");
}

void write_png(const std::string& path, const Image& image) {
  write_png(path, image.width(), image.height(), image.rgb());
}

Image read_png(const std::string& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    const std::string reason = image.message;
    png_image_free(&image);
    throw IoError("read_png: cannot read '" + path + "': " + reason);
  }
  if (image.width > (1u << 15) || image.height > (1u << 15)) {
    png_image_free(&image);
    throw IoError("read_png: '" + path + "' is " + std::to_string(image.width) + "x" +
                  std::to_string(image.height) + ", larger than 32768x32768");
  }
  image.format = PNG_FORMAT_RGB;
  Image out(image.width, image.height);
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
  const png_color background{255, 255, 255};  // where the file has alpha, composite onto white
  if (!png_image_finish_read(&image, &background, pixels.data(), 0, nullptr)) {
    const std::string reason = image.message;
    png_image_free(&image);
    throw IoError("read_png: cannot decode '" + path + "': " + reason);
  }
  for (int64_t y = 0; y < out.height(); ++y)
    for (int64_t x = 0; x < out.width(); ++x) {
      const std::size_t i = static_cast<std::size_t>(3 * (y * out.width() + x));
      out.set(x, y, {pixels[i], pixels[i + 1], pixels[i + 2]});
    }
  return out;
}

}  // namespace ag::viz
