/*
 * gateway.c — the gateway's process-wide context (gateway.h).
 */
#include "gateway.h"

sg_gw_t sg_gw;
