#include "recognise.hpp"

namespace netstorm {

bool recognise(const Peers &peers, size_t frames, const uint8_t *header, size_t header_size,
               size_t meta_size, size_t payload_size, const std::string *user, Header *h,
               int *source) {
    if (frames != 3 || meta_size != 0 || !parse_header(header, header_size, h)) return false;
    if (h->kind != KIND_CHUNK_UP && h->kind != KIND_CHUNK_DOWN) return false;
    if ((h->flags & ~FLAG_QUEUED) != 0) return false;
    size_t item = itemsize_of(h->dtype);
    if (item == 0 || payload_size == 0 || payload_size > peers.max_chunk_bytes ||
        payload_size % item != 0)
        return false;
    auto server = peers.servers.find(h->sender);
    if (server == peers.servers.end() || server->second == peers.own) return false;
    if (peers.curve) {
        if (user == nullptr) return false;
        auto principal = peers.principals.find(*user);
        if (principal == peers.principals.end() || principal->second != server->second)
            return false;
    }
    *source = server->second;
    return true;
}

}  // namespace netstorm
