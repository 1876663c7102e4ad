'use strict';
/*
 * sandgate kernel for JavaScript (Node.js 18+, no npm packages): runs
 * successive pieces of code in one global scope.
 *
 * Started by sandgate-agent (see proxy/agent/agent_proto.h, "Kernels") as
 * `exec node kernel.js`, with requests "<byte length>\n<code>" on fd 3;
 * after each run it flushes stdout and stderr and answers "<exit code>\n"
 * on fd 4; once started, before reading its first request, it writes
 * "ready\n" there.
 *
 * Each piece runs with vm.runInThisContext, like successive <script>s: its
 * top-level let, const, function and class declarations stay for the next.
 * A run ends like `node file.js` would: when its completion value (awaited
 * if it is a thenable) has settled and no asynchronous work it started is
 * left (ref'd timers, immediates, sockets, servers, child processes, fs and
 * dns requests, ...; tracked with async_hooks), so that the output of
 * `setTimeout(() => console.log("late"), 200)` belongs to its run. An
 * uncaught exception or unhandled rejection prints its stack to stderr and
 * ends the run at once with 1; the timers and immediates it left are
 * cancelled (its sockets and servers are not). process.exitCode becomes the
 * run's exit code. process.exit(n) exits the kernel itself, as it would
 * exit node: the agent then reports exit code n and the kernel's state lost.
 *
 * The completion value of a run that succeeded (awaited, as above), unless
 * it is undefined, goes to fd 5, the result channel (agent_proto.h, "The
 * result channel"), as Jupyter's execute_result: "<byte length>\n" and
 * {"type": "text", "mime": "text/plain", "data": util.inspect(value),
 * "main": true}. It is not printed.
 */
const asyncHooks = require('async_hooks');
const fs = require('fs');
const Module = require('module');
const path = require('path');
const util = require('util');
const vm = require('vm');

const REQUESTS = 3;
const ANSWERS = 4;
const RESULTS = 5;

// fd 5 is there when the kernel starts, or it never is ours.
let resultsOpen = true;
try {
  fs.fstatSync(RESULTS);
} catch (err) {
  resultsOpen = false;
}

const workdir = process.env.SANDGATE_WORKDIR || process.cwd();
process.chdir(workdir);

// The user's code sees what a script workdir/index.js would, so that
// require() finds workdir/node_modules.
const mainFile = path.join(workdir, 'index.js');
const userModule = new Module(mainFile, null);
userModule.filename = mainFile;
userModule.paths = Module._nodeModulePaths(workdir);
userModule.loaded = true;
const userRequire = Module.createRequire(mainFile);
userRequire.main = userModule;
Object.assign(globalThis, {
  require: userRequire,
  module: userModule,
  exports: userModule.exports,
  __filename: mainFile,
  __dirname: workdir,
});

// Asynchronous resources created while a run goes on: id -> [type, resource].
// Created before tracking starts, stdout and stderr are never in it.
process.stdout;
process.stderr;
const pending = new Map();
let tracking = false;

// Types that are bookkeeping rather than work: node does not wait for them
// (and some are only destroyed by the garbage collector, or never).
const NOT_WORK = new Set([
  'PROMISE', 'DNSCHANNEL', 'FILEHANDLE', 'DIRHANDLE', 'HTTPCLIENTREQUEST', 'HTTPINCOMINGMESSAGE',
  'HTTP2SESSION', 'HTTP2STREAM', 'TLSWRAP', 'JSSTREAM', 'ELDHISTOGRAM', 'INSPECTORJSBINDING',
]);

function isWork(type, resource) {
  if (typeof resource.hasRef === 'function')
    return resource.hasRef() === true; // handles and timers: only ref'd ones (null once closed)
  return !NOT_WORK.has(type) && !(resource instanceof asyncHooks.AsyncResource);
}

function untracked(fn) {
  const was = tracking;
  tracking = false;
  try {
    return fn();
  } finally {
    tracking = was;
  }
}

// The run going on: { settled, value, finish(code) }, or null.
let current = null;
let checkScheduled = false;

// Ends the run when its value has settled and none of its work is left.
// Runs from setImmediate, so that the callbacks and microtasks queued by the
// last piece of work have run first.
function check() {
  checkScheduled = false;
  if (current === null || !current.settled)
    return;
  for (const [type, resource] of pending.values()) {
    if (isWork(type, resource))
      return;
  }
  current.finish(0);
}

function scheduleCheck() {
  if (checkScheduled || current === null)
    return;
  checkScheduled = true;
  untracked(() => setImmediate(check));
}

