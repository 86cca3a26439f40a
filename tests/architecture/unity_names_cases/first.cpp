// An input of the test architecture_unity_names_catches_overloads (never compiled): with
// second.cpp, the collisions check_unity_names.py must find.
#include <string>

namespace ag {
namespace {
int helper(int x) { return x; }  // second.cpp's helper(long) would join this overload set
}  // namespace
}  // namespace ag

using ag::viz::testing::run;  // second.cpp defines its own run

namespace {
const char* kText = "namespace { int quoted(int); }";  // a string: nothing declared
}  // namespace
