#include "python/src/bindings.h"

namespace ag::python {

void bind_nn(py::module_& m) { (void)m; }

}  // namespace ag::python
