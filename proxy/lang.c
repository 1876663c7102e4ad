#include "lang.h"

#include <stdio.h>
#include <string.h>

#define PY_LIBCHECK                                                                                                          \
    "python3 -c 'import importlib.util, sys\n"                                                                               \
    "missing = [n for n in sys.argv[1:] if importlib.util.find_spec(n.lower().replace(\"-\", \"_\")) is None]\n"             \
    "if missing:\n"                                                                                                          \
    "    print(\"library not installed in this sandbox (installs are not enabled): \" + \", \".join(missing), "             \
    "file=sys.stderr)\n"                                                                                                     \
    "    sys.exit(1)\n' "

#define JS_LIBCHECK                                                                                                          \
    "node -e 'const missing = process.argv.slice(1).filter((n) => { try { require.resolve(n); return false; } "           \
    "catch (e) { return true; } });\n"                                                                                       \
    "if (missing.length) { console.error(\"library not installed in this sandbox (installs are not enabled): \" + "        \
    "missing.join(\", \")); process.exit(1); }' "

static const sg_lang_t langs[] = {
    {"python", "/tmp/sandgate/main.py", NULL, "PYTHONPATH=/sandbox exec python3 -u \"$SANDGATE_FILE\"",
     "exec python3 -u /usr/local/lib/sandgate/kernel.py", PY_LIBCHECK, "pip"},
    {"javascript", "/tmp/sandgate/main.js", NULL, "NODE_PATH=/sandbox/node_modules exec node \"$SANDGATE_FILE\"",
     "exec node /usr/local/lib/sandgate/kernel.js", JS_LIBCHECK, "npm"},
};

const sg_lang_t *sg_lang_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
        if (strlen(langs[i].name) == len && memcmp(langs[i].name, name, len) == 0)
            return &langs[i];
    return NULL;
}

size_t sg_lang_count(void)
{
    return sizeof(langs) / sizeof(langs[0]);
}

const sg_lang_t *sg_lang_at(size_t i)
{
    return i < sg_lang_count() ? &langs[i] : NULL;
}

const char *sg_lang_names(void)
{
    static char names[256];
    if (names[0] == '\0') {
        for (size_t i = 0; i < sg_lang_count(); i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "", langs[i].name);
    }
    return names;
}
