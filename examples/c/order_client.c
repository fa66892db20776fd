/*
 * Order-session client through the mdbus C API: connects to SESSION, sends
 * COUNT orders ("order N"), reads the acks, checks each is "ACK order N" in
 * order, closes, and prints "acks=N bad=X".
 *
 *   order_client CONFIG.toml SESSION COUNT
 */
#include <mdbus.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct client {
    unsigned long long acks, bad;
};

static void on_ack(void *ctx, const mdbus_event *ev) {
    struct client *c = ctx;
    char want[64];
    int n = snprintf(want, sizeof want, "ACK order %llu", c->acks + 1);
    if ((size_t)n != ev->len || memcmp(want, ev->payload, ev->len) != 0) c->bad++;
    c->acks++;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: order_client CONFIG.toml SESSION COUNT\n");
        return 2;
    }
    unsigned long long count = strtoull(argv[3], NULL, 10);
    mdbus_bus *bus = NULL;
    mdbus_session *s = NULL;
    int rc = mdbus_bus_open_file(argv[1], &bus);
    if (rc == MDBUS_OK) rc = mdbus_session_connect(bus, argv[2], &s);
    struct client c = {0};
    unsigned long long sent = 0;
    while (rc >= 0 && c.acks < count) {
        /* Keep a few orders in flight; never more than the acks we can take. */
        if (sent < count && sent - c.acks < 16) {
            char order[64];
            int n = snprintf(order, sizeof order, "order %llu", sent + 1);
            rc = mdbus_session_send(s, (const uint8_t *)order, (size_t)n, NULL);
            if (rc == MDBUS_OK) sent++;
        } else {
            rc = mdbus_session_poll(s, on_ack, &c);
        }
    }
    if (rc < 0) {
        fprintf(stderr, "order_client: %s (%s)\n", mdbus_last_error_message(), mdbus_error_name(rc));
        return 1;
    }
    mdbus_session_close(s);
    mdbus_bus_close(bus);
    printf("acks=%llu bad=%llu\n", c.acks, c.bad);
    return 0;
}
