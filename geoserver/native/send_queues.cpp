#include "send_queues.hpp"

#include <algorithm>
#include <stdexcept>

namespace netstorm {

namespace {
constexpr size_t LAST_SIZES = 3;        // SEND_HWM + 2 (send_queue.py)

void release(void *, void *hint) { delete static_cast<BufRef *>(hint); }
}  // namespace

uint64_t OutMessage::payload_bytes() const {
    uint64_t n = 0;
    for (auto &p : payload) n += p->size();
    return n;
}

bool OutMessage::queued() const {
    uint16_t flags;
    std::memcpy(&flags, header->data() + FLAGS_AT, 2);
    return flags & FLAG_QUEUED;
}

void OutMessage::set_queued(bool on) {
    uint16_t flags;
    std::memcpy(&flags, header->data() + FLAGS_AT, 2);
    flags = on ? (flags | FLAG_QUEUED) : (flags & ~FLAG_QUEUED);
    std::memcpy(header->data() + FLAGS_AT, &flags, 2);
}

bool SendQueues::Later::operator()(const OutMessage &a, const OutMessage &b) const {
    if (a.priority != b.priority)
        return std::lexicographical_compare(b.priority.begin(), b.priority.end(),
                                            a.priority.begin(), a.priority.end());
    return a.order > b.order;
}

void SendQueues::set_socket(int peer, void *socket) {
    sockets_[peer] = socket;
    auto it = peers_.find(peer);
    if (it != peers_.end() && it->second.blocked != it->second.bulk) it->second.blocked = nullptr;
}

void SendQueues::requeue(int peer, OutMessage msg) {
    Peer &p = peers_[peer];
    msg.order = order_++;
    p.heap.push_back(std::move(msg));
    std::push_heap(p.heap.begin(), p.heap.end(), Later());
}

void *SendQueues::socket(int peer) const {
    auto it = sockets_.find(peer);
    return it == sockets_.end() ? nullptr : it->second;
}

void SendQueues::set_bulk(int peer, void *socket, BulkSealer *sealer, size_t max_frame) {
    Peer &p = peers_[peer];
    p.bulk = sealer ? socket : nullptr;
    p.sealer = sealer;
    p.max_frame = max_frame;
    p.blocked = nullptr;
}

void *SendQueues::socket_for(const Peer &p, int peer, const OutMessage &msg) const {
    if (p.bulk != nullptr && !msg.meta && msg.payload.size() == 1 &&
        (msg.header->data()[3] == KIND_CHUNK_UP || msg.header->data()[3] == KIND_CHUNK_DOWN) &&
        HEADER_BYTES + msg.payload[0]->size() + BULK_OVERHEAD <= p.max_frame)
        return p.bulk;
    return socket(peer);
}

void *SendQueues::poll_socket(int peer) const {
    auto it = peers_.find(peer);
    if (it != peers_.end() && it->second.blocked != nullptr) return it->second.blocked;
    return socket(peer);
}

bool SendQueues::send_sealed(Peer &p, OutMessage &msg) {
    const BufRef &payload = msg.payload[0];
    BufRef frame = Buf::allocate(HEADER_BYTES + payload->size() + BULK_OVERHEAD);
    const uint8_t *parts[2] = {msg.header->data(), payload->data()};
    size_t lens[2] = {HEADER_BYTES, payload->size()};
    p.sealer->seal_parts(parts, lens, 2, frame->data(), frame->size());
    zmq_msg part;
    z_->msg_init_data(&part, frame->data(), frame->size(), release, new BufRef(frame));
    if (z_->msg_send(&part, p.bulk, ZMQ_DONTWAIT) < 0) {
        z_->msg_close(&part);       // a gap in the counters, which the receiver allows
        p.blocked = p.bulk;         // poll it for room rather than retry at once
        return false;
    }
    ++sealed_messages;
    return true;
}

bool SendQueues::try_send(int peer, OutMessage &msg) {
    if (transmit) {
        if (!transmit(peer, msg)) return false;
        ++sent_messages;
        sent_bytes += msg.payload_bytes();
        return true;
    }
    Peer &p = peers_[peer];
    void *sock = socket_for(p, peer, msg);
    if (sock == nullptr) throw std::runtime_error("no connection to peer " + std::to_string(peer));
    int events = 0;
    size_t len = sizeof events;
    if (z_->getsockopt(sock, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLOUT)) {
        p.blocked = sock;
        return false;
    }
    p.blocked = nullptr;
    if (sock == p.bulk) {
        if (!send_sealed(p, msg)) return false;
        ++sent_messages;
        sent_bytes += msg.payload_bytes();
        return true;
    }
    size_t frames = 2 + msg.payload.size();
    for (size_t i = 0; i < frames; ++i) {
        zmq_msg part;
        int more = i + 1 < frames ? ZMQ_SNDMORE : 0;
        if (i == 0 || i == 1) {
            const BufRef &buf = i == 0 ? msg.header : msg.meta;
            size_t n = buf ? buf->size() : 0;
            z_->msg_init_size(&part, n);
            if (n) std::memcpy(z_->msg_data(&part), buf->data(), n);
        } else {
            const BufRef &buf = msg.payload[i - 2];
            z_->msg_init_data(&part, buf->data(), buf->size(), release, new BufRef(buf));
        }
        if (z_->msg_send(&part, sock, ZMQ_DONTWAIT | more) < 0) {
            z_->msg_close(&part);
            if (i == 0) {                   // nothing of it left; a later part cannot fail
                p.blocked = sock;           // poll it for room rather than retry at once
                return false;
            }
            throw std::runtime_error("ZeroMQ refused part of a message it had accepted");
        }
    }
    ++sent_messages;
    sent_bytes += msg.payload_bytes();
    return true;
}

void SendQueues::handed(Peer &p, OutMessage msg, double now) {
    p.progress = now;
    if (msg.queued()) p.timed = now;
    p.sizes.push_back(msg.payload_bytes());
    if (p.sizes.size() > LAST_SIZES) p.sizes.pop_front();
    Header h;
    if (retain_ && parse_header(msg.header->data(), msg.header->size(), &h) &&
        (h.kind == KIND_CHUNK_UP || h.kind == KIND_CHUNK_DOWN || h.kind == KIND_RELAY)) {
        p.recent_bytes += msg.payload_bytes();
        p.recent.push_back(std::move(msg));
        while (p.recent_bytes > retain_ && p.recent.size() > 1) {
            p.recent_bytes -= p.recent.front().payload_bytes();
            p.recent.pop_front();
        }
    }
}

size_t SendQueues::release_before(uint64_t round) {
    size_t dropped = 0;
    for (auto &[peer, p] : peers_) {
        std::deque<OutMessage> kept;
        uint64_t bytes = 0;
        for (auto &m : p.recent) {
            Header h;
            if (parse_header(m.header->data(), m.header->size(), &h) && h.seq < round) {
                ++dropped;
                continue;
            }
            bytes += m.payload_bytes();
            kept.push_back(std::move(m));
        }
        p.recent.swap(kept);
        p.recent_bytes = bytes;
    }
    return dropped;
}

size_t SendQueues::retained(int peer) const {
    auto it = peers_.find(peer);
    return it == peers_.end() ? 0 : it->second.recent.size();
}

void SendQueues::send(int peer, OutMessage msg, double now) {
    Peer &p = peers_[peer];
    bool waited = !p.heap.empty();
    if (!waited) {
        if (try_send(peer, msg)) {
            handed(p, std::move(msg), now);
            return;
        }
        p.progress = now;
    }
    msg.set_queued(true);
    msg.order = order_++;
    p.heap.push_back(std::move(msg));
    std::push_heap(p.heap.begin(), p.heap.end(), Later());
    if (waited) flush(peer, now);
}

void SendQueues::flush(int peer, double now) {
    auto found = peers_.find(peer);
    if (found == peers_.end()) return;
    Peer &p = found->second;
    while (!p.heap.empty()) {
        OutMessage &top = p.heap.front();
        if (p.paused) top.set_queued(false);
        if (!try_send(peer, top)) return;
        std::pop_heap(p.heap.begin(), p.heap.end(), Later());
        OutMessage msg = std::move(p.heap.back());
        p.heap.pop_back();
        p.paused = false;
        handed(p, std::move(msg), now);
    }
}

void SendQueues::paused() {
    for (auto &[peer, p] : peers_)
        if (!p.heap.empty()) p.paused = true;
}

std::vector<int> SendQueues::backlogged() const {
    std::vector<int> out;
    for (auto &[peer, p] : peers_)
        if (!p.heap.empty()) out.push_back(peer);
    return out;
}

size_t SendQueues::waiting(int peer) const {
    auto it = peers_.find(peer);
    return it == peers_.end() ? 0 : it->second.heap.size();
}

size_t SendQueues::waiting_all() const {
    size_t n = 0;
    for (auto &[peer, p] : peers_) n += p.heap.size();
    return n;
}

double SendQueues::progress(int peer) const {
    auto it = peers_.find(peer);
    return it == peers_.end() ? 0.0 : it->second.progress;
}

uint64_t SendQueues::last_bytes(int peer) const {
    auto it = peers_.find(peer);
    uint64_t n = 0;
    if (it != peers_.end())
        for (auto s : it->second.sizes) n += s;
    return n;
}

double SendQueues::last_timed(int peer) const {
    auto it = peers_.find(peer);
    return it == peers_.end() ? 0.0 : it->second.timed;
}

std::vector<OutMessage> SendQueues::take_waiting(int peer) {
    std::vector<OutMessage> out;
    auto it = peers_.find(peer);
    if (it == peers_.end()) return out;
    out.swap(it->second.heap);
    std::sort(out.begin(), out.end(), [](const OutMessage &a, const OutMessage &b) {
        return Later()(b, a);
    });
    return out;
}

std::pair<std::vector<OutMessage>, std::vector<OutMessage>> SendQueues::take(int peer) {
    std::vector<OutMessage> handed;
    auto it = peers_.find(peer);
    if (it != peers_.end()) {
        for (auto &m : it->second.recent) handed.push_back(std::move(m));
        it->second.recent.clear();
        it->second.recent_bytes = 0;
    }
    auto waiting = take_waiting(peer);
    return {std::move(handed), std::move(waiting)};
}

}  // namespace netstorm
