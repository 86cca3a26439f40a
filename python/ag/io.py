"""ag.io: safetensors, .npy and ag's checkpoints (python/src/io.cpp)."""
