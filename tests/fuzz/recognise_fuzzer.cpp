// libFuzzer harness for the data plane's chunk recogniser (geoserver/native/recognise.cpp):
// memory safety (ASan, UBSan) and the promises of recognise.hpp on every input it accepts.
// Built and run by tests/cluster/test_dataplane_fuzz.py:
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I geoserver/native \
//     tests/fuzz/recognise_fuzzer.cpp geoserver/native/{recognise,chunk_wire,zmq_api,
//     loaded_library}.cpp -ldl
//
// An input is one received message as the data plane sees it:
//   byte 0      bit 0: CURVE on; bits 1-3: frames after the routing id (0..7);
//               bit 4: the connection has a User-Id
//   bytes 1-2   the meta frame's size (u16 LE)
//   bytes 3-6   the payload frame's size (u32 LE)
//   byte 7      the User-Id's length L, then L bytes of it (clamped to what is left)
//   the rest    the header frame, copied to a buffer of exactly its size (ASan sees overreads)
// The peers are fixed: this server is dc0's (index 0); servers 1 (dc0), 2 (dc1), 11 (dc2);
// the principals are "dc:dc0", "dc:dc1", "dc:dc2" (security.user_id); max_chunk_bytes 1 MiB.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "recognise.hpp"

using namespace netstorm;

namespace {

constexpr size_t MAX_CHUNK = 1 << 20;

const Peers &peers(bool curve) {
    static Peers with, without;
    static bool made = false;
    if (!made) {
        for (Peers *p : {&with, &without}) {
            p->own = 0;
            p->servers = {{1, 0}, {2, 1}, {11, 2}};    // the own DC's server too: refused
            p->principals = {{"dc:dc0", 0}, {"dc:dc1", 1}, {"dc:dc2", 2}};
            p->max_chunk_bytes = MAX_CHUNK;
        }
        with.curve = true;
        made = true;
    }
    return curve ? with : without;
}

#define PROMISE(cond)                                                                   \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            std::fprintf(stderr, "recognise() broke its promise: %s (line %d)\n", #cond, \
                         __LINE__);                                                     \
            std::abort();                                                               \
        }                                                                               \
    } while (0)

uint32_t u32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

uint64_t inputs = 0, accepted = 0;     // reported at exit: the fast path was reached

void report() {
    std::fprintf(stderr, "recognise_fuzzer: accepted %llu of %llu inputs\n",
                 (unsigned long long)accepted, (unsigned long long)inputs);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    std::atexit(report);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ++inputs;
    if (size < 8) return 0;
    bool curve = data[0] & 1, has_user = data[0] & 16;
    size_t frames = (data[0] >> 1) & 7;
    size_t meta_size = data[1] | data[2] << 8;
    size_t payload_size = u32(data + 3);
    size_t user_len = data[7];
    size_t at = 8;
    if (user_len > size - at) user_len = size - at;
    std::string user(reinterpret_cast<const char *>(data + at), user_len);
    at += user_len;
    size_t header_size = size - at;
    std::unique_ptr<uint8_t[]> header(new uint8_t[header_size]);   // exactly its size
    if (header_size) std::memcpy(header.get(), data + at, header_size);

    const Peers &p = peers(curve);
    Header h;
    int source = -7;
    bool ok = recognise(p, frames, header.get(), header_size, meta_size, payload_size,
                        has_user ? &user : nullptr, &h, &source);
    if (!ok) return 0;
    ++accepted;
    // what recognise.hpp promises of an accepted message: a whole dense CHUNK_UP/DOWN of
    // another DC's server, under that DC's key with CURVE
    PROMISE(frames == 3 && meta_size == 0 && header_size == HEADER_BYTES);
    PROMISE(header[0] == 'N' && header[1] == 'S' && header[2] == PROTOCOL_VERSION);
    PROMISE(h.kind == KIND_CHUNK_UP || h.kind == KIND_CHUNK_DOWN);
    PROMISE((h.flags & ~FLAG_QUEUED) == 0);
    size_t item = itemsize_of(h.dtype);
    PROMISE(item != 0 && payload_size != 0 && payload_size <= MAX_CHUNK &&
            payload_size % item == 0);
    auto server = p.servers.find(h.sender);
    PROMISE(server != p.servers.end() && server->second == source && source != p.own);
    if (curve) {
        PROMISE(has_user);
        auto principal = p.principals.find(user);
        PROMISE(principal != p.principals.end() && principal->second == source);
    }
    uint8_t again[HEADER_BYTES];        // the fields are the header's, byte for byte
    write_header(h, again);
    PROMISE(std::memcmp(again, header.get(), HEADER_BYTES) == 0);
    return 0;
}
