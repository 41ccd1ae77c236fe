// libFuzzer harness for the bulk channel's opener (BulkOpener::open, geoserver/native/
// bulk_aead.hpp) under a fixed key: memory safety (ASan, UBSan) and the opener's promises:
// it takes a frame only if the tag holds and its counter is above the last accepted, changes
// no state on a refusal, and leaves no plaintext in `out` when the tag fails.
// Built and run by tests/cluster/test_dataplane_fuzz.py, which compiles the non-Python part
// of geoserver/native/bulk_aead.cpp with loaded_library.cpp. libsodium is pyzmq's bundled
// one, dlopen'ed at start from the path in $NETSTORM_LIBSODIUM (as `import zmq` loads it in
// the server); loaded_library() then finds it.
//
// An input is a sequence of operations on one opener (and one sealer of the same link):
//   op & 3 == 0  raw frame: u16 LE length n, then n bytes (clamped) opened as they are
//   op & 3 == 1  sealed: u16 LE length n, n bytes of plaintext sealed by the sealer, then
//                u16 LE position and a byte xor'ed there (0 or past the end: untouched)
//   op & 3 == 2  the last sealed frame again (a replay)
//   op & 3 == 3  a frame of n (u16 LE, mod 8 KiB) zero bytes but the u64 LE counter that
//                follows in the input
//   op & 4       open in place (out = frame + 8) instead of into a separate buffer
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bulk_aead.hpp"

using namespace netstorm;

namespace {

const uint8_t KEY[BULK_KEY_BYTES] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                     11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                     22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
constexpr uint32_t SRC = 0, DST = 1;
constexpr uint64_t EPOCH = 3;

#define PROMISE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            std::fprintf(stderr, "BulkOpener broke its promise: %s (line %d)\n", #cond, \
                         __LINE__);                                                    \
            std::abort();                                                              \
        }                                                                              \
    } while (0)

uint64_t statuses[5] = {};       // opens by OpenStatus, reported at exit

void report() {
    std::fprintf(stderr, "bulk_open_fuzzer: opened");
    for (int s = 0; s < 5; ++s)
        std::fprintf(stderr, " %s %llu", open_status_name(static_cast<OpenStatus>(s)),
                     (unsigned long long)statuses[s]);
    std::fprintf(stderr, "\n");
}

struct Reader {
    const uint8_t *p;
    size_t left;
    bool more() const { return left > 0; }
    uint8_t byte() {
        if (!left) return 0;
        --left;
        return *p++;
    }
    uint16_t u16() { return byte() | byte() << 8; }
    std::vector<uint8_t> bytes(size_t n) {
        if (n > left) n = left;
        std::vector<uint8_t> out(p, p + n);
        p += n;
        left -= n;
        return out;
    }
};

