#include "exchange.hpp"

#include <algorithm>
#include <stdexcept>

namespace netstorm {

namespace {
const char *kind_name(uint8_t kind) { return kind == KIND_CHUNK_UP ? "CHUNK_UP" : "CHUNK_DOWN"; }
const char *dtype_name(uint8_t dtype) {
    static const char *names[] = {"None", "float32", "float16", "float64", "int32", "int64",
                                  "uint8", "int8"};
    return dtype < 8 ? names[dtype] : "?";
}
int64_t cost(const BufRef &data) { return (int64_t)data->size() + ENTRY_BYTES; }
}  // namespace

bool RoundSet::contains(const Ident &i) const {
    auto it = rounds_.find({i.key, i.chunk});
    if (it == rounds_.end()) return i.rnd <= 0;
    return i.rnd <= it->second.first || it->second.second.count(i.rnd) != 0;
}

void RoundSet::add(const Ident &i) {
    auto &entry = rounds_[{i.key, i.chunk}];
    entry.second.insert(i.rnd);
    while (entry.second.count(entry.first + 1)) {
        ++entry.first;
        entry.second.erase(entry.first);
    }
}

void RoundSet::forget_after(const std::map<uint32_t, uint64_t> &rounds) {
    for (auto &[ident, entry] : rounds_) {
        auto last = rounds.find(ident.first);
        if (last == rounds.end()) continue;
        entry.first = std::min(entry.first, last->second);
        for (auto it = entry.second.begin(); it != entry.second.end();)
            it = *it > last->second ? entry.second.erase(it) : std::next(it);
    }
}

Exchange::Exchange(int own, std::vector<std::string> names, int64_t rounds_ahead,
                   int64_t held_bytes, ExchangeSink *sink)
    : own_(own), names_(std::move(names)), rounds_ahead_(rounds_ahead),
      held_bytes_(held_bytes), sink_(sink) {}

void Exchange::add_tree(uint32_t version, uint8_t index, uint8_t trees, TreeView view) {
    versions_[version] = trees;
    trees_[{version, index}] = std::move(view);
}

void Exchange::forget_version(uint32_t version) {
    versions_.erase(version);
    for (auto it = trees_.begin(); it != trees_.end();)
        it = it->first.first == version ? trees_.erase(it) : std::next(it);
}

std::string Exchange::ident_text(const ChunkRef &c) const {
    return "(" + std::to_string(c.key) + ", " + std::to_string(c.chunk) + ", " +
           std::to_string(c.rnd) + ")";
}

const TreeView *Exchange::tree(const ChunkRef &cid, int source, uint8_t kind) {
    auto found = trees_.find({cid.version, cid.tree});
    if (found != trees_.end()) return &found->second;
    std::string why = "policy " + std::to_string(cid.version) + " has " +
                      std::to_string(versions_.count(cid.version) ? versions_[cid.version] : 0) +
                      " trees, not " + std::to_string(cid.tree + 1);
    if (source < 0) throw std::out_of_range(why);       // this DC's own contribution
    sink_->note(source, 0, names_[own_] + ": dropped " + kind_name(kind) + " of key " +
                               std::to_string(cid.key) + " from " + names_[source] + ": " + why);
    return nullptr;
}

void Exchange::send(int dc, uint8_t kind, const ChunkRef &cid, uint8_t dtype,
                    const BufRef &data) {
    ++sent_chunks;
    sent_bytes += data->size();
    sink_->send_chunk(dc, kind, cid, dtype, data);
}

void Exchange::release(int source, int64_t bytes) {
    if (source < 0) return;
    auto it = held_.find(source);
    if (it == held_.end()) return;
    it->second -= bytes;
    if (it->second == 0) held_.erase(it);
}

void Exchange::add(const ChunkRef &cid, int source, uint8_t dtype, BufRef data,
                   bool writable) {
    const TreeView *t = tree(cid, source == own_ ? -1 : source, KIND_CHUNK_UP);
    if (t == nullptr) return;
    Ident ident{cid.key, cid.chunk, cid.rnd};
    Partial &part = partials_[ident];
    if (std::find(part.heard.begin(), part.heard.end(), source) != part.heard.end() ||
        aggregated_.contains(ident)) {
        sink_->note(source, 0, names_[own_] + ": dropped duplicate contribution from " +
                                   names_[source] + " to chunk " + ident_text(cid));
        return;
    }
    if (part.acc && (part.acc->size() != data->size() || part.dtype != dtype)) {
        size_t a = itemsize_of(part.dtype), b = itemsize_of(dtype);
        sink_->note(source, 0, names_[own_] + ": dropped contribution from " + names_[source] +
                                   " to chunk " + ident_text(cid) + ": " +
                                   std::to_string(b ? data->size() / b : 0) + " x " +
                                   dtype_name(dtype) + ", the partial sum is " +
                                   std::to_string(a ? part.acc->size() / a : 0) + " x " +
                                   dtype_name(part.dtype));
        return;
    }
    part.heard.push_back(source);
    if (!part.acc) {
        if (source != own_) {
            part.charged_to = source;
            part.charged = cost(data);
            held_[source] += part.charged;
        }
        part.acc = std::move(data);
        part.dtype = dtype;
        part.owned = writable;
    } else if (part.owned) {
        add_arrays(dtype, part.acc->data(), part.acc->data(), data->data(),
                   data->size() / itemsize_of(dtype));
    } else {
        BufRef sum = buffers.take(data->size());
        add_arrays(dtype, sum->data(), part.acc->data(), data->data(),
                   data->size() / itemsize_of(dtype));
        part.acc = std::move(sum);
        part.owned = true;
    }
    if (part.heard.size() < 1 + t->children.size()) return;
    Partial done = std::move(part);
    partials_.erase(ident);
    release(done.charged_to, done.charged);
    aggregated_.add(ident);
    if (t->parent < 0) finish(*t, cid, done.dtype, done.acc);
    else send(t->parent, KIND_CHUNK_UP, cid, done.dtype, done.acc);
}

void Exchange::finish(const TreeView &t, const ChunkRef &cid, uint8_t dtype,
                      const BufRef &total) {
    Ident ident{cid.key, cid.chunk, cid.rnd};
    if (delivered_.contains(ident)) {
        sink_->note(-1, 2, names_[own_] + ": dropped duplicate total of chunk " +
                               ident_text(cid));
        return;
    }
    delivered_.add(ident);
    for (int child : t.down_children) send(child, KIND_CHUNK_DOWN, cid, dtype, total);
    sink_->deliver(cid, dtype, total);
}

void Exchange::contribute(const ChunkRef &cid, uint8_t dtype, BufRef data) {
    own_round_ = std::max(own_round_, cid.rnd);
    add(cid, own_, dtype, std::move(data), true);
}

bool Exchange::admit(const char *what, int source, const ChunkRef &cid, int64_t c,
                     bool window) {
    std::string why;
    int64_t held = held_.count(source) ? held_[source] : 0;
    if (window && cid.rnd > own_round_ + (uint64_t)rounds_ahead_)
        why = "round " + std::to_string(cid.rnd) + " is more than " +
              std::to_string(rounds_ahead_) + " rounds ahead of this DC's round " +
              std::to_string(own_round_);
    else if (held + c > held_bytes_)
        why = std::to_string(held) + " bytes are already kept for " + names_[source] +
              " (at most " + std::to_string(held_bytes_) + ")";
    else
        return true;
    sink_->note(source, 0, names_[own_] + ": dropped " + what + " of key " +
                               std::to_string(cid.key) + " chunk " + std::to_string(cid.chunk) +
                               " from " + names_[source] + ": " + why);
    return false;
}

bool Exchange::known(uint8_t kind, int source, const ChunkRef &cid, uint8_t dtype,
                     const BufRef &data) {
    if (cid.version < floor_) {
        sink_->note(source, 0, names_[own_] + ": dropped chunk " + ident_text(cid) +
                                   " of policy " + std::to_string(cid.version) + " from " +
                                   names_[source] + ": replaced by policy " +
                                   std::to_string(floor_) + " after a server was lost");
        return false;
    }
    if (versions_.count(cid.version)) return true;
    // no round window for a policy not yet announced (the held bytes bound it): a new
    // server learns its rounds with the replay policy, after the survivors' first chunks
    if (!admit("a chunk of an unknown policy", source, cid, cost(data), false)) return false;
    sink_->note(source, 1, names_[own_] + ": chunk " + ident_text(cid) + " of policy " +
                               std::to_string(cid.version) +
                               ", not yet announced here: held until it is");
    held_[source] += cost(data);
    waiting_.push_back({source, kind, cid, dtype, data});
    return false;
}

void Exchange::on_up(int source, const ChunkRef &cid, uint8_t dtype, BufRef data) {
    if (!admit("CHUNK_UP", source, cid, cost(data), versions_.count(cid.version) > 0) ||
        !known(KIND_CHUNK_UP, source, cid, dtype, data))
        return;
    const TreeView *t = tree(cid, source, KIND_CHUNK_UP);
    if (t == nullptr) return;
    if (std::find(t->children.begin(), t->children.end(), source) == t->children.end()) {
        sink_->note(source, 0, names_[own_] + ": dropped CHUNK_UP of key " +
                                   std::to_string(cid.key) + " chunk " +
                                   std::to_string(cid.chunk) + " from " + names_[source] +
                                   ", which is not a child here in the tree rooted at " +
                                   names_[t->root]);
        return;
    }
    add(cid, source, dtype, std::move(data), false);
}

void Exchange::on_down(int source, const ChunkRef &cid, uint8_t dtype, BufRef data) {
    if (cid.rnd > own_round_ + (uint64_t)rounds_ahead_ && versions_.count(cid.version)) {
        admit("CHUNK_DOWN", source, cid, cost(data));       // logs the drop
        return;
    }
    if (!known(KIND_CHUNK_DOWN, source, cid, dtype, data)) return;
    const TreeView *t = tree(cid, source, KIND_CHUNK_DOWN);
    if (t == nullptr) return;
    if (t->down_parent != source) {
        sink_->note(source, 0, names_[own_] + ": dropped CHUNK_DOWN of key " +
                                   std::to_string(cid.key) + " chunk " +
                                   std::to_string(cid.chunk) + " from " + names_[source] +
                                   ", which is not the broadcast parent here in the tree "
                                   "rooted at " + names_[t->root]);
        return;
    }
    finish(*t, cid, dtype, data);
}

void Exchange::on_chunk(int source, uint8_t kind, const ChunkRef &cid, uint8_t dtype,
                        BufRef data) {
    if (kind == KIND_CHUNK_UP) on_up(source, cid, dtype, std::move(data));
    else on_down(source, cid, dtype, std::move(data));
}

void Exchange::policy_added() {
    std::vector<Waiting> waiting;
    waiting.swap(waiting_);
    for (auto &w : waiting) {
        if (versions_.count(w.cid.version)) {
            release(w.source, cost(w.data));
            on_chunk(w.source, w.kind, w.cid, w.dtype, w.data);
        } else {
            waiting_.push_back(std::move(w));
        }
    }
}

void Exchange::restart(uint32_t floor) {
    floor_ = std::max(floor_, floor);
    partials_.clear();
    std::vector<Waiting> kept;
    for (auto &w : waiting_)
        if (w.cid.version >= floor_) kept.push_back(std::move(w));
    waiting_.swap(kept);
    held_.clear();
    for (auto &w : waiting_) held_[w.source] += cost(w.data);
}

void Exchange::forget_after(const std::map<uint32_t, uint64_t> &rounds) {
    aggregated_.forget_after(rounds);
    delivered_.forget_after(rounds);
    for (const auto &[key, rnd] : rounds) own_round_ = std::max(own_round_, rnd);  // replay
}

}  // namespace netstorm
