// SendQueue's semantics (geoserver/server/wan/send_queue.py is the reference) for every
// peer server at once: a priority heap per peer in front of its DEALER (SNDHWM 1), the
// QUEUED mark on what waited, the "paused" rule, progress times and the sizes of the last
// messages handed over (for stall detection), and the chunk messages handed over and not
// yet acknowledged, up to a byte budget per peer (for detours). Small chunks are not fused: each costs the core a few microseconds, and a
// BATCH would send them through the Python path at the receiver.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "bulk_aead.hpp"
#include "chunk_wire.hpp"

namespace netstorm {

struct OutMessage {
    std::vector<double> priority;       // compared like a Python tuple of numbers
    uint64_t order = 0;
    BufRef header;                      // HEADER_BYTES, ours (its flags are patched)
    BufRef meta;                        // null: an empty meta frame
    std::vector<BufRef> payload;
    uint64_t payload_bytes() const;
    bool queued() const;
    void set_queued(bool on);
};

class SendQueues {
public:
    explicit SendQueues(const ZmqApi *z, size_t retain_bytes) : z_(z), retain_(retain_bytes) {}
    void set_socket(int peer, void *socket);
    // whole chunks for `peer` whose sealed frame is at most `max_frame` go sealed by
    // `sealer` on the plain DEALER `socket` (null: all on the CURVE DEALER again)
    void set_bulk(int peer, void *socket, BulkSealer *sealer, size_t max_frame);
    void *socket(int peer) const;
    void *poll_socket(int peer) const;      // the one whose full queue stopped the peer's
    uint64_t sealed_messages = 0;

    // SendQueue.send / flush / paused / backlogged; `now`: monotonic seconds. O(log q).
    void send(int peer, OutMessage msg, double now);
    // back into the queue as it was (taken by take_waiting and not chosen): not tried now,
    // no progress time changed
    void requeue(int peer, OutMessage msg);
    void flush(int peer, double now);
    void paused();
    std::vector<int> backlogged() const;

    size_t waiting(int peer) const;
    size_t waiting_all() const;
    double progress(int peer) const;        // when a message last left, or the wait began
    uint64_t last_bytes(int peer) const;    // the last few handed over, together
    double last_timed(int peer) const;
    // rounds before `round` are acknowledged: their chunk messages are kept no longer;
    // how many were dropped. O(messages retained)
    size_t release_before(uint64_t round);
    size_t retained(int peer) const;
    // take: (handed and not acknowledged, waiting most urgent first); take_waiting: the
    // waiting only
    std::pair<std::vector<OutMessage>, std::vector<OutMessage>> take(int peer);
    std::vector<OutMessage> take_waiting(int peer);
    uint64_t sent_messages = 0, sent_bytes = 0;
    // socket-free (tests): hand a message over through this instead of a socket
    std::function<bool(int, OutMessage &)> transmit;

private:
    struct Later {      // heap order: the greatest (priority, order) first out of the
        bool operator()(const OutMessage &a, const OutMessage &b) const;   // max-heap
    };
    struct Peer {
        std::vector<OutMessage> heap;
        double progress = 0, timed = 0;
        std::deque<uint64_t> sizes;
        std::deque<OutMessage> recent;      // chunk messages handed over, unacknowledged
        uint64_t recent_bytes = 0;
        bool paused = false;
        void *bulk = nullptr;
        BulkSealer *sealer = nullptr;
        size_t max_frame = 0;
        void *blocked = nullptr;            // the socket that refused the last try
    };
    void *socket_for(const Peer &p, int peer, const OutMessage &msg) const;
    bool send_sealed(Peer &p, OutMessage &msg);
    bool try_send(int peer, OutMessage &msg);
    void handed(Peer &p, OutMessage msg, double now);

    const ZmqApi *z_;
    size_t retain_;
    uint64_t order_ = 0;
    std::map<int, void *> sockets_;
    std::map<int, Peer> peers_;
};

}  // namespace netstorm
