// The colour map of ag's heatmaps.
#pragma once

#include "viz/image.h"

namespace ag::viz {

// A viridis-like perceptual colour map: dark purple (t = 0) through blue and green to yellow
// (t = 1), its lightness rising monotonically, so a larger value is always a lighter cell, also in
// grey print and for colour-blind readers. Linear interpolation between 10 evenly spaced anchor
// colours; t is clamped to [0, 1].
Rgb viridis(double t);
// Relative luminance 0.2126 R + 0.7152 G + 0.0722 B (Rec. 709 weights, on the 0–255 values).
double luminance(Rgb colour);

}  // namespace ag::viz
