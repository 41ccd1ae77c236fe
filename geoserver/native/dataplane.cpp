#include "dataplane.hpp"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <stdexcept>

namespace netstorm {

double monotonic_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);      // Python's time.monotonic() on Linux
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

DataPlane::DataPlane(const ZmqApi *z, void *router, int wake_fd, Settings settings)
    : exchange(settings.own, settings.names, settings.rounds_ahead, settings.held_bytes, this),
      queues(z, settings.keep_recent), z_(z), router_(router), wake_fd_(wake_fd),
      s_(std::move(settings)), stalled_(s_.names.size(), 0), relayed_(s_.names.size(), 0) {}

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
    return !held_.empty() && held_.top().due <= monotonic_s();
}

bool DataPlane::receive_one(double now) {
    std::vector<BufRef> frames;
    for (;;) {
        zmq_msg part;
        z_->msg_init(&part);
        if (z_->msg_recv(&part, router_, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
            z_->msg_close(&part);
            if (frames.empty()) return false;
            throw std::runtime_error("ZeroMQ lost the rest of a message");
        }
        bool more = z_->msg_more(&part);
        frames.push_back(Buf::received(&part));
        if (!more) break;
    }
    std::string peer;
    if (frames.size() > 1 && !s_.delays.empty() && frames[1]->property("Peer-Address", &peer)) {
        auto delay = s_.delays.find(peer);
        if (delay != s_.delays.end() && delay->second > 0) {
            held_.push({now + delay->second, held_order_++, std::move(frames)});
            ++delayed;
            return true;
        }
    }
    classify(std::move(frames), now);
    return true;
}

void DataPlane::classify(std::vector<BufRef> frames, double now) {
    // the common valid case, exactly the subset of what wire.decode, kinds.validate,
    // roles.refusal and WanTransport.on_message accept as a whole dense chunk: routing id,
    // header, empty meta, one payload frame of the header's dtype, flags within QUEUED, from
    // another DC's server, with that DC's key
    Header h;
    std::string user;
    bool ok = frames.size() == 4 && frames[2]->size() == 0 &&
                parse_header(frames[1]->data(), frames[1]->size(), &h) &&
                (h.kind == KIND_CHUNK_UP || h.kind == KIND_CHUNK_DOWN) &&
                (h.flags & ~FLAG_QUEUED) == 0 && itemsize_of(h.dtype) != 0 &&
                frames[3]->size() != 0 && frames[3]->size() <= s_.max_chunk_bytes &&
                frames[3]->size() % itemsize_of(h.dtype) == 0;
    int source = -1;
    if (ok) {
        auto server = s_.servers.find(h.sender);
        ok = server != s_.servers.end() && server->second != s_.own;
        if (ok) source = server->second;
    }
    if (ok && s_.curve) {
        auto principal = frames[1]->property("User-Id", &user) ? s_.principals.find(user)
                                                                : s_.principals.end();
        ok = principal != s_.principals.end() && principal->second == source;
    }
    if (!ok) {
        Event e{Event::MSG};
        e.has_user_id = frames.size() > 1 && frames[1]->property("User-Id", &e.user_id);
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

void DataPlane::run(double timeout_s, size_t max_arrivals) {
    double deadline = monotonic_s() + std::max(0.0, timeout_s);
    std::vector<zmq_pollitem> items;
    std::vector<int> peers;
    for (;;) {
        double now = monotonic_s();
        while (!held_.empty() && held_.top().due <= now) {
            Held due = held_.top();
            held_.pop();
            classify(std::move(due.frames), now);
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
        size_t first_peer = items.size();
        for (int peer : queues.backlogged()) {
            void *sock = queues.socket(peer);
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
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
            // what already waits, without a poll each; links with room get their next
            // chunk in between (the Python loop's drain)
            for (int n = 0; n < 64 && receive_one(now); ++n) {
                for (int peer : queues.backlogged()) queues.flush(peer, now);
                if (needs_python() || arrivals_ >= max_arrivals) break;
                now = monotonic_s();
            }
        }
        if (needs_python() || arrivals_ >= max_arrivals) return;
        if (monotonic_s() >= deadline && held_.empty()) return;
        if (monotonic_s() >= deadline) return;
    }
}

}  // namespace netstorm
