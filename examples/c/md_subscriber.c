/*
 * Market-data subscriber through the mdbus C API.
 *
 *   md_subscriber CONFIG.toml STREAM COUNT
 *
 * Subscribes, prints "ready", polls until COUNT messages arrived or the
 * stream ended, checking each payload against md_publisher's pattern
 * in place (no copy), then prints
 * "messages=N bytes=B bad=X lost=L ended=E".
 */
#include <mdbus.h>

#include <stdio.h>
#include <stdlib.h>

struct tally {
    unsigned long long messages, bytes, bad, lost, ended;
};

static void on_event(void *ctx, const mdbus_event *ev) {
    struct tally *t = ctx;
    switch (ev->kind) {
    case MDBUS_EVENT_MESSAGE:
        t->messages++;
        t->bytes += ev->len;
        for (size_t k = 0; k < ev->len; k++) {
            if (ev->payload[k] != (uint8_t)(ev->seq * 31 + k)) {
                t->bad++;
                break;
            }
        }
        break;
    case MDBUS_EVENT_OVERRUN:
    case MDBUS_EVENT_GAP:
        t->lost += ev->to - ev->from;
        break;
    case MDBUS_EVENT_END_OF_STREAM:
    case MDBUS_EVENT_PUBLISHER_DOWN:
        t->ended = 1;
        break;
    default:
        break;
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: md_subscriber CONFIG.toml STREAM COUNT\n");
        return 2;
    }
    unsigned long long count = strtoull(argv[3], NULL, 10);
    mdbus_bus *bus = NULL;
    int rc = mdbus_bus_open_file(argv[1], &bus);
    if (rc == MDBUS_OK) {
        mdbus_subscriber *sub = NULL;
        rc = mdbus_subscriber_open(bus, argv[2], &sub);
        if (rc == MDBUS_OK) {
            printf("ready\n");
            fflush(stdout);
            struct tally t = {0};
            while (t.messages + t.lost < count && !t.ended) {
                rc = mdbus_subscriber_poll(sub, on_event, &t);
                if (rc < 0) break;
            }
            if (rc >= 0) {
                printf("messages=%llu bytes=%llu bad=%llu lost=%llu ended=%llu\n", t.messages,
                       t.bytes, t.bad, t.lost, t.ended);
                mdbus_subscriber_close(sub);
                mdbus_bus_close(bus);
                return 0;
            }
        }
    }
    fprintf(stderr, "md_subscriber: %s (%s)\n", mdbus_last_error_message(), mdbus_error_name(rc));
    return 1;
}
