"""ag.viz: heatmaps and curves as PNG files (python/src/io.cpp)."""
