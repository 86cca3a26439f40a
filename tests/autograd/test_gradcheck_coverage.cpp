// Every op in autograd/op_list.h must be exercised by at least one float64 gradcheck: this test
// runs all the cases of test_gradcheck_ops.cpp, records which ops their backward passes went
// through, and names any op that none of them reached.
#include <set>
#include <sstream>

#include "gradcheck_cases.h"

TEST_CASE("every differentiable op has a float64 gradcheck", "[gradcheck][coverage]") {
  std::set<std::string> reached;
  ag::BackwardObserverGuard observe([&](const ag::Node& node, const ag::Tensor&, const ag::Grads&) {
    reached.insert(node.name());
  });
  REQUIRE(!ag_test::gradcheck_cases().empty());
  for (const ag_test::GradcheckCase& c : ag_test::gradcheck_cases()) {
    const ag::GradcheckResult result = c.run();
    INFO(c.name << ": " << result.message);
    CHECK(result.passed);
  }
  std::ostringstream missing;
  for (const char* name : ag::kOpNames)
    if (!reached.count(name)) missing << name << " ";
  INFO("ops without a gradcheck: " << missing.str());
  CHECK(missing.str().empty());
}
