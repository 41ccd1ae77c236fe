#include "bulk_aead.hpp"

#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <limits>
#include <vector>

#include "loaded_library.hpp"

namespace py = pybind11;

namespace netstorm {

namespace {
template <typename F>
bool find(void *lib, const char *name, F *out, std::string *why, bool required = true) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (*out == nullptr && required && why->empty())
        *why = std::string("the loaded libsodium has no ") + name +
               " (AEGIS-256 needs libsodium 1.0.19 or later: pyzmq >= 26 bundles one)";
    return *out != nullptr || !required;
}

bool load(SodiumApi *api, std::string *why) {
    std::string path;
    void *lib = loaded_library("libsodium", &path);
    if (lib == nullptr) {
        *why = "no libsodium is loaded in this process (import zmq first; a pyzmq built "
               "against a system libzmq without libsodium has none)";
        return false;
    }
    SodiumApi a{};
    bool all = find(lib, "sodium_init", &a.init, why) &
               find(lib, "crypto_aead_aegis256_encrypt_detached", &a.encrypt_detached, why) &
               find(lib, "crypto_aead_aegis256_decrypt_detached", &a.decrypt_detached, why) &
               find(lib, "crypto_aead_aegis256_messagebytes_max", &a.messagebytes_max, why) &
               find(lib, "sodium_memzero", &a.memzero, why) &
               find(lib, "randombytes_buf", &a.randombytes, why) &
               find(lib, "sodium_runtime_has_aesni", &a.has_aesni, why, false) &
               find(lib, "sodium_version_string", &a.version, why, false);
    if (!all) return false;
    size_t (*keybytes)() = nullptr, (*abytes)() = nullptr, (*npubbytes)() = nullptr;
    find(lib, "crypto_aead_aegis256_keybytes", &keybytes, why);
    find(lib, "crypto_aead_aegis256_abytes", &abytes, why);
    find(lib, "crypto_aead_aegis256_npubbytes", &npubbytes, why);
    if (!keybytes || !abytes || !npubbytes) return false;
    if (keybytes() != BULK_KEY_BYTES || abytes() != BULK_TAG_BYTES ||
        npubbytes() != BULK_NONCE_BYTES) {
        *why = path + ": AEGIS-256 sizes differ from its specification";
        return false;
    }
    if (a.init() < 0) {   // 0 = initialised now, 1 = already; also picks the AES-NI code
        *why = path + ": sodium_init failed";
        return false;
    }
    *api = a;
    return true;
}

void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
constexpr char LABEL[9] = "nsbulk01";      // domain separation: netstorm bulk frames, v1
}  // namespace

const SodiumApi *sodium_api(std::string *why) {
    static std::mutex mutex;
    static SodiumApi api{};
    static bool ok = false;
    std::lock_guard<std::mutex> lock(mutex);
    if (!ok) {
        std::string reason;
        ok = load(&api, &reason);
        if (!ok && why != nullptr) *why = reason;
    }
    return ok ? &api : nullptr;
}

std::string bulk_unavailable() {
    std::string why;
    const SodiumApi *api = sodium_api(&why);
    if (api == nullptr) return why;
    if (api->has_aesni != nullptr && !api->has_aesni())
        return "this CPU has no AES-NI: AEGIS-256 would be slow and not constant-time";
    return "";
}

const char *open_status_name(OpenStatus s) {
    switch (s) {
        case OpenStatus::ok: return "ok";
        case OpenStatus::short_frame: return "short";
        case OpenStatus::replay: return "replay";
        case OpenStatus::forged: return "forged";
        case OpenStatus::too_long: return "too_long";
    }
    return "unknown";
}

BulkLink::BulkLink(const uint8_t *key, size_t key_len, uint32_t src_dc, uint32_t dst_dc,
                   uint64_t epoch)
    : src_(src_dc), dst_(dst_dc), epoch_(epoch) {
    std::string why;
    api_ = sodium_api(&why);
    if (api_ == nullptr) throw BulkError(why);
    if (key_len != BULK_KEY_BYTES)
        throw BulkError("a bulk link key is " + std::to_string(BULK_KEY_BYTES) +
                        " bytes, not " + std::to_string(key_len));
    std::memcpy(key_.data(), key, BULK_KEY_BYTES);
}

BulkLink::~BulkLink() { close(); }

void BulkLink::close() {
    api_->memzero(key_.data(), key_.size());
    closed_ = true;
}

void BulkLink::check_open() const {
    if (closed_) throw BulkError("this bulk link's key was closed (zeroed)");
}

