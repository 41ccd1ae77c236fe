// The recogniser of the common valid chunk message: exactly the subset of what
// wire.decode + kinds.validate + roles.refusal + WanTransport.on_message accept as a whole
// dense chunk from another DC's server (tests/unit/test_dataplane_differential.py checks
// the "subset" against the Python path; tests/fuzz/ fuzzes it). No ZeroMQ, no allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "chunk_wire.hpp"

namespace netstorm {

struct Peers {
    int own = 0;
    std::map<uint16_t, int> servers;            // other DCs' server node ids -> DC
    std::map<std::string, int> principals;      // ZAP User-Ids of DC keys -> DC
    bool curve = false;
    size_t max_chunk_bytes = 0;
};

// `frames` frames after the routing id: header (`header`, `header_size` bytes), meta of
// `meta_size` bytes, then one payload of `payload_size` bytes if `frames` is 3. `user`: the
// connection's User-Id (null: none). On success `h` and `source` (the sending DC) are set.
bool recognise(const Peers &peers, size_t frames, const uint8_t *header, size_t header_size,
               size_t meta_size, size_t payload_size, const std::string *user, Header *h,
               int *source);

}  // namespace netstorm
