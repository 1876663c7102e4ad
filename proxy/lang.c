#include "lang.h"

#include <stdio.h>
#include <string.h>

/* Library installs (install.h): what is missing, fetch into the store (in an
 * installer container, with network), install from the store (in the
 * sandbox, without). Names and specs arrive validated, and in the
 * environment as SANDGATE_SPEC / SANDGATE_NAME / SANDGATE_INDEX /
 * SANDGATE_STORE, or shell-quoted after missing_cmd. */
#define PY_LIBS "/tmp/sandgate/libs/python"
#define JS_LIBS "/tmp/sandgate/libs/node/node_modules"

#define PY_MISSING                                                                                                           \
    "PYTHONPATH=" PY_LIBS " python3 -c 'import sys, importlib.metadata as m\n"                                                \
    "for n in sys.argv[1:]:\n"                                                                                               \
    "    try: m.version(n)\n"                                                                                                \
    "    except m.PackageNotFoundError: print(n)\n'"

/* Fetches land in a private directory under .tmp and are renamed into
 * place when complete, so that an install that reads the store (or a
 * second fetch of the same package running at once) never sees a file or
 * directory half written. Leftovers of killed installers go after an hour. */
#define STORE_TMP(dir)                                                                                                       \
    "s=\"$SANDGATE_STORE/" dir "\"; mkdir -p \"$s/.tmp\" || exit 1; "                                                         \
    "find \"$s/.tmp\" -mindepth 1 -maxdepth 1 -mmin +60 -exec rm -rf {} + 2>/dev/null; "                                      \
    "t=$(mktemp -d \"$s/.tmp/XXXXXX\") && chmod 755 \"$t\" || exit 1; "

#define PY_FETCH                                                                                                             \
    "h=${SANDGATE_INDEX#*://}; h=${h%%/*}; h=${h%%:*}; " STORE_TMP("pip")                                                     \
    "python3 -m pip download --quiet --disable-pip-version-check --no-cache-dir --only-binary=:all: "                       \
    "--dest \"$t\" --find-links \"$s\" --index-url \"$SANDGATE_INDEX\" --trusted-host \"$h\" \"$SANDGATE_SPEC\"; rc=$?; "    \
    "if [ $rc -eq 0 ]; then for f in \"$t\"/*; do "                                                                          \
    "[ -f \"$f\" ] && [ ! -e \"$s/${f##*/}\" ] && mv -f \"$f\" \"$s/\"; done; fi; "                                          \
    "rm -rf \"$t\"; exit $rc"

#define PY_INSTALL                                                                                                           \
    "PYTHONPATH=" PY_LIBS " python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-index "         \
    "--find-links /opt/sandgate/store/pip --target " PY_LIBS " \"$SANDGATE_SPEC\" >&2 && "                                  \
    "PYTHONPATH=" PY_LIBS " exec python3 -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "          \
    "\"$SANDGATE_NAME\""

#define JS_MISSING                                                                                                           \
    "node -e 'const fs = require(\"fs\"), path = require(\"path\");\n"                                                     \
    "for (const n of process.argv.slice(1)) {\n"                                                                             \
    "  const dirs = [\"" JS_LIBS "\", \"/sandbox/node_modules\", ...(require.resolve.paths(n) || [])];\n"                    \
    "  if (!dirs.some((d) => fs.existsSync(path.join(d, n, \"package.json\")))) console.log(n);\n"                          \
    "}' --"

/* The first complete fetch of a spec is renamed into place; a second one
 * finds the place taken (rename fails on a directory that is not empty)
 * and is thrown away. A directory there without the package (left by an
 * older, non-atomic fetch) is moved aside first. */
