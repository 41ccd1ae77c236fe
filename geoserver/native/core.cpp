// Placeholder until the chunk path lands: reports whether ZeroMQ's functions were found.
#include <pybind11/pybind11.h>

#include "zmq_api.hpp"

namespace py = pybind11;

namespace netstorm {
void register_core(py::module_ &m) {
    m.def("zmq_unavailable", []() {
        std::string why;
        return zmq_api(&why) == nullptr ? why : std::string();
    }, "Why the data plane cannot reach ZeroMQ ('' if it can).");
}
}  // namespace netstorm