asyncHooks.createHook({
  init(id, type, triggerId, resource) {
    if (tracking && type !== 'PROMISE')
      pending.set(id, [type, resource]);
  },
  destroy(id) {
    if (pending.delete(id))
      scheduleCheck();
  },
}).enable();

// Also a check now and then, for work that ends without a destroy event
// (a timer unref'd by its callback); and a ref'd timer, so that node does not
// exit while a run awaits a promise that nothing will ever settle.
setInterval(scheduleCheck, 50);

// A stack without the frames of this file and of node:vm below the user's.
function describe(err) {
  if (!(err instanceof Error) || typeof err.stack !== 'string')
    return 'Uncaught ' + util.inspect(err);
  const lines = err.stack.split('\n');
  const cut = lines.findIndex((l) => /^\s+at /.test(l) && (l.includes('node:vm') || l.includes(__filename)));
  return (cut >= 0 ? lines.slice(0, cut) : lines).join('\n');
}

// An uncaught error ends the run it happened in (the current one unless
// said otherwise) with 1.
function fail(err, run = current) {
  untracked(() => process.stderr.write(describe(err) + '\n'));
  if (run !== null)
    run.finish(1);
}

process.on('uncaughtException', (err) => fail(err));
process.on('unhandledRejection', (err) => fail(err));

function runOne(source, filename) {
  return new Promise((resolve) => {
    const run = {
      settled: false,
      finish(code) {
        if (current !== run)
          return;
        current = null;
        tracking = false;
        if (code !== 0) {
          // What a failed run left scheduled must not run in later ones.
          for (const [type, resource] of pending.values()) {
            if (type === 'Timeout')
              clearTimeout(resource);
            else if (type === 'Immediate')
              clearImmediate(resource);
          }
        }
        pending.clear();
        resolve({ code, value: run.value });
      },
    };

    // From a macrotask, as a script runs: its process.nextTick callbacks
    // come before its promise reactions.
    setImmediate(() => {
      let value;

      pending.clear();
      current = run;
      tracking = true;
      try {
        value = vm.runInThisContext(source, { filename });
      } catch (err) {
        fail(err, run);
        return;
      }
      Promise.resolve(value).then(
        (settledValue) => {
          run.settled = true;
          run.value = settledValue;
          scheduleCheck();
        },
        (err) => fail(err, run));
    });
  });
}

function readExactly(length) {
  const buf = Buffer.alloc(length);
  let got = 0;

  while (got < length) {
    let n;
    try {
      n = fs.readSync(REQUESTS, buf, got, length - got, null);
    } catch (err) {
      if (err.code === 'EAGAIN' || err.code === 'EINTR')
        continue;
      throw err;
    }
    if (n === 0)
      return null;
    got += n;
  }
  return buf;
}

// The next piece of code, or null when the agent is gone.
function readRequest() {
  let head = '';

  for (;;) {
    const c = readExactly(1);
    if (c === null)
      return null;
    if (c[0] === 0x0a)
      break;
    head += c.toString('latin1');
  }
  const code = readExactly(Number(head));
  return code === null ? null : code.toString('utf8');
}

// One record on the result channel.
function emit(type, mime, data, main) {
  if (!resultsOpen)
    return;
  const record = Buffer.from(JSON.stringify({ type, mime, data, main }));
  const framed = Buffer.concat([Buffer.from(`${record.length}\n`), record]);
  let off = 0;
  try {
    while (off < framed.length) {
      try {
        off += fs.writeSync(RESULTS, framed, off);
      } catch (err) {
        if (err.code !== 'EAGAIN')
          throw err;
      }
    }
  } catch (err) {
    resultsOpen = false; // closed or replaced by the user's code
  }
}

function flushed(stream) {
  return new Promise((resolve) => stream.write('', resolve));
}

async function main() {
  fs.writeSync(ANSWERS, 'ready\n'); // the start is over: the first run's time starts now
  for (let count = 1; ; count++) {
    const source = readRequest();
    if (source === null)
      process.exit(0);
    let { code, value } = await runOne(source, `<exec-${count}>`);
    if (code === 0 && value !== undefined) {
      try {
        emit('text', 'text/plain', util.inspect(value), true);
      } catch (err) {
        process.stderr.write(describe(err) + '\n');
        code = 1;
      }
    }
    if (code === 0 && process.exitCode)
      code = process.exitCode;
    process.exitCode = undefined;
    await flushed(process.stdout);
    await flushed(process.stderr);
    fs.writeSync(ANSWERS, `${code}\n`);
  }
}

main();