#define JS_FETCH                                                                                                             \
    STORE_TMP("npm") "d=\"$s/$SANDGATE_SPEC\"; "                                                                              \
    "case \"$SANDGATE_SPEC\" in ?*@*) n=\"${SANDGATE_SPEC%@*}\" ;; *) n=\"$SANDGATE_SPEC\" ;; esac; "                           \
    "npm install --silent --ignore-scripts --no-audit --no-fund --no-package-lock --no-save "                               \
    "--registry \"$SANDGATE_INDEX\" --cache \"$SANDGATE_STORE/npm-cache\" --prefix \"$t\" \"$SANDGATE_SPEC\"; rc=$?; "                     \
    "if [ $rc -eq 0 ]; then mkdir -p \"$(dirname \"$d\")\" && { mv -T \"$t\" \"$d\" 2>/dev/null || "                            \
    "test -f \"$d/node_modules/$n/package.json\" || { mv -T \"$d\" \"$t.old\" && mv -T \"$t\" \"$d\"; } || "                      \
    "test -f \"$d/node_modules/$n/package.json\"; }; rc=$?; fi; "                                                           \
    "rm -rf \"$t\" \"$t.old\"; exit $rc"

#define JS_INSTALL                                                                                                           \
    "src=\"/opt/sandgate/store/npm/$SANDGATE_SPEC/node_modules\"; "                                                           \
    "test -f \"$src/$SANDGATE_NAME/package.json\" || { echo \"$SANDGATE_SPEC is not in the package store\" >&2; exit 1; }; "  \
    "mkdir -p " JS_LIBS " && cp -rsf \"$src/.\" " JS_LIBS "/ && "                                                             \
    "exec node -p 'require(process.argv[1] + \"/package.json\").version' \"" JS_LIBS "/$SANDGATE_NAME\""

static const sg_lang_t langs[] = {
    {.name = "python",
     .file_path = "/tmp/sandgate/main.py",
     .run_cmd = "PYTHONPATH=/sandbox:" PY_LIBS " exec python3 -u \"$SANDGATE_FILE\"",
     .kernel_cmd = "PYTHONPATH=" PY_LIBS " exec python3 -u /usr/local/lib/sandgate/kernel.py",
     .package_manager = "pip",
     .version_sep = "==",
     .missing_cmd = PY_MISSING,
     .fetch_cmd = PY_FETCH,
     .local_install_cmd = PY_INSTALL},
    {.name = "javascript",
     .file_path = "/tmp/sandgate/main.js",
     .run_cmd = "NODE_PATH=/sandbox/node_modules:" JS_LIBS " exec node \"$SANDGATE_FILE\"",
     .kernel_cmd = "NODE_PATH=" JS_LIBS " exec node /usr/local/lib/sandgate/kernel.js",
     .package_manager = "npm",
     .version_sep = "@",
     .missing_cmd = JS_MISSING,
     .fetch_cmd = JS_FETCH,
     .local_install_cmd = JS_INSTALL},
    /* Compiled languages compile in setup stage "compile" (a compile error
     * ends the execution with reason setup_failed, stage "compile"), then
     * run the program, both within the execution's timeout, one-shot (no
     * kernel). They have no library check: validation refuses "libraries"
     * for them (package_manager NULL). */
    {.name = "cpp",
     .file_path = "/tmp/sandgate/main.cpp",
     .compile_cmd = "g++ -std=gnu++17 -O2 -o /tmp/sandgate/main \"$SANDGATE_FILE\"",
     /* line-buffered stdout, so output before a crash or a timeout is kept */
     .run_cmd = "exec stdbuf -oL /tmp/sandgate/main"},
    {.name = "go",
     .file_path = "/tmp/sandgate/main.go",
     .compile_cmd = "go build -o /tmp/sandgate/main \"$SANDGATE_FILE\"",
     .run_cmd = "exec /tmp/sandgate/main"},
    /* The public class must be Main (as in llm-sandbox). Heap: half the
     * sandbox's memory (the JVM reads the container's limit). */
    {.name = "java",
     .file_path = "/tmp/sandgate/Main.java",
     .compile_cmd = "rm -rf /tmp/sandgate/classes && javac -encoding UTF-8 -d /tmp/sandgate/classes \"$SANDGATE_FILE\"",
     .run_cmd = "exec java -XX:MaxRAMPercentage=50 -cp /tmp/sandgate/classes Main"},
    /* sync.rb (made by the image) unbuffers $stdout, like python3 -u */
    {.name = "ruby",
     .file_path = "/tmp/sandgate/main.rb",
     .run_cmd = "exec ruby -r/usr/local/lib/sandgate/sync.rb \"$SANDGATE_FILE\""},
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
