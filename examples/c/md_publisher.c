/*
 * Market-data publisher through the mdbus C API.
 *
 *   md_publisher CONFIG.toml STREAM COUNT SIZE
 *
 * Opens the stream, prints "ready", waits for a line on stdin, publishes
 * COUNT messages of SIZE bytes (byte k of message seq is (seq * 31 + k) mod
 * 256) with zero-copy claim/commit, prints "published N", then keeps the
 * publisher serviced (heartbeats, retransmissions on UDP) until stdin
 * closes, and closes the stream (subscribers see end of stream).
 */
#include <mdbus.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc) {
    fprintf(stderr, "md_publisher: %s: %s (%s)\n", what, mdbus_last_error_message(),
            mdbus_error_name(rc));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: md_publisher CONFIG.toml STREAM COUNT SIZE\n");
        return 2;
    }
    unsigned long long count = strtoull(argv[3], NULL, 10);
    size_t size = (size_t)strtoull(argv[4], NULL, 10);

    mdbus_bus *bus = NULL;
    int rc = mdbus_bus_open_file(argv[1], &bus);
    if (rc != MDBUS_OK) return fail("open bus", rc);
    mdbus_publisher *pub = NULL;
    rc = mdbus_publisher_open(bus, argv[2], &pub);
    if (rc != MDBUS_OK) return fail("open publisher", rc);
    printf("ready\n");
    fflush(stdout);

    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 0;

    uint64_t seq = 0;
    for (unsigned long long i = 0; i < count; i++) {
        uint8_t *buf = NULL;
        rc = mdbus_publisher_claim(pub, size, &buf);
        if (rc != MDBUS_OK) return fail("claim", rc);
        uint64_t next = i + 1;
        for (size_t k = 0; k < size; k++) buf[k] = (uint8_t)(next * 31 + k);
        rc = mdbus_publisher_commit(pub, &seq);
        if (rc != MDBUS_OK) return fail("commit", rc);
    }
    rc = mdbus_publisher_flush(pub);
    if (rc != MDBUS_OK) return fail("flush", rc);
    printf("published %llu last_seq=%llu\n", count, (unsigned long long)seq);
    fflush(stdout);

    /* Stay available for retransmit requests until told to stop. */
    struct pollfd in = {.fd = 0, .events = POLLIN};
    for (;;) {
        rc = mdbus_publisher_service(pub);
        if (rc != MDBUS_OK) return fail("service", rc);
        if (poll(&in, 1, 1) > 0 && (in.revents & (POLLIN | POLLHUP))) {
            if (!fgets(line, sizeof line, stdin)) break;
        }
    }
    mdbus_publisher_counters st;
    mdbus_publisher_stats(pub, &st);
    rc = mdbus_publisher_close(pub);
    if (rc != MDBUS_OK) return fail("close publisher", rc);
    mdbus_bus_close(bus);
    printf("closed published=%llu\n", (unsigned long long)st.published);
    return 0;
}
