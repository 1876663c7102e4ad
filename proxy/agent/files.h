/*
 * files.h — the PUT_FILE and GET_FILE requests: a file written or read
 * inside the work dir, its path confined there by paths.h. Answers OK
 * (PUT_FILE: the size written), FILE (GET_FILE: the bytes, in one message)
 * or ERROR (agent_proto.h).
 */
#ifndef SANDGATE_AGENT_FILES_H
#define SANDGATE_AGENT_FILES_H

#include <stddef.h>
#include <stdint.h>

void files_put(uint32_t id, const uint8_t *payload, size_t len);
void files_get(uint32_t id, const uint8_t *payload, size_t len);

#endif
