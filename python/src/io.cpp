#include "python/src/bindings.h"

namespace ag::python {

void bind_io(py::module_& m) { (void)m; }

}  // namespace ag::python
