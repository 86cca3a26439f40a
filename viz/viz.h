// ag's pictures, all in one include: images and PNG files (image.h), the viridis colour map
// (colormap.h), a 5×7 bitmap font (font.h), heatmaps and d2l's show_heatmaps (heatmap.h), and
// gnuplot line plots from CSV files (curves.h). The library is ag::viz (libpng; gnuplot at run time
// for the line plots only).
#pragma once

#include "viz/colormap.h"
#include "viz/curves.h"
#include "viz/font.h"
#include "viz/heatmap.h"
#include "viz/image.h"
