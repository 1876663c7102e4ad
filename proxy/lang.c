#include "lang.h"
#include "container.h"

#include <stdio.h>
#include <string.h>

/* Library installs (install.h): what is missing, fetch into the store (in an
 * installer container, with network), install from the store (in the
 * sandbox, without). Names and specs arrive validated, and in the
 * environment as SANDGATE_SPEC / SANDGATE_NAME / SANDGATE_INDEX /
 * SANDGATE_STORE, or shell-quoted after missing_cmd.
 *
 * The store holds one directory per spec, <store>/<manager>/<spec>/, made
 * by the first complete fetch of that spec and never changed afterwards: the
 * files it was fetched as, and MANIFEST, their sha256 in sha256sum's format
 * ("<hex>  <file>"). An install in a sandbox installs exactly the files the
 * manifest lists, each checked against its hash: nothing else in the store
 * (another spec's files, a newer or build-tagged wheel dropped beside them)
 * takes part. A spec without its directory makes the install exit with
 * SG_LANG_NOT_IN_STORE, and only that sends it to an installer.
 *
 * Every interpreter started here is isolated from the sandbox user's files:
 * an empty environment (env -i), an absolute path, python with -I (no
 * PYTHON* variables, no user site, not the working directory) and -S (no
 * site module: no .pth, sitecustomize or usercustomize), node from / (no
 * node_modules of the user's above it) requiring builtins only. The
 * libraries directory, which the user can write, is read as data (where to
 * look for distributions or package.json), never put on a module path. */
#define PY_LIBS "/tmp/sandgate/libs/python"
#define JS_LIBS "/tmp/sandgate/libs/node/node_modules"
#define PY_STORE SG_STORE_MOUNT "/pip"
#define JS_STORE SG_STORE_MOUNT "/npm"
#define PY_ISOLATED "/usr/bin/env -i /usr/bin/python3 -I -S"
#define JS_ISOLATED "cd / && exec /usr/bin/env -i /usr/bin/node"
/* The shell and script programs below are laid out as the programs they
 * are, not as C: clang-format leaves them. */
/* clang-format off */
#define NOT_IN_STORE_EXIT                                                                                                    \
    "{ echo \"$SANDGATE_SPEC is not in the package store\" >&2; exit " SG_LANG_NOT_IN_STORE_STR "; }"

/* Prints each name (as given) that no distribution in the libs dir or the
 * image's own site directories provides. */
#define PY_MISSING                                                                                                           \
    PY_ISOLATED " -c 'import sys, site, importlib.metadata as m\n"                                                           \
    "path = [\"" PY_LIBS "\"] + site.getsitepackages()\n"                                                                    \
    "for n in sys.argv[1:]:\n"                                                                                               \
    "    if next(iter(m.distributions(name=n, path=path)), None) is None: print(n)\n'"

/* Fetches land in a private directory under .tmp and are renamed into
 * place when complete, so that an install that reads the store (or a
 * second fetch of the same spec running at once) never sees a file or
 * directory half written: the first complete fetch wins (rename fails on a
 * directory that is not empty), a later one is thrown away. Leftovers of
 * killed installers go after an hour. */
#define STORE_TMP(dir)                                                                                                       \
    "s=\"$SANDGATE_STORE/" dir "\"; mkdir -p \"$s/.tmp\" || exit 1; "                                                        \
    "find \"$s/.tmp\" -mindepth 1 -maxdepth 1 -mmin +60 -exec rm -rf {} + 2>/dev/null; "                                     \
    "t=$(mktemp -d \"$s/.tmp/XXXXXX\") && chmod 755 \"$t\" || exit 1; d=\"$s/$SANDGATE_SPEC\"; "                             \
    "if [ -f \"$d/MANIFEST\" ]; then rm -rf \"$t\"; exit 0; fi; "

/* Only the spec's own files are candidates (no --find-links into the store:
 * another spec's files never resolve this one). */
