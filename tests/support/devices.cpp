// device_available (test_support.h): only in the test binaries that link the backends.
#include "backend/backend.h"
#include "support/test_support.h"

namespace perfx::test {

bool device_available(const std::string& device, std::string* why) {
  try {
    create_backend(device, 1);
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace perfx::test
