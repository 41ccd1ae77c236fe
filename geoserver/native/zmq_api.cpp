#include "zmq_api.hpp"

#include <dlfcn.h>

#include "loaded_library.hpp"

namespace netstorm {

namespace {
template <typename F>
bool find(void *lib, const char *name, F *out, std::string *why) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (*out == nullptr && why->empty()) *why = std::string("libzmq has no ") + name;
    return *out != nullptr;
}

ZmqApi load(std::string *why, bool *ok) {
    ZmqApi api{};
    std::string path;
    void *lib = loaded_library("libzmq", &path);
    if (lib == nullptr) {
        *why = "no libzmq is loaded in this process (import zmq first)";
        *ok = false;
        return api;
    }
    bool all = find(lib, "zmq_msg_init", &api.msg_init, why) &
               find(lib, "zmq_msg_init_size", &api.msg_init_size, why) &
               find(lib, "zmq_msg_init_data", &api.msg_init_data, why) &
               find(lib, "zmq_msg_recv", &api.msg_recv, why) &
               find(lib, "zmq_msg_send", &api.msg_send, why) &
               find(lib, "zmq_msg_data", &api.msg_data, why) &
               find(lib, "zmq_msg_size", &api.msg_size, why) &
               find(lib, "zmq_msg_more", &api.msg_more, why) &
               find(lib, "zmq_msg_gets", &api.msg_gets, why) &
               find(lib, "zmq_msg_close", &api.msg_close, why) &
               find(lib, "zmq_msg_copy", &api.msg_copy, why) &
               find(lib, "zmq_getsockopt", &api.getsockopt, why) &
               find(lib, "zmq_poll", &api.poll, why) &
               find(lib, "zmq_errno", &api.errno_, why) &
               find(lib, "zmq_version", &api.version, why);
    if (all) {
        int major = 0, minor = 0, patch = 0;
        api.version(&major, &minor, &patch);
        if (major < 4 || (major == 4 && minor < 3)) {
            *why = path + " is libzmq " + std::to_string(major) + "." +
                   std::to_string(minor) + ", the data plane needs 4.3 or later";
            all = false;
        }
    }
    *ok = all;
    return api;
}
}  // namespace

const ZmqApi *zmq_api(std::string *why) {
    static std::string reason;
    static bool ok = false;
    static const ZmqApi api = load(&reason, &ok);
    if (!ok && why != nullptr) *why = reason;
    return ok ? &api : nullptr;
}

}  // namespace netstorm
