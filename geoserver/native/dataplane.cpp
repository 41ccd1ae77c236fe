#include "dataplane.hpp"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <stdexcept>

namespace netstorm {

namespace {
constexpr size_t PLAIN_AT = 64 - HEADER_BYTES;     // an opened header's offset: its payload
}                                                  // then starts 64-byte aligned

double monotonic_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);      // Python's time.monotonic() on Linux
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

DataPlane::DataPlane(const ZmqApi *z, void *router, int wake_fd, Settings settings)
    : exchange(settings.own, settings.names, settings.rounds_ahead, settings.held_bytes, this),
      queues(z, settings.retain_bytes), z_(z), router_(router), wake_fd_(wake_fd),
      s_(std::move(settings)), stalled_(s_.names.size(), 0), relayed_(s_.names.size(), 0) {
    peers_.own = s_.own;
    peers_.servers = s_.servers;
    peers_.principals = s_.principals;
    peers_.curve = s_.curve;
    peers_.max_chunk_bytes = s_.max_chunk_bytes;
}

void DataPlane::set_route(int dc, bool stalled, bool relayed) {
    if (dc < 0 || dc >= (int)stalled_.size()) throw std::out_of_range("no such DC");
    stalled_[dc] = stalled;
    relayed_[dc] = relayed;
}

void DataPlane::send_chunk(int dc, uint8_t kind, const ChunkRef &cid, uint8_t dtype,
                           const BufRef &data) {
    bool direct = !stalled_[dc] && (!relayed_[dc] || data->size() < s_.min_split_bytes);
    if (!direct) {          // multipath or a detour: Python cuts and relays it
        Event e{Event::ROUTE};
        e.dc = dc;
        e.kind = kind;
        e.cid = cid;
        e.dtype = dtype;
        e.data = data;
        events_.push_back(std::move(e));
        ++python_events_;
        return;
    }
    OutMessage msg;
    msg.priority = {(double)cid.rnd, (double)cid.key, (double)cid.chunk};
    Header h;
    h.kind = kind;
    h.sender = s_.node_id;
    h.dtype = dtype;
    h.tree = cid.tree;
    h.policy = cid.version;
    h.key = cid.key;
    h.chunk = cid.chunk;
    h.seq = cid.rnd;
    msg.header = Buf::allocate(HEADER_BYTES);
    write_header(h, msg.header->data());
    msg.payload.push_back(data);
    queues.send(dc, std::move(msg), clock());
}

void DataPlane::deliver(const ChunkRef &cid, uint8_t dtype, const BufRef &total) {
    Event e{Event::DELIVERED};
    e.cid = cid;
    e.dtype = dtype;
    e.data = total;
    events_.push_back(std::move(e));
    ++python_events_;
}

void DataPlane::note(int source, int level, const std::string &text) {
    Event e{Event::NOTE};
    e.dc = source;
    e.level = level;
    e.text = text;
    events_.push_back(std::move(e));
    ++python_events_;
}

bool DataPlane::pending() const {
    int events = 0;
    size_t len = sizeof events;
    if (z_->getsockopt(router_, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN))
        return true;
    len = sizeof events;
    if (bulk_router_ != nullptr && z_->getsockopt(bulk_router_, ZMQ_EVENTS, &events, &len) == 0 &&
        (events & ZMQ_POLLIN))
        return true;
    return !held_.empty() && held_.top().due <= monotonic_s();
}

bool DataPlane::receive_frames(void *socket, std::vector<BufRef> *frames) {
    for (;;) {
        zmq_msg part;
        z_->msg_init(&part);
        if (z_->msg_recv(&part, socket, frames->empty() ? ZMQ_DONTWAIT : 0) < 0) {
            z_->msg_close(&part);
            if (frames->empty()) return false;
            throw std::runtime_error("ZeroMQ lost the rest of a message");
        }
        bool more = z_->msg_more(&part);
        frames->push_back(Buf::received(&part));
        if (!more) return true;
    }
}

bool DataPlane::held_back(std::vector<BufRef> &frames, bool bulk, double now) {
    std::string peer;
    if (frames.size() < 2 || s_.delays.empty() || !frames[1]->property("Peer-Address", &peer))
        return false;
    auto delay = s_.delays.find(peer);
    if (delay == s_.delays.end() || delay->second <= 0) return false;
    held_.push({now + delay->second, held_order_++, std::move(frames), bulk});
    ++delayed;
    return true;
}

bool DataPlane::receive_one(double now) {
    std::vector<BufRef> frames;
    if (!receive_frames(router_, &frames)) return false;
    if (!held_back(frames, false, now)) classify(std::move(frames), now);
    return true;
}

