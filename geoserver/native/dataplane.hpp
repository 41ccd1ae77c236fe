// The data plane of one DC server: the receive loop on the server's ROUTER, the recogniser
// of the common valid chunk message, the emulated WAN's delay line, and the events handed
// back to Python (docs/dataplane.md). It never touches a Python object while it runs.
#pragma once
#include <functional>
#include <map>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "exchange.hpp"
#include "recognise.hpp"
#include "send_queues.hpp"

namespace netstorm {

struct Event {
    enum Type { MSG, DELIVERED, ARRIVAL, ROUTE, NOTE } type;
    std::vector<BufRef> frames;         // MSG: every frame, the routing id first
    std::string user_id, peer_address;  // MSG
    bool has_user_id = false;
    ChunkRef cid;                       // DELIVERED, ROUTE
    uint8_t dtype = 0, kind = 0;
    BufRef data;
    int dc = -1;                        // ROUTE: the neighbour; ARRIVAL, NOTE: the source
    uint64_t bytes = 0;                 // ARRIVAL
    bool queued = false, behind = false;
    double t = 0;
    int level = 0;                      // NOTE
    std::string text;
};

struct Settings {
    int own = 0;
    uint16_t node_id = 0;
    std::vector<std::string> names;             // DC names, indexed
    std::map<uint16_t, int> servers;            // other DCs' server node ids -> DC
    std::map<std::string, int> principals;      // ZAP User-Ids of DC keys -> DC
    bool curve = false;
    size_t max_chunk_bytes = 0;
    int64_t rounds_ahead = 0, held_bytes = 0;
    std::map<std::string, double> delays;       // Peer-Address -> seconds held
    size_t min_split_bytes = 0;
    size_t retain_bytes = 64 << 20;     // chunk bytes per peer kept for detours
};

double monotonic_s();

class DataPlane : public ExchangeSink {
public:
    DataPlane(const ZmqApi *z, void *router, int wake_fd, Settings settings);
    ~DataPlane() override = default;

    // Receive, recognise and handle until something needs Python, `max_arrivals` chunk
    // messages were handled, or `timeout_s` passed (run without the GIL).
    void run(double timeout_s, size_t max_arrivals);
    std::vector<Event> take_events() {
        std::vector<Event> out;
        out.swap(events_);
        python_events_ = arrivals_ = 0;
        return out;
    }

    // Per-neighbour routing: whole chunks to `dc` go straight to it unless it is stalled or
    // relayed (then Python routes them; relayed chunks under min_split_bytes go direct).
    void set_route(int dc, bool stalled, bool relayed);
    void set_socket(int dc, void *socket) { queues.set_socket(dc, socket); }
    // the bulk channel (bulk_aead.hpp): the bulk ROUTER to read, the opener of `dc`'s link
    // into this server (null: none) and the node that must have sent what it opens
    void set_bulk_router(void *router) { bulk_router_ = router; }
    void set_opener(int dc, BulkOpener *opener, uint16_t node);
    uint64_t opened = 0, refused = 0;

    Exchange exchange;
    SendQueues queues;
    std::function<double()> clock = monotonic_s;     // a test's own clock when socket-free
    uint64_t fast = 0, handed_over = 0, delayed = 0;

    // ExchangeSink
    void send_chunk(int dc, uint8_t kind, const ChunkRef &cid, uint8_t dtype,
                    const BufRef &data) override;
    void deliver(const ChunkRef &cid, uint8_t dtype, const BufRef &total) override;
    void note(int source, int level, const std::string &text) override;

private:
    struct Held {
        double due;
        uint64_t order;
        std::vector<BufRef> frames;
        bool bulk;
        bool operator>(const Held &o) const { return due != o.due ? due > o.due : order > o.order; }
    };
    // one whole message from `socket` into `frames`; false: nothing was waiting
    bool receive_frames(void *socket, std::vector<BufRef> *frames);
    // the emulated WAN's delay for the message's source: held (true), or handle it now
    bool held_back(std::vector<BufRef> &frames, bool bulk, double now);
    bool receive_one(double now);       // false: nothing was waiting
    bool receive_bulk_one(double now);
    void open_bulk(std::vector<BufRef> frames, double now);
    void refuse_bulk(const BufRef &rid, const std::string &why);
    void classify(std::vector<BufRef> frames, double now);
    bool pending() const;               // a message waits on the ROUTER, or a held one is due
    bool needs_python() const { return python_events_ > 0; }
    std::string names_of_own() const { return s_.names[s_.own]; }

    const ZmqApi *z_;
    void *router_;
    void *bulk_router_ = nullptr;
    struct Opener {
        BulkOpener *opener;
        uint16_t node;
    };
    std::map<int, Opener> openers_;
    std::map<std::string, int> conns_;      // bulk connection -> the DC whose key opened it
    int wake_fd_;
    Settings s_;
    std::vector<Event> events_;
    size_t python_events_ = 0, arrivals_ = 0;
    std::priority_queue<Held, std::vector<Held>, std::greater<Held>> held_;
    uint64_t held_order_ = 0;
    std::vector<char> stalled_, relayed_;
    Peers peers_;
};

}  // namespace netstorm
