// Market-data subscriber with the C++ wrapper; the same output as
// examples/c/md_subscriber.c:
//   subscriber CONFIG.toml STREAM COUNT
#include "mdbus.hpp"

#include <cstdlib>
#include <iostream>

int main(int argc, char **argv) try {
    if (argc != 4) {
        std::cerr << "usage: subscriber CONFIG.toml STREAM COUNT\n";
        return 2;
    }
    const unsigned long long count = std::strtoull(argv[3], nullptr, 10);
    auto bus = mdbus::Bus::from_file(argv[1]);
    auto sub = bus.subscriber(argv[2]);
    std::cout << "ready" << std::endl;
    unsigned long long messages = 0, bytes = 0, bad = 0, lost = 0, ended = 0;
    while (messages + lost < count && !ended) {
        sub.poll([&](const mdbus::Event &e) {
            switch (e.kind()) {
            case MDBUS_EVENT_MESSAGE: {
                messages++;
                auto p = e.payload();
                bytes += p.size();
                for (std::size_t k = 0; k < p.size(); k++) {
                    if (static_cast<std::uint8_t>(p[k]) != static_cast<std::uint8_t>(e.seq() * 31 + k)) {
                        bad++;
                        break;
                    }
                }
                break;
            }
            case MDBUS_EVENT_OVERRUN:
            case MDBUS_EVENT_GAP:
                lost += e.raw.to - e.raw.from;
                break;
            case MDBUS_EVENT_END_OF_STREAM:
            case MDBUS_EVENT_PUBLISHER_DOWN:
                ended = 1;
                break;
            }
        });
    }
    std::cout << "messages=" << messages << " bytes=" << bytes << " bad=" << bad << " lost=" << lost
              << " ended=" << ended << std::endl;
    return 0;
} catch (const mdbus::error &e) {
    std::cerr << "subscriber: " << e.what() << "\n";
    return 1;
}
