// mdbus.hpp: a header-only C++17 RAII wrapper over the mdbus C API
// (include/mdbus.h). Handles close themselves; failures throw mdbus::error
// with the library's sentence. Same thread rules as the C API: a Bus may be
// shared between threads, each Publisher/Subscriber/Session belongs to one
// thread at a time (movable, not copyable). Poll callbacks must not throw:
// an exception may not unwind through the C library, so the wrapper catches
// it, stops delivering, and rethrows it after the poll returns.
#pragma once

#include <mdbus.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace mdbus {

class error : public std::runtime_error {
  public:
    error(int code, const std::string &what) : std::runtime_error(what), code_(code) {}
    int code() const noexcept { return code_; }

  private:
    int code_;
};

inline int check(int rc) {
    if (rc < 0) throw error(rc, std::string(mdbus_error_name(rc)) + ": " + mdbus_last_error_message());
    return rc;
}

// One event as the poll callback sees it; the payload is borrowed.
struct Event {
    const mdbus_event &raw;
    std::uint32_t kind() const noexcept { return raw.kind; }
    std::uint64_t seq() const noexcept { return raw.seq; }
    std::string_view payload() const noexcept {
        return {reinterpret_cast<const char *>(raw.payload), raw.len};
    }
};

namespace detail {
template <class F> struct Trampoline {
    F &f;
    std::exception_ptr failed;
    static void call(void *ctx, const mdbus_event *ev) noexcept {
        auto *t = static_cast<Trampoline *>(ctx);
        if (t->failed) return;
        try {
            t->f(Event{*ev});
        } catch (...) {
            t->failed = std::current_exception();
        }
    }
};

template <class F> int poll_with(int (*poll)(void *, mdbus_event_cb, void *), void *h, F &f) {
    Trampoline<F> t{f, nullptr};
    int n = poll(h, &Trampoline<F>::call, &t);
    if (t.failed) std::rethrow_exception(t.failed);
    return check(n);
}

template <class H, int (*Close)(H *)> class Handle {
  public:
    Handle() = default;
    explicit Handle(H *h) : h_(h) {}
    Handle(Handle &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    Handle &operator=(Handle &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    ~Handle() { reset(); }
    void reset() noexcept {
        if (h_) Close(std::exchange(h_, nullptr));
    }
    H *get() const noexcept { return h_; }

  private:
    H *h_ = nullptr;
};
} // namespace detail

class Publisher {
  public:
    explicit Publisher(mdbus_publisher *p) : h_(p) {}
    // Zero copy: write into the returned buffer, then commit().
    std::uint8_t *claim(std::size_t len) {
        std::uint8_t *buf = nullptr;
        check(mdbus_publisher_claim(h_.get(), len, &buf));
        return buf;
    }
    std::uint64_t commit() {
        std::uint64_t seq = 0;
        check(mdbus_publisher_commit(h_.get(), &seq));
        return seq;
    }
    std::uint64_t publish(std::string_view bytes) {
        std::uint64_t seq = 0;
        check(mdbus_publisher_publish(h_.get(), reinterpret_cast<const std::uint8_t *>(bytes.data()),
                                      bytes.size(), &seq));
        return seq;
    }
    void flush() { check(mdbus_publisher_flush(h_.get())); }
    void service() { check(mdbus_publisher_service(h_.get())); }
    mdbus_publisher_counters counters() const {
        mdbus_publisher_counters c{};
        check(mdbus_publisher_stats(h_.get(), &c));
        return c;
    }

  private:
    detail::Handle<mdbus_publisher, mdbus_publisher_close> h_;
};

class Subscriber {
  public:
    explicit Subscriber(mdbus_subscriber *s) : h_(s) {}
    // Calls f(const mdbus::Event&) per event; returns how many.
    template <class F> int poll(F &&f) {
        return detail::poll_with(
            [](void *h, mdbus_event_cb cb, void *ctx) {
                return mdbus_subscriber_poll(static_cast<mdbus_subscriber *>(h), cb, ctx);
            },
            h_.get(), f);
    }
    mdbus_subscriber_counters counters() const {
        mdbus_subscriber_counters c{};
        check(mdbus_subscriber_stats(h_.get(), &c));
        return c;
    }

  private:
    detail::Handle<mdbus_subscriber, mdbus_subscriber_close> h_;
};

class Session {
  public:
    explicit Session(mdbus_session *s) : h_(s) {}
    std::uint64_t send(std::string_view bytes) {
        std::uint64_t seq = 0;
        check(mdbus_session_send(h_.get(), reinterpret_cast<const std::uint8_t *>(bytes.data()),
                                 bytes.size(), &seq));
        return seq;
    }
    // Returns how many messages; throws mdbus::error with code
    // MDBUS_ERR_PEER_CLOSED once the peer closed and all was read.
    template <class F> int poll(F &&f) {
        return detail::poll_with(
            [](void *h, mdbus_event_cb cb, void *ctx) {
                return mdbus_session_poll(static_cast<mdbus_session *>(h), cb, ctx);
            },
            h_.get(), f);
    }

  private:
    detail::Handle<mdbus_session, mdbus_session_close> h_;
};

class Bus {
  public:
    static Bus from_file(const std::string &path) {
        mdbus_bus *b = nullptr;
        check(mdbus_bus_open_file(path.c_str(), &b));
        return Bus(b);
    }
    static Bus from_toml(const std::string &toml) {
        mdbus_bus *b = nullptr;
        check(mdbus_bus_open_toml(toml.c_str(), &b));
        return Bus(b);
    }
    Publisher publisher(const std::string &name) const {
        mdbus_publisher *p = nullptr;
        check(mdbus_publisher_open(h_.get(), name.c_str(), &p));
        return Publisher(p);
    }
    Subscriber subscriber(const std::string &name) const {
        mdbus_subscriber *s = nullptr;
        check(mdbus_subscriber_open(h_.get(), name.c_str(), &s));
        return Subscriber(s);
    }
    Session accept(const std::string &name) const {
        mdbus_session *s = nullptr;
        check(mdbus_session_accept(h_.get(), name.c_str(), &s));
        return Session(s);
    }
    Session connect(const std::string &name) const {
        mdbus_session *s = nullptr;
        check(mdbus_session_connect(h_.get(), name.c_str(), &s));
        return Session(s);
    }

  private:
    explicit Bus(mdbus_bus *b) : h_(b) {}
    detail::Handle<mdbus_bus, mdbus_bus_close> h_;
};

} // namespace mdbus
