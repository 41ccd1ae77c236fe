// netstorm.geoserver._dataplane: the compiled data plane (docs/dataplane.md). Each part
// registers its own classes and functions.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace netstorm {
void register_core(py::module_ &m);
void register_bulk(py::module_ &m);
}

PYBIND11_MODULE(_dataplane, m) {
    m.doc() = "netstorm's compiled data plane: the WAN chunk path of a DC server";
    netstorm::register_core(m);
    netstorm::register_bulk(m);
}
