"""ag.nn: ag's modules under d2l's and PyTorch's names (python/src/nn.cpp)."""
