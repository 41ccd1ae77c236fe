// What the data plane knows of netstorm's wire format (geoserver/core/wire.py is the
// reference): the 38-byte header, the kinds and flags it handles, the dtypes, and the sums.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "zmq_api.hpp"

namespace netstorm {

constexpr size_t HEADER_BYTES = 38;     // struct "<2sBBHHBBIIIQQ"
constexpr uint8_t PROTOCOL_VERSION = 1;
constexpr uint8_t KIND_CHUNK_UP = 20, KIND_CHUNK_DOWN = 21, KIND_RELAY = 26;
constexpr uint16_t FLAG_QUEUED = 4;
constexpr size_t FLAGS_AT = 6;          // offset of the flags in the header
constexpr int64_t ENTRY_BYTES = 256;    // policy/chunking.py: a kept chunk's bookkeeping

// A header's fields (wire.py HEADER: magic, protocol, kind, sender, flags, dtype, tree,
// policy, key, chunk, seq, request).
struct Header {
    uint8_t kind = 0;
    uint16_t sender = 0;
    uint16_t flags = 0;
    uint8_t dtype = 0;
    uint8_t tree = 0;
    uint32_t policy = 0;
    uint32_t key = 0;
    uint32_t chunk = 0;
    uint64_t seq = 0;
    uint64_t request = 0;
};

bool parse_header(const uint8_t *data, size_t size, Header *out);   // magic and version too
void write_header(const Header &h, uint8_t *out);                    // HEADER_BYTES bytes
size_t itemsize_of(uint8_t dtype);      // 0 for an unknown or absent dtype

// Bytes kept alive while anyone uses them: a received ZeroMQ frame or an own allocation.
class Buf {
public:
    static std::shared_ptr<Buf> received(zmq_msg *msg);     // takes the message over
    static std::shared_ptr<Buf> allocate(size_t size);      // 64-byte aligned
    // bytes [offset, offset + size) of `parent`, kept alive with it
    static std::shared_ptr<Buf> slice(const std::shared_ptr<Buf> &parent, size_t offset,
                                      size_t size);
    ~Buf();
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
    uint8_t *data() const { return data_; }
    size_t size() const { return size_; }
    bool own() const { return !is_msg_ && !parent_; }
    // a received frame's connection property ("User-Id", "Peer-Address"); false if unset
    bool property(const char *name, std::string *value) const;

private:
    Buf() = default;
    zmq_msg msg_{};
    bool is_msg_ = false;
    std::shared_ptr<Buf> parent_;
    uint8_t *data_ = nullptr;
    size_t size_ = 0;
};
using BufRef = std::shared_ptr<Buf>;

// Own buffers of one size, reused once nobody else holds them (BufferPool's rule).
class BufPool {
public:
    explicit BufPool(size_t keep = 64) : keep_(keep) {}
    BufRef take(size_t size);           // O(kept)
    uint64_t reused = 0, made = 0;

private:
    size_t keep_;
    std::vector<BufRef> kept_;
};

// out = a + b elementwise in `dtype` (numpy's results bit for bit: float16 sums in float32
// and rounds to nearest even; integers wrap); out may be a. O(n).
void add_arrays(uint8_t dtype, void *out, const void *a, const void *b, size_t n);

}  // namespace netstorm
