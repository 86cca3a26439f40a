// NumPy's .npy files, read and written, so that any tensor can be looked at with numpy.load and
// any array saved with numpy.save can come into ag:
//
//   "\x93NUMPY", version (1, 0) or (2, 0), the header's length (2 bytes in 1.0, 4 in 2.0,
//   little-endian), the header — a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces to a multiple
//   of 64 bytes and ended by '\n' — then the elements.
//
// dtypes: '<f4' ↔ float32, '<f8' ↔ float64, '<i8' ↔ int64 (every int64, exactly), '|b1' ↔ bool
// (one byte each, 0 or 1; any other byte is refused), read and written alike. Fortran-order arrays
// are read correctly (transposed into ag's C order). Writing uses version 1.0 (2.0 when the header
// needs it), C order, and the tensor's own dtype: to store floats as '<i8', convert them first
// (ag::tensor(x.to_vector<int64_t>(), x.shape()) refuses a value that is not whole). (Before
// int64 tensors existed, '<i8' was read into float64 and written by a flag, as_int64; it is gone.)
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

// In the tensor's dtype: '<f4', '<f8', '<i8' or '|b1'.
WriteResult write_npy(const std::string& path, const Tensor& tensor);
std::string serialize_npy(const Tensor& tensor);

}  // namespace ag
