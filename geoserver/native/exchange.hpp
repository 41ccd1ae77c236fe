// TreeExchange's dense semantics (geoserver/server/aggregation.py is the reference and the
// specification): partial sums along a policy's trees, the duplicate and round rules, the
// bounds on what a neighbour makes this DC keep, the policy floor, chunks held for policy
// versions not yet announced. DCs are indices into the names given at construction.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chunk_wire.hpp"

namespace netstorm {

struct ChunkRef {
    uint32_t key = 0, chunk = 0;
    uint64_t rnd = 0;
    uint32_t version = 0;
    uint8_t tree = 0;
};

// What the exchange asks of its owner. `level`: 0 a rate-limited drop (WARNING),
// 1 a rate-limited hold (INFO), 2 an unlimited warning.
class ExchangeSink {
public:
    virtual ~ExchangeSink() = default;
    virtual void send_chunk(int dc, uint8_t kind, const ChunkRef &cid, uint8_t dtype,
                            const BufRef &data) = 0;
    virtual void deliver(const ChunkRef &cid, uint8_t dtype, const BufRef &total) = 0;
    virtual void note(int source, int level, const std::string &text) = 0;
};

// One tree of a policy as this DC sees it.
struct TreeView {
    int parent = -1;                    // -1: this DC is the root
    std::vector<int> children;          // aggregation children (their parent is this DC)
    int down_parent = -1;               // who sends this DC the total (-1: the root)
    std::vector<int> down_children;
    int root = -1;
};

struct Ident {
    uint32_t key, chunk;
    uint64_t rnd;
    bool operator==(const Ident &o) const { return key == o.key && chunk == o.chunk && rnd == o.rnd; }
};
struct IdentHash {
    size_t operator()(const Ident &i) const {
        return std::hash<uint64_t>()(((uint64_t)i.key << 32 | i.chunk) * 0x9e3779b97f4a7c15ull ^ i.rnd);
    }
};

// Which rounds of each (key, chunk) happened: a watermark plus the few beyond it.
class RoundSet {
public:
    bool contains(const Ident &i) const;
    void add(const Ident &i);
    void forget_after(const std::map<uint32_t, uint64_t> &rounds);

private:
    std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, std::set<uint64_t>>> rounds_;
};

class Exchange {
public:
    Exchange(int own, std::vector<std::string> names, int64_t rounds_ahead, int64_t held_bytes,
             ExchangeSink *sink);

    void add_tree(uint32_t version, uint8_t index, uint8_t trees, TreeView view);
    bool knows(uint32_t version) const { return versions_.count(version) != 0; }
    void forget_version(uint32_t version);      // the policy book dropped it
    // the chunks waiting for versions now known are handled (after add_tree calls)
    void policy_added();
    void restart(uint32_t floor);
    void forget_after(const std::map<uint32_t, uint64_t> &rounds);

    // a neighbour's whole dense chunk, and this DC's own sum of one
    void on_chunk(int source, uint8_t kind, const ChunkRef &cid, uint8_t dtype, BufRef data);
    void contribute(const ChunkRef &cid, uint8_t dtype, BufRef data);   // data: a copy, ours

    size_t in_flight() const { return partials_.size(); }
    size_t waiting() const { return waiting_.size(); }
    const std::map<int, int64_t> &held() const { return held_; }
    uint64_t own_round() const { return own_round_; }
    uint64_t sent_chunks = 0, sent_bytes = 0;
    BufPool buffers;

private:
    struct Partial {
        BufRef acc;
        uint8_t dtype = 0;
        bool owned = false;
        std::vector<int> heard;
        int charged_to = -1;
        int64_t charged = 0;
    };
    struct Waiting {
        int source;
        uint8_t kind;
        ChunkRef cid;
        uint8_t dtype;
        BufRef data;
    };
    const TreeView *tree(const ChunkRef &cid, int source, uint8_t kind);
    bool admit(const char *what, int source, const ChunkRef &cid, int64_t cost,
               bool window = true);
    bool known(uint8_t kind, int source, const ChunkRef &cid, uint8_t dtype, const BufRef &data);
    void on_up(int source, const ChunkRef &cid, uint8_t dtype, BufRef data);
    void on_down(int source, const ChunkRef &cid, uint8_t dtype, BufRef data);
    void add(const ChunkRef &cid, int source, uint8_t dtype, BufRef data, bool writable);
    void finish(const TreeView &t, const ChunkRef &cid, uint8_t dtype, const BufRef &total);
    void send(int dc, uint8_t kind, const ChunkRef &cid, uint8_t dtype, const BufRef &data);
    void release(int source, int64_t bytes);
    std::string ident_text(const ChunkRef &cid) const;

    int own_;
    std::vector<std::string> names_;
    int64_t rounds_ahead_, held_bytes_;
    ExchangeSink *sink_;
    std::map<std::pair<uint32_t, uint8_t>, TreeView> trees_;
    std::map<uint32_t, uint8_t> versions_;      // version -> its number of trees
    std::unordered_map<Ident, Partial, IdentHash> partials_;
    RoundSet aggregated_, delivered_;
    std::vector<Waiting> waiting_;
    std::map<int, int64_t> held_;
    uint64_t own_round_ = 0;
    uint32_t floor_ = 0;
};

}  // namespace netstorm
