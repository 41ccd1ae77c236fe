// Finding functions in a shared library the process already loaded (pyzmq's bundled libzmq
// and libsodium), so the data plane links against neither and never loads a second copy.
#pragma once
#include <string>

namespace netstorm {

// The handle of the loaded library whose file name contains `name_part` ("libzmq"), or
// nullptr; `path` receives its path. O(loaded libraries).
void *loaded_library(const char *name_part, std::string *path);

}  // namespace netstorm