void BulkLink::nonce_and_aad(uint64_t counter, uint8_t *nonce, uint8_t *aad) const {
    put_u64(nonce, counter);
    put_u64(nonce + 8, epoch_);
    put_u32(nonce + 16, src_);
    put_u32(nonce + 20, dst_);
    std::memcpy(nonce + 24, LABEL, 8);
    std::memcpy(aad, LABEL, 8);
    put_u32(aad + 8, src_);
    put_u32(aad + 12, dst_);
    put_u64(aad + 16, epoch_);
    put_u64(aad + 24, counter);
}

uint64_t BulkSealer::seal_in_place(uint8_t *frame, size_t frame_len) {
    check_open();
    if (frame_len < BULK_OVERHEAD)
        throw BulkError("a bulk frame has room for at least its counter and tag (" +
                        std::to_string(BULK_OVERHEAD) + " bytes)");
    size_t plain = frame_len - BULK_OVERHEAD;
    if (plain > api_->messagebytes_max()) throw BulkError("bulk plaintext too long");
    uint64_t counter = next_.load();
    do {                              // never wraps: a repeated counter would repeat a nonce
        if (counter == std::numeric_limits<uint64_t>::max())
            throw BulkError("bulk link counter exhausted: renew the key (epoch + 1)");
    } while (!next_.compare_exchange_weak(counter, counter + 1));
    uint8_t nonce[BULK_NONCE_BYTES], aad[BULK_AAD_BYTES];
    nonce_and_aad(counter, nonce, aad);
    put_u64(frame, counter);
    uint8_t *m = frame + BULK_COUNTER_BYTES;
    api_->encrypt_detached(m, m + plain, nullptr, m, plain, aad, sizeof aad, nullptr, nonce,
                           key_.data());
    return counter;
}

uint64_t BulkSealer::seal_parts(const uint8_t *const *parts, const size_t *lens, size_t n,
                                uint8_t *out, size_t out_len) {
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) total += lens[i];
    if (out_len != total + BULK_OVERHEAD)
        throw BulkError("bulk output buffer is " + std::to_string(out_len) + " bytes, needs " +
                        std::to_string(total + BULK_OVERHEAD));
    uint8_t *p = out + BULK_COUNTER_BYTES;
    for (size_t i = 0; i < n; ++i) {
        if (lens[i] != 0 && p != parts[i]) std::memmove(p, parts[i], lens[i]);
        p += lens[i];
    }
    return seal_in_place(out, out_len);
}

OpenStatus BulkOpener::open(const uint8_t *frame, size_t len, uint8_t *out,
                            uint64_t *counter) {
    check_open();
    if (len < BULK_OVERHEAD) {
        refused_.fetch_add(1);
        return OpenStatus::short_frame;
    }
    size_t plain = len - BULK_OVERHEAD;
    if (plain > api_->messagebytes_max()) {
        refused_.fetch_add(1);
        return OpenStatus::too_long;
    }
    uint64_t c = get_u64(frame);
    if (counter != nullptr) *counter = c;
    std::lock_guard<std::mutex> lock(mutex_);
    if (c <= last_) {                  // cheap refusal first: nothing decrypted, nothing kept
        refused_.fetch_add(1);
        return OpenStatus::replay;
    }
    uint8_t nonce[BULK_NONCE_BYTES], aad[BULK_AAD_BYTES];
    nonce_and_aad(c, nonce, aad);
    const uint8_t *ct = frame + BULK_COUNTER_BYTES;
    // libsodium checks the tag over the whole message before returning 0 and zeroes `out` if
    // it fails, so no unauthenticated byte is ever handed on; `out == ct` is allowed (the
    // unit tests pin it).
    if (api_->decrypt_detached(out, nullptr, ct, plain, ct + plain, aad, sizeof aad, nonce,
                               key_.data()) != 0) {
        refused_.fetch_add(1);
        return OpenStatus::forged;
    }
    last_ = c;
    return OpenStatus::ok;
}

uint64_t BulkOpener::last_counter() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
}

// ---------------------------------------------------------------------------------------
// Python bindings: buffers in (bytes, bytearray, memoryview, numpy, zmq.Frame), no copies
// beyond the one the operation needs.

