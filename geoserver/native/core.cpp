// The Python face of the data plane (netstorm.geoserver._dataplane.DataPlane), used by
// geoserver/server/native_plane.py. Arrays cross without copies where the bytes stay
// unchanged (received frames, totals); what Python hands in is copied once.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/numpy.h>

#include "dataplane.hpp"

namespace py = pybind11;

namespace netstorm {

namespace {
const char *DTYPE_NAMES[] = {"uint8", "float32", "float16", "float64", "int32", "int64",
                             "uint8", "int8"};

py::array view(const BufRef &buf, uint8_t dtype, bool writable = false) {
    static py::object np_dtype = py::module_::import("numpy").attr("dtype");
    size_t item = dtype ? itemsize_of(dtype) : 1;
    auto *keep = new BufRef(buf);
    py::capsule owner(keep, [](void *p) { delete static_cast<BufRef *>(p); });
    py::array out(py::dtype::from_args(np_dtype(DTYPE_NAMES[dtype < 8 ? dtype : 0])),
                  {buf->size() / item}, {item}, buf->data(), owner);
    if (!writable)
        py::detail::array_proxy(out.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return out;
}

BufRef copy_in(const py::buffer &data) {
    py::buffer_info info = data.request();
    if (info.ndim > 1) {
        ssize_t expect = info.itemsize;
        for (ssize_t i = info.ndim - 1; i >= 0; --i) {
            if (info.strides[i] != expect) throw std::invalid_argument("array is not contiguous");
            expect *= info.shape[i];
        }
    } else if (info.ndim == 1 && info.strides[0] != info.itemsize && info.shape[0] > 1) {
        throw std::invalid_argument("array is not contiguous");
    }
    size_t n = info.size * info.itemsize;
    BufRef buf = Buf::allocate(n);
    if (n) std::memcpy(buf->data(), info.ptr, n);
    return buf;
}

py::list frames_of(const OutMessage &m) {
    py::list out;
    out.append(view(m.header, 0));
    out.append(m.meta ? py::object(view(m.meta, 0)) : py::object(py::array_t<uint8_t>(0)));
    for (auto &p : m.payload) out.append(view(p, 0));
    return out;
}

// a message Python encoded (header, meta, payload frames), copied in, queued by `priority`
OutMessage out_message(std::vector<double> priority, const py::list &frames) {
    if (frames.size() < 2) throw std::invalid_argument("a message has 2 frames or more");
    OutMessage msg;
    msg.priority = std::move(priority);
    msg.header = copy_in(frames[0].cast<py::buffer>());
    if (msg.header->size() != HEADER_BYTES) throw std::invalid_argument("header size");
    BufRef meta = copy_in(frames[1].cast<py::buffer>());
    if (meta->size()) msg.meta = meta;
    for (size_t i = 2; i < frames.size(); ++i)
        msg.payload.push_back(copy_in(frames[i].cast<py::buffer>()));
    return msg;
}

py::list queued_list(std::vector<OutMessage> msgs) {
    py::list out;
    for (auto &m : msgs) out.append(py::make_tuple(py::tuple(py::cast(m.priority)), frames_of(m)));
    return out;
}

py::object event_tuple(Event &e) {
    switch (e.type) {
        case Event::MSG: {
            py::list frames;
            for (auto &f : e.frames) frames.append(view(f, 0));
            return py::make_tuple("msg", frames, e.has_user_id ? py::object(py::str(e.user_id)) : py::none(),
                                  py::str(e.peer_address));
        }
        case Event::DELIVERED:
            return py::make_tuple("delivered", e.cid.key, e.cid.chunk, e.cid.rnd, e.cid.version,
                                  e.cid.tree, view(e.data, e.dtype));
        case Event::ARRIVAL:
            return py::make_tuple("arrival", e.dc, e.bytes, e.queued, e.t, e.behind);
        case Event::ROUTE:
            return py::make_tuple("route", e.dc, e.kind, e.cid.key, e.cid.chunk, e.cid.rnd,
                                  e.cid.version, e.cid.tree, view(e.data, e.dtype));
        case Event::NOTE:
        default:
            return py::make_tuple("note", e.dc, e.level, e.text);
    }
}

std::unique_ptr<DataPlane> make(uintptr_t router, int wake_fd, int own, int node_id,
                                std::vector<std::string> names, std::map<int, int> servers,
                                std::map<std::string, int> principals, bool curve,
                                size_t max_chunk_bytes, int64_t rounds_ahead, int64_t held_bytes,
                                std::map<std::string, double> delays, size_t min_split_bytes,
                                size_t retain_bytes, py::object transmit, py::object clock) {
    std::string why;
    const ZmqApi *z = zmq_api(&why);
    if (z == nullptr) throw std::runtime_error(why);
    Settings s;
    s.own = own;
    s.node_id = (uint16_t)node_id;
    s.names = std::move(names);
    for (auto &[node, dc] : servers) s.servers[(uint16_t)node] = dc;
    s.principals = std::move(principals);
    s.curve = curve;
    s.max_chunk_bytes = max_chunk_bytes;
    s.rounds_ahead = rounds_ahead;
    s.held_bytes = held_bytes;
    s.delays = std::move(delays);
    s.min_split_bytes = min_split_bytes;
    s.retain_bytes = retain_bytes;
    auto plane = std::make_unique<DataPlane>(z, reinterpret_cast<void *>(router), wake_fd,
                                             std::move(s));
    if (!transmit.is_none())        // socket-free: every call comes from Python (GIL held)
        plane->queues.transmit = [transmit](int dc, OutMessage &m) {
            return transmit(dc, frames_of(m)).cast<bool>();
        };
    if (!clock.is_none())
        plane->clock = [clock]() { return clock().cast<double>(); };
    return plane;
}
}  // namespace

void register_core(py::module_ &m) {
    m.def("zmq_unavailable", []() {
        std::string why;
        return zmq_api(&why) == nullptr ? why : std::string();
    }, "Why the data plane cannot reach ZeroMQ ('' if it can).");
    m.def("recognise", [](py::list frames, py::object user, int own, std::map<int, int> servers,
                          std::map<std::string, int> principals, bool curve,
                          size_t max_chunk_bytes) -> py::object {
        // the data plane's fast-path test on a message's frames (routing id excluded)
        Peers p;
        p.own = own;
        for (auto &[node, dc] : servers) p.servers[(uint16_t)node] = dc;
        p.principals = std::move(principals);
        p.curve = curve;
        p.max_chunk_bytes = max_chunk_bytes;
        std::vector<py::buffer_info> infos;
        for (auto f : frames) infos.push_back(f.cast<py::buffer>().request());
        auto bytes = [&](size_t i) { return i < infos.size() ? (size_t)(infos[i].size * infos[i].itemsize) : 0; };
        std::string u = user.is_none() ? "" : user.cast<std::string>();
        Header h;
        int source = -1;
        if (infos.empty() ||
            !recognise(p, infos.size(), static_cast<const uint8_t *>(infos[0].ptr), bytes(0),
                       bytes(1), bytes(2), user.is_none() ? nullptr : &u, &h, &source))
            return py::none();
        py::dict d;
        d["kind"] = h.kind; d["sender"] = h.sender; d["flags"] = h.flags; d["dtype"] = h.dtype;
        d["tree"] = h.tree; d["policy"] = h.policy; d["key"] = h.key; d["chunk"] = h.chunk;
        d["seq"] = h.seq; d["request"] = h.request; d["source"] = source;
        d["payload_bytes"] = bytes(2);
        return d;
    }, "The fast path's verdict on one message: its fields, or None (Python's path).");
    m.def("add_arrays", [](int dtype, py::buffer a, py::buffer b) {
        BufRef x = copy_in(a), y = copy_in(b);
        if (x->size() != y->size() || !itemsize_of(dtype)) throw std::invalid_argument("sizes");
        add_arrays((uint8_t)dtype, x->data(), x->data(), y->data(), x->size() / itemsize_of(dtype));
        return view(x, (uint8_t)dtype);
    }, "a + b in the wire dtype `dtype` (a test hook for the sum kernels)");

    py::class_<DataPlane>(m, "DataPlane")
        .def(py::init(&make), py::arg("router"), py::arg("wake_fd"), py::arg("own"),
             py::arg("node_id"), py::arg("names"), py::arg("servers"), py::arg("principals"),
             py::arg("curve"), py::arg("max_chunk_bytes"), py::arg("rounds_ahead"),
             py::arg("held_bytes"), py::arg("delays"), py::arg("min_split_bytes"),
             py::arg("retain_bytes"), py::arg("transmit") = py::none(),
             py::arg("clock") = py::none())
        .def("run", [](DataPlane &d, double timeout_s, size_t max_arrivals) {
            if (d.queues.transmit) throw std::logic_error("a socket-free data plane has no loop");
            py::gil_scoped_release free;
            d.run(timeout_s, max_arrivals);
        })
        .def("take_events", [](DataPlane &d) {
            auto events = d.take_events();
            py::list out;
            for (auto &e : events) out.append(event_tuple(e));
            return out;
        })
        .def("set_socket", [](DataPlane &d, int dc, uintptr_t sock) {
            d.set_socket(dc, reinterpret_cast<void *>(sock));
        })
        .def("set_route", &DataPlane::set_route)
        // the bulk channel: keys live as long as the data plane (re-keys are rare)
        .def("set_bulk", [](DataPlane &d, int dc, uintptr_t sock, BulkSealer *sealer,
                            size_t max_frame) {
            d.queues.set_bulk(dc, reinterpret_cast<void *>(sock), sealer, max_frame);
        }, py::keep_alive<1, 4>(), py::arg("dc"), py::arg("socket"), py::arg("sealer").none(true),
           py::arg("max_frame"))
        .def("set_bulk_router", [](DataPlane &d, uintptr_t sock) {
            d.set_bulk_router(reinterpret_cast<void *>(sock));
        })
        .def("set_opener", [](DataPlane &d, int dc, BulkOpener *opener, int node) {
            d.set_opener(dc, opener, (uint16_t)node);
        }, py::keep_alive<1, 3>(), py::arg("dc"), py::arg("opener").none(true), py::arg("node"))
        .def("add_tree", [](DataPlane &d, uint32_t version, int index, int trees, int parent,
                            std::vector<int> children, int down_parent,
                            std::vector<int> down_children, int root) {
            TreeView v{parent, std::move(children), down_parent, std::move(down_children), root};
            d.exchange.add_tree(version, (uint8_t)index, (uint8_t)trees, std::move(v));
        })
        .def("knows", [](DataPlane &d, uint32_t v) { return d.exchange.knows(v); })
        .def("forget_version", [](DataPlane &d, uint32_t v) { d.exchange.forget_version(v); })
        .def("policy_added", [](DataPlane &d) { d.exchange.policy_added(); })
        .def("restart", [](DataPlane &d, uint32_t floor) { d.exchange.restart(floor); })
        .def("forget_after", [](DataPlane &d, std::map<uint32_t, uint64_t> rounds) {
            d.exchange.forget_after(rounds);
        })
        .def("contribute", [](DataPlane &d, uint32_t key, uint32_t chunk, uint64_t rnd,
                              uint32_t version, int tree, int dtype, py::buffer data) {
            d.exchange.contribute({key, chunk, rnd, version, (uint8_t)tree}, (uint8_t)dtype,
                                  copy_in(data));
        })
        .def("on_chunk", [](DataPlane &d, int source, int kind, uint32_t key, uint32_t chunk,
                            uint64_t rnd, uint32_t version, int tree, int dtype, py::buffer data) {
            d.exchange.on_chunk(source, (uint8_t)kind, {key, chunk, rnd, version, (uint8_t)tree},
                                (uint8_t)dtype, copy_in(data));
        })
        .def("send", [](DataPlane &d, int dc, std::vector<double> priority, py::list frames) {
            d.queues.send(dc, out_message(std::move(priority), frames), d.clock());
        })
        .def("requeue", [](DataPlane &d, int dc, std::vector<double> priority, py::list frames) {
            d.queues.requeue(dc, out_message(std::move(priority), frames));
        })
        .def("flush", [](DataPlane &d, int dc) { d.queues.flush(dc, d.clock()); })
        .def("paused", [](DataPlane &d) { d.queues.paused(); })
        .def("backlogged", [](DataPlane &d) { return d.queues.backlogged(); })
        .def("waiting", [](DataPlane &d, int dc) {
            return dc < 0 ? d.queues.waiting_all() : d.queues.waiting(dc);
        })
        .def("progress", [](DataPlane &d, int dc) { return d.queues.progress(dc); })
        .def("last_bytes", [](DataPlane &d, int dc) { return d.queues.last_bytes(dc); })
        .def("last_timed", [](DataPlane &d, int dc) { return d.queues.last_timed(dc); })
        .def("take", [](DataPlane &d, int dc) {
            auto [handed, waiting] = d.queues.take(dc);
            py::list h;
            for (auto &m : handed) h.append(frames_of(m));
            return py::make_tuple(h, queued_list(std::move(waiting)));
        })
        .def("release_before", [](DataPlane &d, uint64_t round) {
            return d.queues.release_before(round);
        }, py::arg("round"))
        .def("retained", [](DataPlane &d, int dc) { return d.queues.retained(dc); })
        .def("take_waiting", [](DataPlane &d, int dc) {
            return queued_list(d.queues.take_waiting(dc));
        })
        .def_property_readonly("in_flight", [](DataPlane &d) { return d.exchange.in_flight(); })
        .def_property_readonly("waiting_chunks", [](DataPlane &d) { return d.exchange.waiting(); })
        .def_property_readonly("held", [](DataPlane &d) { return d.exchange.held(); })
        .def_property_readonly("own_round", [](DataPlane &d) { return d.exchange.own_round(); })
        .def_property_readonly("counters", [](DataPlane &d) {
            py::dict c;
            c["sent_chunks"] = d.exchange.sent_chunks;
            c["sent_bytes"] = d.exchange.sent_bytes;
            c["reused"] = d.exchange.buffers.reused;
            c["made"] = d.exchange.buffers.made;
            c["fast"] = d.fast;
            c["handed_over"] = d.handed_over;
            c["delayed"] = d.delayed;
            c["messages_out"] = d.queues.sent_messages;
            c["bytes_out"] = d.queues.sent_bytes;
            c["sealed"] = d.queues.sealed_messages;
            c["opened"] = d.opened;
            c["refused"] = d.refused;
            return c;
        });
}

}  // namespace netstorm