void DataPlane::classify(std::vector<BufRef> frames, double now) {
    Header h;
    std::string user;
    bool has_user = frames.size() > 1 && frames[1]->property("User-Id", &user);
    int source = -1;
    bool ok = frames.size() >= 2 &&
              recognise(peers_, frames.size() - 1, frames[1]->data(), frames[1]->size(),
                        frames.size() > 2 ? frames[2]->size() : 0,
                        frames.size() > 3 ? frames[3]->size() : 0, has_user ? &user : nullptr,
                        &h, &source);
    if (!ok) {
        Event e{Event::MSG};
        e.has_user_id = has_user;
        e.user_id = user;
        if (frames.size() > 1) frames[1]->property("Peer-Address", &e.peer_address);
        e.frames = std::move(frames);
        events_.push_back(std::move(e));
        ++python_events_;
        ++handed_over;
        return;
    }
    ++fast;
    Event a{Event::ARRIVAL};
    a.dc = source;
    a.bytes = HEADER_BYTES + frames[3]->size();
    a.queued = h.flags & FLAG_QUEUED;
    a.t = now;
    a.behind = pending();
    events_.push_back(std::move(a));
    ++arrivals_;
    ChunkRef cid{h.key, h.chunk, h.seq, h.policy, h.tree};
    exchange.on_chunk(source, h.kind, cid, h.dtype, std::move(frames[3]));
}

void DataPlane::set_opener(int dc, BulkOpener *opener, uint16_t node) {
    if (opener == nullptr) openers_.erase(dc);
    else openers_[dc] = {opener, node};
    for (auto it = conns_.begin(); it != conns_.end();)
        it = it->second == dc ? conns_.erase(it) : std::next(it);
}

bool DataPlane::receive_bulk_one(double now) {
    std::vector<BufRef> frames;
    if (!receive_frames(bulk_router_, &frames)) return false;
    if (!held_back(frames, true, now)) open_bulk(std::move(frames), now);
    return true;
}

void DataPlane::refuse_bulk(const BufRef &rid, const std::string &why) {
    static const char *hex = "0123456789abcdef";
    std::string conn;
    for (size_t i = 0; i < rid->size(); ++i) {
        conn += hex[rid->data()[i] >> 4];
        conn += hex[rid->data()[i] & 15];
    }
    ++refused;
    note(-1, 0, names_of_own() + ": dropped a bulk frame from connection " + conn + ": " + why);
}

void DataPlane::open_bulk(std::vector<BufRef> frames, double now) {
    // bulk_channel.BulkReceiver's rules: one frame; opened by the key of the DC its
    // connection is bound to, or (a connection's first frame) by whichever installed key
    // opens it out of place; then a whole dense chunk whose header names that DC's server
    if (frames.size() != 2) {
        refuse_bulk(frames[0], std::to_string(frames.size() - 1) + " frames, a bulk message is one");
        return;
    }
    std::string rid(reinterpret_cast<const char *>(frames[0]->data()), frames[0]->size());
    BufRef sealed = frames[1], plain;
    int dc = -1;
    uint64_t counter = 0;
    auto bound = conns_.find(rid);
    try {
        if (sealed->size() < BULK_OVERHEAD) {
            refuse_bulk(frames[0], "a frame shorter than a sealed one");
            return;
        }
        // opened out of place into a buffer where the payload lands 64-byte aligned (the
        // sums load whole elements); one pass either way
        BufRef out = Buf::allocate(PLAIN_AT + sealed->size() - BULK_OVERHEAD);
        if (bound != conns_.end() && openers_.count(bound->second)) {
            dc = bound->second;
            OpenStatus status = openers_[dc].opener->open(sealed->data(), sealed->size(),
                                                          out->data() + PLAIN_AT, &counter);
            if (status != OpenStatus::ok) {
                refuse_bulk(frames[0], "on DC " + s_.names[dc] + "'s connection: " +
                                           open_status_name(status));
                return;
            }
            plain = Buf::slice(out, PLAIN_AT, sealed->size() - BULK_OVERHEAD);
        } else {
            for (auto &[candidate, o] : openers_)
                if (o.opener->open(sealed->data(), sealed->size(), out->data() + PLAIN_AT,
                                   &counter) == OpenStatus::ok) {
                    dc = candidate;
                    break;
                }
            if (dc < 0) {
                refuse_bulk(frames[0], "no link key opens it (a stranger, a wrong key or a "
                                       "forged, replayed or truncated frame)");
                return;
            }
            if (conns_.size() >= 4 * std::max<size_t>(1, openers_.size())) conns_.clear();
            conns_[rid] = dc;
            plain = Buf::slice(out, PLAIN_AT, sealed->size() - BULK_OVERHEAD);
        }
    } catch (const std::exception &exc) {       // a key closed meanwhile
        refuse_bulk(frames[0], exc.what());
        return;
    }
    ++opened;
    Header h;
    std::string why;
    size_t item = 0;
    if (plain->size() < HEADER_BYTES || !parse_header(plain->data(), HEADER_BYTES, &h))
        why = "no valid header";
    else if (h.kind != KIND_CHUNK_UP && h.kind != KIND_CHUNK_DOWN)
        why = "kind " + std::to_string(h.kind) + " on the bulk channel, which carries CHUNK_UP "
              "and CHUNK_DOWN only";
    else if ((h.flags & ~FLAG_QUEUED) != 0)
        why = "flags " + std::to_string(h.flags) + " (a compressed or unknown chunk)";
    else if ((item = itemsize_of(h.dtype)) == 0)
        why = "dtype " + std::to_string(h.dtype);
    else if ((plain->size() - HEADER_BYTES) % item != 0 ||        // (an empty key's chunk
             plain->size() - HEADER_BYTES > s_.max_chunk_bytes)    // is empty: accepted)
        why = "a payload of " + std::to_string(plain->size() - HEADER_BYTES) + " bytes";
    else if (h.sender != openers_[dc].node)
        why = "header's sender is node " + std::to_string(h.sender) + ", not node " +
              std::to_string(openers_[dc].node) + ", DC " + s_.names[dc] +
              "'s server that holds this link key";
    if (!why.empty()) {
        refuse_bulk(frames[0], "from DC " + s_.names[dc] + "'s link: " + why);
        return;
    }
    Event a{Event::ARRIVAL};
    a.dc = dc;
    a.bytes = plain->size();
    a.queued = h.flags & FLAG_QUEUED;
    a.t = now;
    a.behind = pending();
    events_.push_back(std::move(a));
    ++arrivals_;
    ChunkRef cid{h.key, h.chunk, h.seq, h.policy, h.tree};
    exchange.on_chunk(dc, h.kind, cid, h.dtype,
                      Buf::slice(plain, HEADER_BYTES, plain->size() - HEADER_BYTES));
}

