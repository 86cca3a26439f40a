// ScopedSetting: sets one of ag's global switches for a scope and restores the previous value on
// exit, also when an exception leaves the scope. NoGradGuard, AnomalyModeGuard,
// AttentionKernelGuard and nn::FusedKernelsGuard are all this class:
//   { ag::AttentionKernelGuard tiled(ag::AttentionKernel::tiled); Tensor O = ag::attention(...); }
#pragma once

namespace ag {

template <class T, T (*get)(), void (*set)(T)>
class ScopedSetting {
 public:
  explicit ScopedSetting(T value) : previous_(get()) { set(value); }
  ~ScopedSetting() { set(previous_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T previous_;
};

}  // namespace ag
