"""ag.optim: SGD, Adam, AdamW and their schedules (python/src/optim.cpp)."""
