#include "nn/fused.h"

#include <atomic>

namespace ag::nn {

namespace {
std::atomic<bool> g_fused_kernels{true};
}  // namespace

bool fused_kernels() { return g_fused_kernels.load(std::memory_order_relaxed); }
void set_fused_kernels(bool enabled) { g_fused_kernels.store(enabled, std::memory_order_relaxed); }

}  // namespace ag::nn
