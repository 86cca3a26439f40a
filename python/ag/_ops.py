"""The Python side of ag's ops (the ops themselves are C++: python/src/ops.cpp)."""

__all__ = []
