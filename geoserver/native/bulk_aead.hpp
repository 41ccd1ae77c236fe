// The bulk channel's authenticated cipher (docs/security.md, "Bulk chunks between servers"):
// AEGIS-256 from the libsodium pyzmq already loaded (resolved with dlsym, never linked, never
// a second copy), one sealer per (link, direction, epoch) and one opener at the other end.
//
// A sealed frame is  [counter u64 LE | AEGIS-256 ciphertext of the plaintext | tag 32 B]
// with   key   = 32 random bytes per (direction, epoch), sent over CURVE (LINK_KEY)
//        nonce = counter u64 LE ‖ epoch u64 LE ‖ src DC u32 LE ‖ dst DC u32 LE ‖ "nsbulk01"
//        AAD   = "nsbulk01" ‖ src DC u32 LE ‖ dst DC u32 LE ‖ epoch u64 LE ‖ counter u64 LE
// The sender's counter starts at 1 and only grows, so no nonce repeats under a key; the
// opener takes a frame only if its counter is above the last one it accepted on that key
// (gaps allowed: a message lost in a reconnect), and changes no state unless the tag holds.
// No construction of our own: libsodium's AEGIS-256 AEAD, used as its documentation says.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace netstorm {

constexpr size_t BULK_KEY_BYTES = 32, BULK_TAG_BYTES = 32, BULK_COUNTER_BYTES = 8,
                 BULK_NONCE_BYTES = 32, BULK_AAD_BYTES = 32,
                 BULK_OVERHEAD = BULK_COUNTER_BYTES + BULK_TAG_BYTES;

// libsodium's functions the channel calls, from the loaded libsodium (>= 1.0.19 for AEGIS).
struct SodiumApi {
    int (*init)();
    int (*encrypt_detached)(unsigned char *c, unsigned char *mac, unsigned long long *maclen,
                            const unsigned char *m, unsigned long long mlen,
                            const unsigned char *ad, unsigned long long adlen,
                            const unsigned char *nsec, const unsigned char *npub,
                            const unsigned char *k);
    int (*decrypt_detached)(unsigned char *m, unsigned char *nsec, const unsigned char *c,
                            unsigned long long clen, const unsigned char *mac,
                            const unsigned char *ad, unsigned long long adlen,
                            const unsigned char *npub, const unsigned char *k);
    size_t (*messagebytes_max)();
    void (*memzero)(void *, size_t);
    void (*randombytes)(void *, size_t);
    int (*has_aesni)();           // may be null (then unknown)
    const char *(*version)();
};

// The API, or nullptr with `why` set (no libsodium loaded: import zmq first; or one without
// AEGIS-256, i.e. older than 1.0.19). A failure is not cached: a later call looks again.
const SodiumApi *sodium_api(std::string *why);

// Why bulk sealing cannot be used here ('' if it can): no libsodium, no AEGIS-256, or a CPU
// without AES instructions (AEGIS is then slow and not constant-time: links stay on CURVE).
std::string bulk_unavailable();

class BulkError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

enum class OpenStatus { ok = 0, short_frame, replay, forged, too_long };
const char *open_status_name(OpenStatus s);

// The fixed parameters of one direction of one link under one key.
class BulkLink {
  public:
    BulkLink(const uint8_t *key, size_t key_len, uint32_t src_dc, uint32_t dst_dc,
             uint64_t epoch);     // throws BulkError (key size, libsodium missing)
    ~BulkLink();
    BulkLink(const BulkLink &) = delete;
    BulkLink &operator=(const BulkLink &) = delete;

    uint32_t src_dc() const { return src_; }
    uint32_t dst_dc() const { return dst_; }
    uint64_t epoch() const { return epoch_; }
    bool closed() const { return closed_; }
    void close();                 // zero the key; every later call throws BulkError

  protected:
    void nonce_and_aad(uint64_t counter, uint8_t *nonce, uint8_t *aad) const;
    void check_open() const;
    const SodiumApi *api_;
    std::array<uint8_t, BULK_KEY_BYTES> key_{};
    uint32_t src_, dst_;
    uint64_t epoch_;
    bool closed_ = false;
};

class BulkSealer : public BulkLink {
  public:
    using BulkLink::BulkLink;
    // Seals in place: `frame` holds BULK_COUNTER_BYTES reserved bytes, then the plaintext,
    // then BULK_TAG_BYTES reserved bytes (frame_len = plaintext + BULK_OVERHEAD). Writes the
    // counter and the tag, encrypts the plaintext where it lies; returns the counter used.
    uint64_t seal_in_place(uint8_t *frame, size_t frame_len);
    // Seals the concatenation of `parts` (e.g. header, payload) into `out`, which must hold
    // their total + BULK_OVERHEAD bytes: one copy into `out`, then in place. Returns the counter.
    uint64_t seal_parts(const uint8_t *const *parts, const size_t *lens, size_t n,
                        uint8_t *out, size_t out_len);
    uint64_t sealed() const { return next_.load() - 1; }   // frames sealed so far

  private:
    std::atomic<uint64_t> next_{1};
};

class BulkOpener : public BulkLink {
  public:
    using BulkLink::BulkLink;
    // Opens `frame` (len bytes) into `out` (len - BULK_OVERHEAD bytes); `out` may be
    // frame + BULK_COUNTER_BYTES (decrypt in place). On any refusal the state is unchanged and
    // `out` holds no plaintext (libsodium zeroes it when the tag fails). `counter` gets the
    // frame's counter when the frame is long enough to have one.
    OpenStatus open(const uint8_t *frame, size_t len, uint8_t *out, uint64_t *counter);
    OpenStatus open_in_place(uint8_t *frame, size_t len, uint64_t *counter) {
        return open(frame, len, frame + BULK_COUNTER_BYTES, counter);
    }
    uint64_t last_counter() const;
    uint64_t refused() const { return refused_.load(); }

  private:
    mutable std::mutex mutex_;          // check and advance the counter as one step
    uint64_t last_ = 0;                 // the sender starts at 1
    std::atomic<uint64_t> refused_{0};
};

}  // namespace netstorm
