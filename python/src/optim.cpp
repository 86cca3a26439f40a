#include "python/src/bindings.h"

namespace ag::python {

void bind_optim(py::module_& m) { (void)m; }

}  // namespace ag::python
