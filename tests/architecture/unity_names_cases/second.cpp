// An input of the test architecture_unity_names_catches_overloads (never compiled): see first.cpp.
namespace ag {
namespace {
long helper(long x) { return x; }
}  // namespace
namespace nn {
namespace {
int helper(int x) { return x; }  // ag::nn::helper: another namespace, no collision
}  // namespace
}  // namespace nn
}  // namespace ag

namespace {
int run(const char*) { return 0; }
int quoted(int) { return 1; }
}  // namespace
