#include "python/src/bindings.h"

namespace ag::python {

void bind_ops(py::module_& m) { (void)m; }

}  // namespace ag::python