namespace {

struct Buffer {          // a contiguous buffer view, released on scope exit
    Py_buffer view{};
    bool held = false;
    Buffer(py::handle obj, bool writable, const char *what) {
        int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj.ptr(), &view, flags) != 0) {
            PyErr_Clear();
            throw py::type_error(std::string(what) + " must be a contiguous" +
                                 (writable ? " writable" : "") + " buffer, not " +
                                 std::string(py::str(py::type::of(obj).attr("__name__"))));
        }
        held = true;
    }
    ~Buffer() {
        if (held) PyBuffer_Release(&view);
    }
    uint8_t *data() const { return static_cast<uint8_t *>(view.buf); }
    size_t size() const { return static_cast<size_t>(view.len); }
};

PyObject *refused_error = nullptr;   // BulkRefused; one reference kept for the process's life

[[noreturn]] void raise_refused(const BulkOpener &o, OpenStatus s, uint64_t counter,
                                size_t len) {
    std::string detail;
    switch (s) {
        case OpenStatus::short_frame:
            detail = "frame of " + std::to_string(len) + " bytes is shorter than counter + tag";
            break;
        case OpenStatus::too_long: detail = "frame too long"; break;
        case OpenStatus::replay:
            detail = "counter " + std::to_string(counter) + " is not above the last accepted " +
                     std::to_string(o.last_counter()) + " (replayed or reordered)";
            break;
        default: detail = "authentication tag does not verify (wrong key, link or bytes)";
    }
    std::string msg = std::string(open_status_name(s)) + ": bulk frame on link dc " +
                      std::to_string(o.src_dc()) + " -> dc " + std::to_string(o.dst_dc()) +
                      ", epoch " + std::to_string(o.epoch()) + ": " + detail;
    py::object exc = py::reinterpret_borrow<py::object>(refused_error)(msg);
    exc.attr("reason") = open_status_name(s);
    exc.attr("counter") = (s == OpenStatus::short_frame) ? py::object(py::none())
                                                         : py::object(py::int_(counter));
    PyErr_SetObject(refused_error, exc.ptr());
    throw py::error_already_set();
}

template <typename T>
std::unique_ptr<T> make_link(py::handle key, uint32_t src, uint32_t dst, uint64_t epoch) {
    Buffer k(key, false, "key");
    return std::make_unique<T>(k.data(), k.size(), src, dst, epoch);
}

uint64_t seal_py(BulkSealer &s, const py::args &parts, uint8_t *out, size_t out_len) {
    std::vector<std::unique_ptr<Buffer>> held;
    std::vector<const uint8_t *> ptrs;
    std::vector<size_t> lens;
    for (auto part : parts) {
        held.push_back(std::make_unique<Buffer>(part, false, "a part to seal"));
        ptrs.push_back(held.back()->data());
        lens.push_back(held.back()->size());
    }
    py::gil_scoped_release release;
    return s.seal_parts(ptrs.data(), lens.data(), ptrs.size(), out, out_len);
}

size_t total_of(const py::args &parts) {
    size_t total = 0;
    for (auto part : parts) total += Buffer(part, false, "a part to seal").size();
    return total;
}

}  // namespace

