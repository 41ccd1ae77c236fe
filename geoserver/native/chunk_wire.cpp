#include "chunk_wire.hpp"

#include <cpuid.h>
#include <cstdlib>
#include <immintrin.h>

namespace netstorm {

namespace {
template <typename T>
T load(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename T>
void store(uint8_t *p, T v) { std::memcpy(p, &v, sizeof v); }
}  // namespace

bool parse_header(const uint8_t *d, size_t size, Header *h) {
    if (size != HEADER_BYTES || d[0] != 'N' || d[1] != 'S' || d[2] != PROTOCOL_VERSION)
        return false;
    h->kind = d[3];
    h->sender = load<uint16_t>(d + 4);
    h->flags = load<uint16_t>(d + 6);
    h->dtype = d[8];
    h->tree = d[9];
    h->policy = load<uint32_t>(d + 10);
    h->key = load<uint32_t>(d + 14);
    h->chunk = load<uint32_t>(d + 18);
    h->seq = load<uint64_t>(d + 22);
    h->request = load<uint64_t>(d + 30);
    return true;
}

void write_header(const Header &h, uint8_t *d) {
    d[0] = 'N';
    d[1] = 'S';
    d[2] = PROTOCOL_VERSION;
    d[3] = h.kind;
    store<uint16_t>(d + 4, h.sender);
    store<uint16_t>(d + 6, h.flags);
    d[8] = h.dtype;
    d[9] = h.tree;
    store<uint32_t>(d + 10, h.policy);
    store<uint32_t>(d + 14, h.key);
    store<uint32_t>(d + 18, h.chunk);
    store<uint64_t>(d + 22, h.seq);
    store<uint64_t>(d + 30, h.request);
}

size_t itemsize_of(uint8_t dtype) {
    switch (dtype) {       // wire.DTYPES
        case 1: return 4;  // float32
        case 2: return 2;  // float16
        case 3: return 8;  // float64
        case 4: return 4;  // int32
        case 5: return 8;  // int64
        case 6: return 1;  // uint8
        case 7: return 1;  // int8
        default: return 0;
    }
}

BufRef Buf::received(zmq_msg *msg) {
    const ZmqApi *z = zmq_api(nullptr);
    BufRef buf(new Buf());
    buf->is_msg_ = true;
    z->msg_init(&buf->msg_);
    z->msg_copy(&buf->msg_, msg);       // a reference, no data copy
    z->msg_close(msg);
    buf->data_ = static_cast<uint8_t *>(z->msg_data(&buf->msg_));
    buf->size_ = z->msg_size(&buf->msg_);
    return buf;
}

BufRef Buf::allocate(size_t size) {
    BufRef buf(new Buf());
    size_t rounded = (size + 63) / 64 * 64;
    buf->data_ = static_cast<uint8_t *>(std::aligned_alloc(64, rounded ? rounded : 64));
    if (buf->data_ == nullptr) throw std::bad_alloc();
    buf->size_ = size;
    return buf;
}

bool Buf::property(const char *name, std::string *value) const {
    if (!is_msg_) return false;
    const char *text = zmq_api(nullptr)->msg_gets(&msg_, name);
    if (text == nullptr) return false;
    *value = text;
    return true;
}

BufRef Buf::slice(const BufRef &parent, size_t offset, size_t size) {
    BufRef buf(new Buf());
    buf->parent_ = parent;
    buf->data_ = parent->data_ + offset;
    buf->size_ = size;
    return buf;
}

Buf::~Buf() {
    if (is_msg_) zmq_api(nullptr)->msg_close(&msg_);
    else if (!parent_) std::free(data_);
}

BufRef BufPool::take(size_t size) {
    for (auto &buf : kept_)
        if (buf.use_count() == 1 && buf->size() == size) {
            ++reused;
            return buf;
        }
    ++made;
    BufRef buf = Buf::allocate(size);
    if (kept_.size() < keep_) kept_.push_back(buf);
    else
        for (auto &old : kept_)     // replace one nobody uses (of another size)
            if (old.use_count() == 1) {
                old = buf;
                break;
            }
    return buf;
}

namespace {
// numpy's npy_half_to_float / npy_float_to_half (round to nearest even), for CPUs
// without F16C and for the tails
float half_to_float(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {      // subnormal: normalise
            int e = -1;
            do { ++e; man <<= 1; } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t float_to_half(float value) {
    uint32_t f;
    std::memcpy(&f, &value, 4);
    uint32_t f_exp = f & 0x7f800000u, f_sig;
    uint16_t h_sgn = (uint16_t)((f & 0x80000000u) >> 16), h_exp, h_sig;
    if (f_exp >= 0x47800000u) {         // overflow, inf or NaN
        if (f_exp == 0x7f800000u) {
            f_sig = f & 0x007fffffu;
            if (f_sig != 0) {
                uint16_t ret = (uint16_t)(0x7c00u + (f_sig >> 13));
                if (ret == 0x7c00u) ret++;
                return h_sgn + ret;
            }
            return (uint16_t)(h_sgn + 0x7c00u);
        }
        return (uint16_t)(h_sgn + 0x7c00u);
    }
    if (f_exp <= 0x38000000u) {         // subnormal or zero half
        if (f_exp < 0x33000000u) return h_sgn;
        f_exp >>= 23;
        f_sig = 0x00800000u + (f & 0x007fffffu);
        if ((f_sig & (((uint32_t)1 << (126 - f_exp)) - 1)) != 0) f_sig |= 1;   // sticky
        f_sig >>= (113 - f_exp);
        if ((f_sig & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu)) f_sig += 0x00001000u;
        h_sig = (uint16_t)(f_sig >> 13);
        return (uint16_t)(h_sgn + h_sig);
    }
    h_exp = (uint16_t)((f_exp - 0x38000000u) >> 13);
    f_sig = f & 0x007fffffu;
    if ((f_sig & 0x00003fffu) != 0x00001000u) f_sig += 0x00001000u;
    h_sig = (uint16_t)(f_sig >> 13);
    h_sig += h_exp;     // a carry into the exponent is right (rounds up to the next power)
    return (uint16_t)(h_sgn + h_sig);
}

__attribute__((target("avx,f16c"))) void add_half_f16c(uint16_t *out, const uint16_t *a,
                                                       const uint16_t *b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(a + i)));
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + i)));
        __m128i s = _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i), s);
    }
    for (; i < n; ++i) out[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
}

