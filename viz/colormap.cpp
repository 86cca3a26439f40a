#include "viz/colormap.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ag::viz {

Rgb viridis(double t) {
  // Anchors at t = 0, 1/9, …, 1 along the viridis colour map (van der Walt and Smith, 2015): it was
  // designed so that equal steps in t look like equal steps of lightness (CAM02-UCS), from dark
  // purple to yellow.
  static constexpr std::array<Rgb, 10> anchors{
      {{68, 1, 84}, {72, 40, 120}, {62, 74, 137}, {49, 104, 142}, {38, 130, 142}, {31, 158, 137},
          {53, 183, 121}, {109, 205, 89}, {180, 222, 44}, {253, 231, 37}}};
  if (std::isnan(t)) fail<ValueError>("viridis: t is NaN");
  t = std::clamp(t, 0.0, 1.0);
  // t lies between anchors k and k + 1 at fraction f: colour = (1 − f)·anchor_k + f·anchor_{k+1}.
  const double position = t * static_cast<double>(anchors.size() - 1);
  const std::size_t k = std::min(static_cast<std::size_t>(position), anchors.size() - 2);
  const double f = position - static_cast<double>(k);
  auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround((1 - f) * a + f * b));
  };
  return {mix(anchors[k].r, anchors[k + 1].r), mix(anchors[k].g, anchors[k + 1].g),
      mix(anchors[k].b, anchors[k + 1].b)};
}

double luminance(Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

}  // namespace ag::viz
