# Writes OUT, a C file holding the bytes of IN as sg_gw_openapi_json[] (NUL
# terminated) and its length: GET /openapi.json is compiled in
# (gateway/handler/openapi.c). cmake -DIN=... -DOUT=... -P embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} by embed.cmake: do not edit */\n#include <stddef.h>\n"
  "const char sg_gw_openapi_json[] = {${bytes} 0};\nconst size_t sg_gw_openapi_json_len = ${len};\n")
