/*
 * Order-session server through the mdbus C API: accepts SESSION and
 * answers each order with an ack ("ACK " + the order), zero-copy, until the
 * client closes; then prints "orders=N bytes=B".
 *
 *   order_server CONFIG.toml SESSION
 */
#include <mdbus.h>

#include <stdio.h>
#include <string.h>

struct server {
    mdbus_session *session;
    unsigned long long orders, bytes;
    int rc;
};

static void on_order(void *ctx, const mdbus_event *ev) {
    struct server *s = ctx;
    s->orders++;
    s->bytes += ev->len;
    /* The order is read in place; the ack is written in place. */
    uint8_t *buf = NULL;
    int rc = mdbus_session_claim(s->session, ev->len + 4, &buf);
    if (rc == MDBUS_OK) {
        memcpy(buf, "ACK ", 4);
        memcpy(buf + 4, ev->payload, ev->len);
        rc = mdbus_session_commit(s->session, ev->len + 4, NULL);
    }
    if (rc != MDBUS_OK) s->rc = rc;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: order_server CONFIG.toml SESSION\n");
        return 2;
    }
    mdbus_bus *bus = NULL;
    int rc = mdbus_bus_open_file(argv[1], &bus);
    struct server s = {0};
    if (rc == MDBUS_OK) rc = mdbus_session_accept(bus, argv[2], &s.session);
    if (rc != MDBUS_OK) {
        fprintf(stderr, "order_server: %s\n", mdbus_last_error_message());
        return 1;
    }
    for (;;) {
        rc = mdbus_session_poll(s.session, on_order, &s);
        if (rc < 0 || s.rc != MDBUS_OK) break;
    }
    if (s.rc != MDBUS_OK || rc != MDBUS_ERR_PEER_CLOSED) {
        fprintf(stderr, "order_server: %s (%s)\n", mdbus_last_error_message(),
                mdbus_error_name(s.rc != MDBUS_OK ? s.rc : rc));
        return 1;
    }
    printf("orders=%llu bytes=%llu\n", s.orders, s.bytes);
    mdbus_session_close(s.session);
    mdbus_bus_close(bus);
    return 0;
}
