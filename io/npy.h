// NumPy's .npy files, read and written, so that any tensor can be looked at with numpy.load and
// any array saved with numpy.save can come into ag:
//
//   "\x93NUMPY", version (1, 0) or (2, 0), the header's length (2 bytes in 1.0, 4 in 2.0,
//   little-endian), the header — a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces to a multiple
//   of 64 bytes and ended by '\n' — then the elements.
//
// dtypes: '<f4' → float32, '<f8' → float64, '<i8' → float64 (whole numbers up to 2^53 in
// magnitude). Fortran-order arrays are read correctly (transposed into ag's C order). Writing
// uses version 1.0 (2.0 when the header needs it), C order, '<f4' or '<f8' (or '<i8' on request).
// Anything else is refused with an NpyError naming the file and the problem, before any tensor is
// allocated.
#pragma once

#include <string>
#include <string_view>

#include "autograd/error.h"
#include "autograd/tensor.h"
#include "io/file.h"

namespace ag {

class NpyError : public IoError {
 public:
  using IoError::IoError;
};

Tensor read_npy(const std::string& path);
Tensor parse_npy(std::string_view bytes, const std::string& source = "<memory>");

// as_int64: store as '<i8' (the values must be whole numbers).
WriteResult write_npy(const std::string& path, const Tensor& tensor, bool as_int64 = false);
std::string serialize_npy(const Tensor& tensor, bool as_int64 = false);

}  // namespace ag