void register_bulk(py::module_ &m) {
    py::register_exception<BulkError>(m, "BulkError", PyExc_RuntimeError);
    refused_error = PyErr_NewExceptionWithDoc("netstorm.geoserver._dataplane.BulkRefused",
                                  "A bulk frame the opener refused: .reason is 'short', "
                                  "'too_long', 'replay' or 'forged'; .counter the frame's "
                                  "counter (None if too short to hold one).",
                                  PyExc_ValueError, nullptr);
    if (refused_error == nullptr) throw py::error_already_set();
    m.attr("BulkRefused") = py::reinterpret_borrow<py::object>(refused_error);
    m.attr("BULK_KEY_BYTES") = BULK_KEY_BYTES;
    m.attr("BULK_OVERHEAD") = BULK_OVERHEAD;
    m.attr("BULK_COUNTER_BYTES") = BULK_COUNTER_BYTES;
    m.attr("BULK_TAG_BYTES") = BULK_TAG_BYTES;

    m.def("bulk_unavailable", &bulk_unavailable,
          "Why AEGIS-256 bulk sealing cannot be used here ('' if it can).");
    m.def("sodium_version", []() {
        const SodiumApi *api = sodium_api(nullptr);
        return (api == nullptr || api->version == nullptr) ? std::string()
                                                           : std::string(api->version());
    }, "The loaded libsodium's version ('' if none or unknown).");

    py::class_<BulkSealer>(m, "BulkSealer",
        "Seals one direction of one link under one key and epoch: each call gives one frame "
        "[counter u64 LE | AEGIS-256(parts...) | tag 32 B] with the next counter.")
        .def(py::init(&make_link<BulkSealer>), py::arg("key"), py::arg("src_dc"),
             py::arg("dst_dc"), py::arg("epoch"))
        .def("seal", [](BulkSealer &s, const py::args &parts) {
            size_t total = total_of(parts) + BULK_OVERHEAD;
            py::object out = py::reinterpret_steal<py::object>(
                PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(total)));
            if (!out) throw py::error_already_set();
            seal_py(s, parts, reinterpret_cast<uint8_t *>(PyBytes_AS_STRING(out.ptr())), total);
            return out;
        }, "seal(*parts) -> bytes: one sealed frame of the parts' concatenation.")
        .def("seal_into", [](BulkSealer &s, py::handle out, const py::args &parts) {
            Buffer o(out, true, "out");
            size_t total = total_of(parts) + BULK_OVERHEAD;
            if (o.size() < total)
                throw py::value_error("out holds " + std::to_string(o.size()) +
                                      " bytes, the frame needs " + std::to_string(total));
            seal_py(s, parts, o.data(), total);
            return total;
        }, py::arg("out"), "seal_into(out, *parts) -> frame length, written at out[0:].")
        .def("seal_in_place", [](BulkSealer &s, py::handle frame) {
            Buffer f(frame, true, "frame");
            py::gil_scoped_release release;
            return s.seal_in_place(f.data(), f.size());
        }, py::arg("frame"),
           "seal_in_place(frame) -> counter: frame = 8 spare bytes | plaintext | 32 spare.")
        .def_property_readonly("sealed", &BulkSealer::sealed)
        .def_property_readonly("src_dc", &BulkSealer::src_dc)
        .def_property_readonly("dst_dc", &BulkSealer::dst_dc)
        .def_property_readonly("epoch", &BulkSealer::epoch)
        .def_property_readonly("closed", &BulkSealer::closed)
        .def("close", &BulkSealer::close, "Zero the key now (also done on destruction).");

    py::class_<BulkOpener>(m, "BulkOpener",
        "Opens the frames of one direction of one link under one key and epoch; refuses "
        "(BulkRefused) a short frame, a counter not above the last accepted, a bad tag.")
        .def(py::init(&make_link<BulkOpener>), py::arg("key"), py::arg("src_dc"),
             py::arg("dst_dc"), py::arg("epoch"))
        .def("open", [](BulkOpener &o, py::handle frame) {
            Buffer f(frame, false, "frame");
            size_t plain = f.size() >= BULK_OVERHEAD ? f.size() - BULK_OVERHEAD : 0;
            py::object out = py::reinterpret_steal<py::object>(
                PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(plain)));
            if (!out) throw py::error_already_set();
            uint64_t counter = 0;
            OpenStatus s;
            {
                py::gil_scoped_release release;
                s = o.open(f.data(), f.size(),
                           reinterpret_cast<uint8_t *>(PyBytes_AS_STRING(out.ptr())), &counter);
            }
            if (s != OpenStatus::ok) raise_refused(o, s, counter, f.size());
            return out;
        }, py::arg("frame"), "open(frame) -> bytes: the plaintext, in a new bytes object.")
        .def("open_in_place", [](BulkOpener &o, py::handle frame) {
            size_t len;
            {
                Buffer f(frame, true, "frame");
                len = f.size();
                uint64_t counter = 0;
                OpenStatus s;
                {
                    py::gil_scoped_release release;
                    s = o.open_in_place(f.data(), f.size(), &counter);
                }
                if (s != OpenStatus::ok) raise_refused(o, s, counter, f.size());
            }
            py::object view = py::reinterpret_steal<py::object>(
                PyMemoryView_FromObject(frame.ptr()));
            if (!view) throw py::error_already_set();
            view = view.attr("cast")("B");
            return py::object(view[py::slice(static_cast<py::ssize_t>(BULK_COUNTER_BYTES),
                                  static_cast<py::ssize_t>(len - BULK_TAG_BYTES), 1)]);
        }, py::arg("frame"),
           "open_in_place(frame) -> memoryview of the plaintext, decrypted where it lies in "
           "the (writable) frame.")
        .def_property_readonly("last_counter", &BulkOpener::last_counter)
        .def_property_readonly("refused", &BulkOpener::refused)
        .def_property_readonly("src_dc", &BulkOpener::src_dc)
        .def_property_readonly("dst_dc", &BulkOpener::dst_dc)
        .def_property_readonly("epoch", &BulkOpener::epoch)
        .def_property_readonly("closed", &BulkOpener::closed)
        .def("close", &BulkOpener::close, "Zero the key now (also done on destruction).");
}

}  // namespace netstorm
