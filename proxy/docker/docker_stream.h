/*
 * docker_stream.h — incremental decoder of Docker's multiplexed stream
 * (attach and exec without a TTY): frames of an 8-byte header
 * {stream, 0, 0, 0, size as big-endian u32} then size bytes of payload.
 * Frames may be split anywhere across reads; feed whatever arrives.
 */
#ifndef SANDGATE_DOCKER_STREAM_H
#define SANDGATE_DOCKER_STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t hdr[8];
    size_t hdr_have;
    uint32_t left;  /* payload bytes still to come in the current frame */
    uint8_t stream; /* 0 stdin, 1 stdout, 2 stderr */
} sg_docker_demux_t;

typedef void (*sg_docker_demux_cb)(void *ctx, int stream, const uint8_t *p, size_t len);

void sg_docker_demux_init(sg_docker_demux_t *d);
/* Calls cb for each piece of payload, in order (a frame may come in several
 * pieces). Returns 0, or -1 when a header is malformed (stream > 2 or the
 * padding bytes are not zero): the stream cannot be trusted after that. */
int sg_docker_demux_feed(sg_docker_demux_t *d, const uint8_t *p, size_t len, sg_docker_demux_cb cb, void *ctx);

#endif