// F16C and AVX in the CPU and AVX's registers saved by the OS (cpuid and xgetbv: clang
// before 16 does not know "f16c" in __builtin_cpu_supports)
bool cpu_has_f16c() {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

void add_half(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
    static const bool f16c = cpu_has_f16c();
    if (f16c) {
        add_half_f16c(out, a, b, n);
        return;
    }
    for (size_t i = 0; i < n; ++i) out[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
}

template <typename T>
void add_plain(void *out, const void *a, const void *b, size_t n) {
    T *o = static_cast<T *>(out);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}
}  // namespace

void add_arrays(uint8_t dtype, void *out, const void *a, const void *b, size_t n) {
    switch (dtype) {
        case 1: add_plain<float>(out, a, b, n); break;
        case 2: add_half(static_cast<uint16_t *>(out), static_cast<const uint16_t *>(a),
                         static_cast<const uint16_t *>(b), n); break;
        case 3: add_plain<double>(out, a, b, n); break;
        case 4: add_plain<uint32_t>(out, a, b, n); break;      // wraps, as numpy's int32
        case 5: add_plain<uint64_t>(out, a, b, n); break;
        case 6: add_plain<uint8_t>(out, a, b, n); break;
        case 7: add_plain<uint8_t>(out, a, b, n); break;
        default: break;
    }
}

}  // namespace netstorm
