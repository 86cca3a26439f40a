#include "nn/fused.h"

#include <atomic>

namespace ag::nn {

namespace {
std::atomic<bool> g_fused_kernels{true};
std::atomic<AttentionKernel> g_attention_kernel{AttentionKernel::automatic};
}  // namespace

bool fused_kernels() { return g_fused_kernels.load(std::memory_order_relaxed); }
void set_fused_kernels(bool enabled) { g_fused_kernels.store(enabled, std::memory_order_relaxed); }

AttentionKernel attention_kernel() { return g_attention_kernel.load(std::memory_order_relaxed); }
void set_attention_kernel(AttentionKernel kernel) { g_attention_kernel.store(kernel, std::memory_order_relaxed); }

bool use_tiled_attention(int64_t keys) {
  switch (attention_kernel()) {
    case AttentionKernel::whole_rows: return false;
    case AttentionKernel::tiled: return true;
    case AttentionKernel::automatic: break;
  }
  return keys >= kTiledAttentionFromKeys;
}

}  // namespace ag::nn