// Opens `frame` with `opener` into a buffer of exactly its plaintext's size (or in place)
// and checks the promises; the status, and the plaintext in `plain` when ok.
OpenStatus open_checked(BulkOpener &opener, const std::vector<uint8_t> &frame, bool in_place,
                        std::vector<uint8_t> *plain) {
    size_t len = frame.size();
    // heap buffers of the exact sizes, so that ASan sees any access outside them
    std::unique_ptr<uint8_t[]> copy(new uint8_t[len ? len : 1]);
    if (len) std::memcpy(copy.get(), frame.data(), len);
    size_t plain_len = len >= BULK_OVERHEAD ? len - BULK_OVERHEAD : 0;
    std::unique_ptr<uint8_t[]> out(new uint8_t[plain_len ? plain_len : 1]);
    std::memset(out.get(), 0xA5, plain_len ? plain_len : 1);
    uint64_t before = opener.last_counter(), refused = opener.refused(), counter = ~0ull;
    OpenStatus s = in_place ? opener.open_in_place(copy.get(), len, &counter)
                            : opener.open(copy.get(), len, out.get(), &counter);
    ++statuses[static_cast<int>(s)];
    const uint8_t *result = in_place ? copy.get() + BULK_COUNTER_BYTES : out.get();
    PROMISE((s == OpenStatus::short_frame) == (len < BULK_OVERHEAD));
    PROMISE(s == OpenStatus::ok || s == OpenStatus::short_frame || s == OpenStatus::replay ||
            s == OpenStatus::forged);       // too_long: beyond any frame a test can hold
    if (s != OpenStatus::short_frame) {
        uint64_t c = 0;
        for (int i = 7; i >= 0; --i) c = c << 8 | frame[i];
        PROMISE(counter == c);
    }
    if (s == OpenStatus::ok) {
        PROMISE(counter > before && opener.last_counter() == counter);
        PROMISE(opener.refused() == refused);
        plain->assign(result, result + plain_len);
    } else {
        PROMISE(opener.last_counter() == before && opener.refused() == refused + 1);
    }
    if (s == OpenStatus::replay) PROMISE(counter <= before);
    if (s == OpenStatus::forged) {          // libsodium zeroes the output on a bad tag
        PROMISE(counter > before);
        for (size_t i = 0; i < plain_len; ++i) PROMISE(result[i] == 0);
    }
    if (!in_place && s != OpenStatus::ok && s != OpenStatus::forged)
        for (size_t i = 0; i < plain_len; ++i) PROMISE(out[i] == 0xA5);   // not touched
    return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char *path = std::getenv("NETSTORM_LIBSODIUM");
    if (path == nullptr || dlopen(path, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        std::fprintf(stderr, "bulk_open_fuzzer: set NETSTORM_LIBSODIUM to pyzmq's bundled "
                     "libsodium (%s)\n", path ? dlerror() : "unset");
        std::exit(2);
    }
    std::string why;
    if (sodium_api(&why) == nullptr) {
        std::fprintf(stderr, "bulk_open_fuzzer: %s\n", why.c_str());
        std::exit(2);
    }
    std::atexit(report);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    BulkOpener opener(KEY, sizeof KEY, SRC, DST, EPOCH);
    BulkSealer sealer(KEY, sizeof KEY, SRC, DST, EPOCH);
    Reader in{data, size};
    std::vector<uint8_t> last_sealed, plain;
    bool last_opened = false;
    for (int ops = 0; in.more() && ops < 64; ++ops) {
        uint8_t op = in.byte();
        bool in_place = op & 4;
        switch (op & 3) {
            case 0: {
                size_t n = in.u16();
                open_checked(opener, in.bytes(n), in_place, &plain);
                break;
            }
            case 1: {
                std::vector<uint8_t> text = in.bytes(in.u16());
                size_t pos = in.u16();
                uint8_t flip = in.byte();
                std::vector<uint8_t> frame(text.size() + BULK_OVERHEAD);
                const uint8_t *part = text.data();
                size_t part_len = text.size();
                uint64_t c = sealer.seal_parts(&part, &part_len, 1, frame.data(), frame.size());
                bool corrupt = flip != 0 && pos < frame.size();
                if (corrupt) frame[pos] ^= flip;
                uint64_t before = opener.last_counter();
                OpenStatus s = open_checked(opener, frame, in_place, &plain);
                if (!corrupt && c > before) PROMISE(s == OpenStatus::ok && plain == text);
                if (corrupt) PROMISE(s != OpenStatus::ok);
                last_sealed = frame;
                last_opened = s == OpenStatus::ok;
                break;
            }
            case 2:
                if (!last_sealed.empty()) {
                    OpenStatus s = open_checked(opener, last_sealed, in_place, &plain);
                    if (last_opened) PROMISE(s == OpenStatus::replay);
                }
                break;
            default: {
                size_t n = in.u16() & 0x1FFF;      // up to 8 KiB: cheap enough to repeat
                std::vector<uint8_t> frame(n);
                std::vector<uint8_t> counter = in.bytes(8);
                if (std::min(n, counter.size()) > 0)
                    std::memcpy(frame.data(), counter.data(), std::min(n, counter.size()));
                open_checked(opener, frame, in_place, &plain);
            }
        }
    }
    return 0;
}