#define PY_FETCH                                                                                                             \
    "h=${SANDGATE_INDEX#*://}; h=${h%%/*}; h=${h%%:*}; " STORE_TMP("pip")                                                    \
    "python3 -I -m pip download --quiet --no-input --disable-pip-version-check --no-cache-dir --only-binary=:all: "          \
    "--dest \"$t\" --index-url \"$SANDGATE_INDEX\" --trusted-host \"$h\" \"$SANDGATE_SPEC\"; rc=$?; "                        \
    "if [ $rc -eq 0 ]; then (cd \"$t\" && sha256sum -- *.whl > MANIFEST) && "                                                \
    "{ mv -T \"$t\" \"$d\" 2>/dev/null || test -f \"$d/MANIFEST\"; }; rc=$?; fi; "                                           \
    "rm -rf \"$t\"; exit $rc"

/* pip installs exactly the manifest's files, each verified against its
 * hash (--require-hashes), without resolving anything (--no-deps
 * --no-index: the fetch recorded the dependencies too). */
#define PY_INSTALL                                                                                                           \
    "d=\"" PY_STORE "/$SANDGATE_SPEC\"; test -f \"$d/MANIFEST\" || " NOT_IN_STORE_EXIT "; "                                  \
    "r=$(while read -r h f; do case \"$f\" in ''|*/*) echo \"malformed line in $d/MANIFEST\" >&2; exit 1;; esac; "           \
    "printf '%s/%s --hash=sha256:%s\\n' \"$d\" \"$f\" \"$h\"; done < \"$d/MANIFEST\") || exit 1; "                           \
    "printf '%s\\n' \"$r\" | /usr/bin/env -i /usr/bin/python3 -I -m pip install --quiet --no-input "                         \
    "--disable-pip-version-check --no-cache-dir --no-index --no-deps --require-hashes --upgrade "                            \
    "--target " PY_LIBS " -r /dev/stdin >&2 && "                                                                             \
    "exec " PY_ISOLATED " -c 'import sys, importlib.metadata as m\n"                                                         \
    "print(next(iter(m.distributions(name=sys.argv[1], path=[\"" PY_LIBS "\"]))).version)\n' \"$SANDGATE_NAME\""

/* Prints each name (as given) whose package.json is in neither the libs dir
 * nor node's global directories (the image's own packages). */
#define JS_MISSING                                                                                                           \
    JS_ISOLATED " -e 'const fs = require(\"node:fs\"), path = require(\"node:path\");\n"                                     \
    "const dirs = [\"" JS_LIBS "\", ...require(\"node:module\").globalPaths];\n"                                             \
    "for (const n of process.argv.slice(1))\n"                                                                               \
    "  if (!dirs.some((d) => fs.existsSync(path.join(d, n, \"package.json\")))) console.log(n);\n' --"

/* A directory there without MANIFEST (left by the layout before manifests)
 * is moved aside first. */
#define JS_FETCH                                                                                                             \
    STORE_TMP("npm")                                                                                                         \
    "npm install --silent --ignore-scripts --no-audit --no-fund --no-package-lock --no-save "                                \
    "--registry \"$SANDGATE_INDEX\" --cache /tmp/npm-cache --prefix \"$t\" \"$SANDGATE_SPEC\"; rc=$?; "                      \
    "if [ $rc -eq 0 ]; then (cd \"$t\" && find node_modules -type f -print0 | LC_ALL=C sort -z | "                           \
    "xargs -0r sha256sum -- > MANIFEST) && test -s \"$t/MANIFEST\" && mkdir -p \"$(dirname \"$d\")\" && "                    \
    "{ mv -T \"$t\" \"$d\" 2>/dev/null || test -f \"$d/MANIFEST\" || "                                                       \
    "{ mv -T \"$d\" \"$t.old\" && mv -T \"$t\" \"$d\"; } || test -f \"$d/MANIFEST\"; }; rc=$?; fi; "                         \
    "rm -rf \"$t\" \"$t.old\"; exit $rc"