void DataPlane::run(double timeout_s, size_t max_arrivals) {
    double deadline = monotonic_s() + std::max(0.0, timeout_s);
    std::vector<zmq_pollitem> items;
    std::vector<int> peers;
    for (;;) {
        double now = monotonic_s();
        while (!held_.empty() && held_.top().due <= now && !needs_python() &&
               arrivals_ < max_arrivals) {     // in order: Python sees a held message first
            Held due = held_.top();
            held_.pop();
            if (due.bulk) open_bulk(std::move(due.frames), now);
            else classify(std::move(due.frames), now);
        }
        if (needs_python() || arrivals_ >= max_arrivals) return;
        double wait_s = deadline - now;
        if (!events_.empty()) wait_s = 0;
        if (!held_.empty()) wait_s = std::min(wait_s, held_.top().due - now);
        long wait_ms = wait_s <= 0 ? 0 : (long)std::ceil(wait_s * 1000);
        items.clear();
        peers.clear();
        items.push_back({router_, 0, ZMQ_POLLIN, 0});
        if (wake_fd_ >= 0) items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
        size_t bulk_item = items.size();
        if (bulk_router_ != nullptr) items.push_back({bulk_router_, 0, ZMQ_POLLIN, 0});
        size_t first_peer = items.size();       // then one item per backlogged peer
        for (int peer : queues.backlogged()) {
            void *sock = queues.poll_socket(peer);
            if (sock == nullptr) continue;
            items.push_back({sock, 0, ZMQ_POLLOUT, 0});
            peers.push_back(peer);
        }
        int rc = z_->poll(items.data(), (int)items.size(), wait_ms);
        if (rc < 0 && z_->errno_() != ZMQ_EINTR) throw std::runtime_error("zmq_poll failed");
        now = monotonic_s();
        for (size_t i = first_peer; rc > 0 && i < items.size(); ++i)
            if (items[i].revents & ZMQ_POLLOUT) queues.flush(peers[i - first_peer], now);
        if (wake_fd_ >= 0 && rc > 0 && (items[1].revents & ZMQ_POLLIN)) {
            eventfd_t count;
            eventfd_read(wake_fd_, &count);
            Event e{Event::NOTE};
            e.level = -1;           // woken: Python looks at what it was woken for
            events_.push_back(std::move(e));
            ++python_events_;
        }
        if (rc > 0 && bulk_router_ != nullptr && (items[bulk_item].revents & ZMQ_POLLIN)) {
            for (int n = 0; n < 64 && receive_bulk_one(now); ++n) {
                for (int peer : queues.backlogged()) queues.flush(peer, now);
                if (needs_python() || arrivals_ >= max_arrivals) break;
                now = monotonic_s();
            }
            if (needs_python() || arrivals_ >= max_arrivals) return;
        }
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
            // what already waits, without a poll each; links with room get their next
            // chunk in between (the Python loop's drain)
            for (int n = 0; n < 64 && receive_one(now); ++n) {
                for (int peer : queues.backlogged()) queues.flush(peer, now);
                if (needs_python() || arrivals_ >= max_arrivals) break;
                now = monotonic_s();
            }
        } else if (!events_.empty() && !pending()) {
            return;         // nothing more waits: the link monitor hears of the arrivals
        }
        if (needs_python() || arrivals_ >= max_arrivals) return;
        if (monotonic_s() >= deadline) return;
    }
}

}  // namespace netstorm
