#include "loaded_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

namespace netstorm {

namespace {
struct Search {
    const char *part;
    std::string found;
};

int visit(struct dl_phdr_info *info, size_t, void *data) {
    auto *search = static_cast<Search *>(data);
    const char *name = info->dlpi_name;
    if (name != nullptr && std::strstr(name, search->part) != nullptr) {
        search->found = name;
        return 1;
    }
    return 0;
}
}  // namespace

void *loaded_library(const char *name_part, std::string *path) {
    Search search{name_part, {}};
    dl_iterate_phdr(visit, &search);
    if (search.found.empty()) return nullptr;
    if (path != nullptr) *path = search.found;
    return dlopen(search.found.c_str(), RTLD_NOW | RTLD_NOLOAD);
}

}  // namespace netstorm
