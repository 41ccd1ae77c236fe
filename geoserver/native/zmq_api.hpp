// The dozen ZeroMQ C functions the data plane calls, resolved at run time from the libzmq
// pyzmq loaded (pyzmq's wheel ships no zmq.h, and a second libzmq would not share its
// sockets). Prototypes as in libzmq 4.3's zmq.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace netstorm {

struct zmq_msg { alignas(8) unsigned char bytes[64]; };     // zmq_msg_t: 64 opaque bytes
struct zmq_pollitem {
    void *socket;
    int fd;
    short events;
    short revents;
};

constexpr int ZMQ_SNDMORE = 2, ZMQ_DONTWAIT = 1, ZMQ_POLLIN = 1, ZMQ_POLLOUT = 2,
              ZMQ_EVENTS = 15, ZMQ_MORE = 1, ZMQ_EAGAIN = 11, ZMQ_EINTR = 4;

struct ZmqApi {
    int (*msg_init)(zmq_msg *);
    int (*msg_init_size)(zmq_msg *, size_t);
    int (*msg_init_data)(zmq_msg *, void *, size_t, void (*)(void *, void *), void *);
    int (*msg_recv)(zmq_msg *, void *, int);
    int (*msg_send)(zmq_msg *, void *, int);
    void *(*msg_data)(zmq_msg *);
    size_t (*msg_size)(const zmq_msg *);
    int (*msg_more)(const zmq_msg *);
    const char *(*msg_gets)(const zmq_msg *, const char *);
    int (*msg_close)(zmq_msg *);
    int (*msg_copy)(zmq_msg *, zmq_msg *);
    int (*getsockopt)(void *, int, void *, size_t *);
    int (*poll)(zmq_pollitem *, int, long);
    int (*errno_)();
    void (*version)(int *, int *, int *);
};

// The API, or nullptr with `why` set (no libzmq loaded, a function missing, version < 4.3).
const ZmqApi *zmq_api(std::string *why);

}  // namespace netstorm
