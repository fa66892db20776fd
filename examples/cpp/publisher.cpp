// Market-data publisher with the C++ wrapper; the same protocol and
// payload pattern as examples/c/md_publisher.c:
//   publisher CONFIG.toml STREAM COUNT SIZE
#include "mdbus.hpp"

#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char **argv) try {
    if (argc != 5) {
        std::cerr << "usage: publisher CONFIG.toml STREAM COUNT SIZE\n";
        return 2;
    }
    const unsigned long long count = std::strtoull(argv[3], nullptr, 10);
    const std::size_t size = std::strtoull(argv[4], nullptr, 10);
    auto bus = mdbus::Bus::from_file(argv[1]);
    auto pub = bus.publisher(argv[2]);
    std::cout << "ready" << std::endl;
    std::string line;
    if (!std::getline(std::cin, line)) return 0;
    std::uint64_t seq = 0;
    for (unsigned long long i = 1; i <= count; i++) {
        std::uint8_t *buf = pub.claim(size);
        for (std::size_t k = 0; k < size; k++) buf[k] = static_cast<std::uint8_t>(i * 31 + k);
        seq = pub.commit();
    }
    pub.flush();
    std::cout << "published " << count << " last_seq=" << seq << std::endl;
    pollfd in{0, POLLIN, 0};
    for (;;) {
        pub.service();
        if (::poll(&in, 1, 1) > 0 && (in.revents & (POLLIN | POLLHUP)) && !std::getline(std::cin, line)) break;
    }
    std::cout << "closed published=" << pub.counters().published << std::endl;
    return 0;
} catch (const mdbus::error &e) {
    std::cerr << "publisher: " << e.what() << "\n";
    return 1;
}