/* Every file of the manifest is checked (a regular file, reached through
 * no symbolic link, with the recorded hash), and the tree must hold nothing
 * else (node resolves a module's own requires from its real path in the
 * store, so a file dropped beside it would count), before any is linked
 * into the libs dir. npm's .bin links are the only exception: they are
 * never linked. */
#define JS_INSTALL                                                                                                           \
    "d=\"" JS_STORE "/$SANDGATE_SPEC\"; test -f \"$d/MANIFEST\" || " NOT_IN_STORE_EXIT "; "                                  \
    JS_ISOLATED " -e 'const fs = require(\"node:fs\"), path = require(\"node:path\"), "                                      \
    "crypto = require(\"node:crypto\");\n"                                                                                   \
    "const [dir, dest, name] = process.argv.slice(1), top = path.join(dir, \"node_modules\"), files = [];\n"                 \
    "const fail = (m) => { console.error(m); process.exit(1); };\n"                                                          \
    "for (const l of fs.readFileSync(path.join(dir, \"MANIFEST\"), \"utf8\").split(\"\\n\")) {\n"                            \
    "  if (l === \"\") continue;\n"                                                                                          \
    "  const m = /^([0-9a-f]{64})  node_modules\\/(.+)$/.exec(l);\n"                                                         \
    "  if (m === null || m[2].split(\"/\").some((p) => p === \"\" || p === \".\" || p === \"..\"))\n"                        \
    "    fail(\"malformed line in \" + dir + \"/MANIFEST\");\n"                                                              \
    "  const f = path.join(top, m[2]);\n"                                                                                    \
    "  if (fs.realpathSync(f) !== f || !fs.lstatSync(f).isFile()) fail(f + \" is not a regular file of the store\");\n"      \
    "  if (crypto.createHash(\"sha256\").update(fs.readFileSync(f)).digest(\"hex\") !== m[1])\n"                             \
    "    fail(f + \" does not match the sha256 recorded when it was fetched\");\n"                                           \
    "  files.push(m[2]);\n"                                                                                                  \
    "}\n"                                                                                                                    \
    "if (!files.includes(name + \"/package.json\")) fail(dir + \" does not hold \" + name);\n"                               \
    "const listed = new Set(files), walk = (rel) => {\n"                                                                     \
    "  for (const e of fs.readdirSync(path.join(top, rel), { withFileTypes: true })) {\n"                                    \
    "    const r = rel === \"\" ? e.name : rel + \"/\" + e.name;\n"                                                          \
    "    if (e.isDirectory()) walk(r);\n"                                                                                    \
    "    else if (!listed.has(r) &&\n"                                                                                       \
    "             !(e.isSymbolicLink() && /^(@[^/]+\\/)?[^/]+\\/node_modules\\/\\.bin\\/[^/]+$|^\\.bin\\/[^/]+$/.test(r)))\n" \
    "      fail(path.join(top, r) + \" was not there when it was fetched\");\n"                                              \
    "  }\n"                                                                                                                  \
    "};\n"                                                                                                                   \
    "walk(\"\");\n"                                                                                                          \
    "for (const f of files) {\n"                                                                                             \
    "  const to = path.join(dest, f);\n"                                                                                     \
    "  fs.mkdirSync(path.dirname(to), { recursive: true });\n"                                                               \
    "  fs.rmSync(to, { force: true, recursive: true });\n"                                                                   \
    "  fs.symlinkSync(path.join(top, f), to);\n"                                                                             \
    "}\n"                                                                                                                    \
    "console.log(JSON.parse(fs.readFileSync(path.join(top, name, \"package.json\"), \"utf8\")).version);\n"                  \
    "' -- \"$d\" " JS_LIBS " \"$SANDGATE_NAME\""
/* clang-format on */

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

size_t sg_lang_index(const sg_lang_t *lang)
{
    size_t i = 0;
    while (i < sg_lang_count() && &langs[i] != lang)
        i++;
    return i;
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
