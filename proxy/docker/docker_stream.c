#include "docker_stream.h"

void sg_docker_demux_init(sg_docker_demux_t *d)
{
    d->hdr_have = 0;
    d->left = 0;
    d->stream = 0;
}

int sg_docker_demux_feed(sg_docker_demux_t *d, const uint8_t *p, size_t len, sg_docker_demux_cb cb, void *ctx)
{
    while (len != 0) {
        if (d->left == 0) {
            size_t take = sizeof(d->hdr) - d->hdr_have;
            if (take > len)
                take = len;
            for (size_t i = 0; i < take; i++)
                d->hdr[d->hdr_have + i] = p[i];
            d->hdr_have += take;
            p += take;
            len -= take;
            if (d->hdr_have < sizeof(d->hdr))
                return 0;
            d->hdr_have = 0;
            if (d->hdr[0] > 2 || d->hdr[1] != 0 || d->hdr[2] != 0 || d->hdr[3] != 0)
                return -1;
            d->stream = d->hdr[0];
            d->left = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 | (uint32_t)d->hdr[6] << 8 | d->hdr[7];
            continue;
        }
        size_t take = d->left < len ? d->left : len;
        cb(ctx, d->stream, p, take);
        d->left -= (uint32_t)take;
        p += take;
        len -= take;
    }
    return 0;
}
