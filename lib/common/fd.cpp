// SPDX-License-Identifier: Apache-2.0
#include "common/fd.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/units.hpp"

namespace tutti {

AlignedBuffer::AlignedBuffer(size_t bytes, size_t alignment) {
  size_t rounded = align_up(bytes ? bytes : alignment, alignment);
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0) fail(TUTTI_ENOMEM, "cannot allocate " + format_bytes(rounded) + " of aligned memory");
  std::memset(p, 0, rounded);
  data_ = p;
  size_ = rounded;
}

}  // namespace tutti
