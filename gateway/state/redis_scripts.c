/*
 * redis_scripts.c — the Lua scripts of the Redis backend (redis_scripts.h).
 * Scripts get the gateway's wall clock as an argument, so they stay
 * deterministic.
 */
#include "redis_scripts.h"
#include "util.h"

#include <assert.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

/* The GCRA step of SCRIPT_RATE at the head of an admission script: KEYS[1]
 * the rate key, ARGV[1..3] now ms, emission interval T ms (0: no rate, the
 * step is skipped), burst; a refusal returns `denied` (which may use
 * `stored`); past it, `stored` is the arrival time the rate key held. */
#define RATE_STEP(denied)                                                                                              \
    "local now = tonumber(ARGV[1])\n"                                                                                  \
    "local t = tonumber(ARGV[2])\n"                                                                                    \
    "local stored = 0\n"                                                                                               \
    "if t > 0 then\n"                                                                                                  \
    "  local bucket = t * tonumber(ARGV[3])\n"                                                                         \
    "  stored = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"                                                    \
    "  local tat = stored\n"                                                                                           \
    "  if tat < now then tat = now end\n"                                                                              \
    "  local nxt = tat + t\n"                                                                                          \
    "  if now < nxt - bucket then return " denied " end\n"                                                             \
    "  redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', string.format('%d', nxt - now))\n"                   \
    "end\n"

/* First in every script that admits (rate, execution slots, quota):
 * while another gateway is the only one (redis.c, "solo": it admits from
 * its own copy of these keys), nothing is decided here; {-1} says wait.
 * ARGV's last is the calling gateway's id. */
#define SOLO_GUARD                                                                                                     \
    "local solo = redis.call('GET', 'sg:solo')\n"                                                                      \
    "if solo and solo ~= ARGV[#ARGV] then return {-1} end\n"

sg_state__script_t sg_state__scripts[SCRIPT_COUNT] = {
    /* KEYS: rate key. ARGV: now ms, emission interval T ms, burst.
     * The GCRA of state.c; returns {allowed, stored tat} and state.c's
     * sg_gcra recomputes remaining / reset / retry_after from the same
     * stored tat, so both backends share one formula. */
    [SCRIPT_RATE] = {SOLO_GUARD
                     "local now = tonumber(ARGV[1])\n"
                     "local t = tonumber(ARGV[2])\n"
                     "local bucket = t * tonumber(ARGV[3])\n"
                     "local stored = tonumber(redis.call('GET', KEYS[1]) or '0') or 0\n"
                     "local tat = stored\n"
                     "if tat < now then tat = now end\n"
                     "local nxt = tat + t\n"
                     "if now < nxt - bucket then return {0, stored} end\n"
                     "redis.call('SET', KEYS[1], string.format('%d', nxt), 'PX', string.format('%d', nxt - now))\n"
                     "return {1, stored}\n"},
    /* KEYS: tenant set. ARGV: now s, max, "pending:<token>", expiry s. */
    [SCRIPT_RESERVE] = {"redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])\n"
                        "local n = redis.call('ZCARD', KEYS[1])\n"
                        "if n < tonumber(ARGV[2]) then\n"
                        "  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])\n"
                        "  return {1, redis.call('ZCARD', KEYS[1])}\n"
                        "end\n"
                        "return {0, n}\n"},
    /* KEYS: a set (tenant's sessions, tenant's in-flight executions).
     * ARGV: the member ("pending:<token>", an execution's token). Gives
     * back a reservation or an execution slot: {removed, members left}. */
    [SCRIPT_ZREM] = {"local ok = redis.call('ZREM', KEYS[1], ARGV[1])\n"
                     "return {ok, redis.call('ZCARD', KEYS[1])}\n"},
    /* KEYS: tenant set, record, idle index, lifetime index, closed mark.
     * ARGV: "pending:<token>" or "", sid, tenant, lang, created_at,
     * last_used_at, idle_deadline, lifetime_deadline, executions, proxy
     * ("": none recorded). A session closed before its commit arrives (a
     * delete through another gateway) is not brought back: its reservation
     * is given back, {0, members left}. */
    [SCRIPT_COMMIT] = {"if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end\n"
                       "if redis.call('EXISTS', KEYS[5]) == 1 then return {0, redis.call('ZCARD', KEYS[1])} end\n"
                       "redis.call('ZADD', KEYS[1], ARGV[8], ARGV[2])\n"
                       "redis.call('DEL', KEYS[2])\n"
                       "redis.call('HSET', KEYS[2], 'tenant', ARGV[3], 'lang', ARGV[4], 'created_at', ARGV[5],\n"
                       "  'last_used_at', ARGV[6], 'idle_deadline', ARGV[7], 'lifetime_deadline', ARGV[8],\n"
                       "  'executions', ARGV[9])\n"
                       "if ARGV[10] and ARGV[10] ~= '' then redis.call('HSET', KEYS[2], 'proxy', ARGV[10]) end\n"
                       "redis.call('ZADD', KEYS[3], ARGV[7], ARGV[2])\n"
                       "redis.call('ZADD', KEYS[4], ARGV[8], ARGV[2])\n"
                       "return {1, redis.call('ZCARD', KEYS[1])}\n"},
    /* KEYS: record, idle index. ARGV: sid, now, idle timeout, executions to add.
     * Returns {ok, executions}. */
    [SCRIPT_TOUCH] = {"if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end\n"
                      "local dl = string.format('%d', tonumber(ARGV[2]) + tonumber(ARGV[3]))\n"
                      "redis.call('HSET', KEYS[1], 'last_used_at', ARGV[2], 'idle_deadline', dl)\n"
                      "local e = redis.call('HINCRBY', KEYS[1], 'executions', ARGV[4])\n"
                      "redis.call('ZADD', KEYS[2], dl, ARGV[1])\n"
                      "return {1, e}\n"},
    /* KEYS: idle index, record, tenant set, lifetime index, closed mark.
     * ARGV: sid, mark TTL s. Whoever removes anything wins (the script is
     * atomic, so of two callers exactly one does). The record's own tenant
     * set is cleaned too, should the caller have named another tenant. */
    [SCRIPT_REMOVE] = {"redis.call('SET', KEYS[5], '1', 'EX', ARGV[2])\n"
                       "local t = redis.call('HGET', KEYS[2], 'tenant')\n"
                       "local n = redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('DEL', KEYS[2])\n"
                       "  + redis.call('ZREM', KEYS[4], ARGV[1])\n"
                       "redis.call('ZREM', KEYS[3], ARGV[1])\n"
                       "if t then\n"
                       "  local tk = 'sg:tenant:' .. t .. ':sessions'\n"
                       "  if tk ~= KEYS[3] then redis.call('ZREM', tk, ARGV[1]) end\n"
                       "end\n"
                       "local ok = 0\n"
                       "if n > 0 then ok = 1 end\n"
                       "return {ok, redis.call('ZCARD', KEYS[3])}\n"},
    /* KEYS: tenant set, record, idle index, lifetime index, closed mark.
     * ARGV: sid, tenant, lang, created_at, last_used_at, idle_deadline,
     * lifetime_deadline, executions, proxy ("": none recorded). */
    [SCRIPT_RESTORE] = {"if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[5]) == 1 then\n"
                        "  return {0, redis.call('ZCARD', KEYS[1])}\n"
                        "end\n"
                        "redis.call('ZADD', KEYS[1], ARGV[7], ARGV[1])\n"
                        "redis.call('HSET', KEYS[2], 'tenant', ARGV[2], 'lang', ARGV[3], 'created_at', ARGV[4],\n"
                        "  'last_used_at', ARGV[5], 'idle_deadline', ARGV[6], 'lifetime_deadline', ARGV[7],\n"
                        "  'executions', ARGV[8])\n"
                        "if ARGV[9] and ARGV[9] ~= '' then redis.call('HSET', KEYS[2], 'proxy', ARGV[9]) end\n"
                        "redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])\n"
                        "redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])\n"
                        "return {1, redis.call('ZCARD', KEYS[1])}\n"},
    /* KEYS: idle index, lifetime index. ARGV: now s, limit.
     * Returns sid, reason, tenant triples; lifetime first. A session past
     * its idle deadline with an execution in flight (a live lease in its
     * tenant's in-flight set whose token names it, "<sid>/...") is not
     * idle: it is left out, its idle score moved a second on. */
    [SCRIPT_EXPIRED] =
        {"local out, seen, n = {}, {}, 0\n"
         "local lim = tonumber(ARGV[2])\n"
         "local function busy(id, t)\n"
         "  local p = id .. '/'\n"
         "  for _, m in ipairs(redis.call('ZRANGEBYSCORE', 'sg:tenant:' .. t .. ':execs', '(' .. ARGV[1],\n"
         "      '+inf')) do\n"
         "    if string.sub(m, 1, #p) == p then return true end\n"
         "  end\n"
         "  return false\n"
         "end\n"
         "for _, src in ipairs({{KEYS[2], 'lifetime'}, {KEYS[1], 'idle'}}) do\n"
         "  if n >= lim then break end\n"
         "  local ids = redis.call('ZRANGEBYSCORE', src[1], '-inf', ARGV[1], 'LIMIT', 0, lim)\n"
         "  for _, id in ipairs(ids) do\n"
         "    if n >= lim then break end\n"
         "    if not seen[id] then\n"
         "      seen[id] = true\n"
         "      local t = redis.call('HGET', 'sg:session:' .. id, 'tenant') or '0'\n"
         "      if src[2] == 'idle' and t ~= '0' and busy(id, t) then\n"
         "        redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + 1, id)\n"
         "      else\n"
         "        n = n + 1\n"
         "        out[#out + 1] = id\n"
         "        out[#out + 1] = src[2]\n"
         "        out[#out + 1] = t\n"
         "      end\n"
         "    end\n"
         "  end\n"
         "end\n"
         "return out\n"},
    /* KEYS: a tenant set, or the lifetime index for all sessions. ARGV: max.
     * Returns sid + the 7 record fields, per session. */
    [SCRIPT_LIST] = {"local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)\n"
                     "local out = {}\n"
                     "for _, id in ipairs(ids) do\n"
                     "  if string.sub(id, 1, 8) ~= 'pending:' then\n"
                     "    local h = redis.call('HMGET', 'sg:session:' .. id, 'tenant', 'lang', 'created_at',\n"
                     "      'last_used_at', 'idle_deadline', 'lifetime_deadline', 'executions')\n"
                     "    if h[1] then\n"
                     "      out[#out + 1] = id\n"
                     "      for i = 1, 7 do out[#out + 1] = h[i] or '' end\n"
                     "    end\n"
                     "  end\n"
                     "end\n"
                     "return out\n"},
    /* KEYS: tenant's in-flight set (or its MCP sessions). ARGV: now s, max (0: renew only), token, lease deadline s,
     * key slack s. Leases that ran out go first; a token already held is
     * renewed. The key lives until slack s after its last lease. */
    [SCRIPT_EXEC_ACQUIRE] = {SOLO_GUARD "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])\n"
                                        "local n = redis.call('ZCARD', KEYS[1])\n"
                                        "local held = redis.call('ZSCORE', KEYS[1], ARGV[3])\n"
                                        "if not held and n >= tonumber(ARGV[2]) then return {0, n} end\n"
                                        "redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])\n"
                                        "local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')\n"
                                        "local ttl = tonumber(last[2]) - tonumber(ARGV[1]) + tonumber(ARGV[5])\n"
                                        "if ttl < 1 then ttl = 1 end\n"
                                        "redis.call('EXPIRE', KEYS[1], math.floor(ttl))\n"
                                        "return {1, redis.call('ZCARD', KEYS[1])}\n"},
    /* KEYS: quota key. ARGV: max execs, max seconds.
     * Returns {status, execs, seconds as a string}. */
    [SCRIPT_QUOTA_RESERVE] = {SOLO_GUARD "if redis.call('EXISTS', KEYS[1]) == 0 then return {3, 0, '0'} end\n"
                                         "local e = tonumber(redis.call('HGET', KEYS[1], 'execs') or '0') or 0\n"
                                         "local s = redis.call('HGET', KEYS[1], 'seconds') or '0'\n"
                                         "if e >= tonumber(ARGV[1]) then return {1, e, s} end\n"
                                         "if (tonumber(s) or 0) >= tonumber(ARGV[2]) then return {2, e, s} end\n"
                                         "e = redis.call('HINCRBY', KEYS[1], 'execs', 1)\n"
                                         "return {0, e, s}\n"},
    /* KEYS: quota key. ARGV: execs, seconds, ttl s. ok = 1 if it seeded. */
    [SCRIPT_QUOTA_SEED] = {"local n = redis.call('HSETNX', KEYS[1], 'execs', ARGV[1])\n"
                           "  + redis.call('HSETNX', KEYS[1], 'seconds', ARGV[2])\n"
                           "if n == 0 then return {0, 0} end\n"
                           "redis.call('EXPIRE', KEYS[1], ARGV[3])\n"
                           "return {1, 0}\n"},
    /* KEYS: quota key. ARGV: seconds. Nothing when the day is not seeded. */
    [SCRIPT_QUOTA_ADD] = {"if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end\n"
                          "redis.call('HINCRBYFLOAT', KEYS[1], 'seconds', ARGV[1])\n"
                          "return {1, 0}\n"},
    /* SCRIPT_RATE, SCRIPT_EXEC_ACQUIRE and SCRIPT_QUOTA_RESERVE in one, each
     * step only past the one before (an execution's admission, one round
     * trip); a quota refusal gives the slot back.
     * KEYS: rate key, tenant's in-flight set, quota key.
     * ARGV: now ms, emission interval T ms (0: no rate), burst, now s, max
     * in flight, token, lease deadline s, key slack s, max execs, max seconds.
     * Returns {allowed, stored tat, slot, in flight, quota status, execs,
     * seconds as a string}. */
    [SCRIPT_EXEC_ADMIT] = {SOLO_GUARD RATE_STEP(
        "{0, stored, 0, 0, 0, 0, '0'}") "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])\n"
                                        "local n = redis.call('ZCARD', KEYS[2])\n"
                                        "local held = redis.call('ZSCORE', KEYS[2], ARGV[6])\n"
                                        "if not held and n >= tonumber(ARGV[5]) then return {1, stored, 0, n, 0, 0, "
                                        "'0'} end\n"
                                        "redis.call('ZADD', KEYS[2], ARGV[7], ARGV[6])\n"
                                        "local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')\n"
                                        "local ttl = tonumber(last[2]) - tonumber(ARGV[4]) + tonumber(ARGV[8])\n"
                                        "if ttl < 1 then ttl = 1 end\n"
                                        "redis.call('EXPIRE', KEYS[2], math.floor(ttl))\n"
                                        "n = redis.call('ZCARD', KEYS[2])\n"
                                        "if redis.call('EXISTS', KEYS[3]) == 0 then return {1, stored, 1, n, 3, 0, "
                                        "'0'} end\n"
                                        "local e = tonumber(redis.call('HGET', KEYS[3], 'execs') or '0') or 0\n"
                                        "local s = redis.call('HGET', KEYS[3], 'seconds') or '0'\n"
                                        "local q = 0\n"
                                        "if e >= tonumber(ARGV[9]) then q = 1\n"
                                        "elseif (tonumber(s) or 0) >= tonumber(ARGV[10]) then q = 2 end\n"
                                        "if q ~= 0 then\n"
                                        "  redis.call('ZREM', KEYS[2], ARGV[6])\n"
                                        "  return {1, stored, 1, redis.call('ZCARD', KEYS[2]), q, e, s}\n"
                                        "end\n"
                                        "e = redis.call('HINCRBY', KEYS[3], 'execs', 1)\n"
                                        "return {1, stored, 1, n, 0, e, s}\n"},
    /* SCRIPT_ZREM (the slot), SCRIPT_TOUCH and SCRIPT_QUOTA_ADD in one: an
     * execution's end. KEYS: tenant's in-flight set, session record, idle
     * index, quota key. ARGV: token, sid ("": none), now, idle timeout,
     * executions to add, seconds ("": none). */
    [SCRIPT_EXEC_FINISH] = {"redis.call('ZREM', KEYS[1], ARGV[1])\n"
                            "if ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 1 then\n"
                            "  local dl = string.format('%d', tonumber(ARGV[3]) + tonumber(ARGV[4]))\n"
                            "  redis.call('HSET', KEYS[2], 'last_used_at', ARGV[3], 'idle_deadline', dl)\n"
                            "  redis.call('HINCRBY', KEYS[2], 'executions', ARGV[5])\n"
                            "  redis.call('ZADD', KEYS[3], dl, ARGV[2])\n"
                            "end\n"
                            "if ARGV[6] ~= '' and redis.call('EXISTS', KEYS[4]) == 1 then\n"
                            "  redis.call('HINCRBYFLOAT', KEYS[4], 'seconds', ARGV[6])\n"
                            "end\n"
                            "return {1, 0}\n"},
    /* SCRIPT_RATE, then only past it SCRIPT_RESERVE: a session create's
     * admission. KEYS: rate key, tenant set. ARGV: now ms, emission
     * interval T ms (0: no rate), burst, now s, max, "pending:<token>",
     * expiry s. Returns {allowed, stored tat, reserved, count}. */
    [SCRIPT_SESSION_ADMIT] = {SOLO_GUARD RATE_STEP(
        "{0, stored, 0, 0}") "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])\n"
                             "local n = redis.call('ZCARD', KEYS[2])\n"
                             "if n < tonumber(ARGV[5]) then\n"
                             "  redis.call('ZADD', KEYS[2], ARGV[7], ARGV[6])\n"
                             "  return {1, stored, 1, redis.call('ZCARD', KEYS[2])}\n"
                             "end\n"
                             "return {1, stored, 0, n}\n"},
    /* The solo lease (redis.c). KEYS: the gateways' set, the solo key.
     * ARGV: this gateway's id, lease ms, 1 to ask for the lease. Every
     * gateway beats: it is in the set until lease ms after its last beat
     * (Redis's clock). A gateway alone in the set that asks gets or keeps
     * the lease; none other does. The holder is never dropped here: it
     * stops admitting from its copy first, then gives the lease back
     * (SCRIPT_SOLO_RELEASE), so that everything it admitted is in Redis
     * before anyone else admits. Returns {holds, gateways}. */
    [SCRIPT_SOLO_BEAT] = {"local t = redis.call('TIME')\n"
                          "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
                          "local ttl = tonumber(ARGV[2])\n"
                          "redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])\n"
                          "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
                          "redis.call('PEXPIRE', KEYS[1], ttl * 2)\n"
                          "local n = redis.call('ZCARD', KEYS[1])\n"
                          "local holder = redis.call('GET', KEYS[2])\n"
                          "if n == 1 and ARGV[3] == '1' and (not holder or holder == ARGV[1]) then\n"
                          "  redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)\n"
                          "  return {1, n}\n"
                          "end\n"
                          "return {0, n}\n"},
    /* KEYS: the solo key. ARGV: this gateway's id. Gives the lease back if
     * held. */
    [SCRIPT_SOLO_RELEASE] = {"if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end\n"
                             "return {1, 0}\n"},
    /* KEYS: rate key, tenant's in-flight set, quota key, tenant's sessions
     * set. What the solo holder copies (solo.h): {rate key or '0', quota
     * PTTL, execs, seconds, k, then k values of the in-flight set (member,
     * score, ...), then the sessions set's (member, score, ...)}. */
    [SCRIPT_SOLO_SEED] =
        {"local out = {redis.call('GET', KEYS[1]) or '0', redis.call('PTTL', KEYS[3]),\n"
         "  redis.call('HGET', KEYS[3], 'execs') or '0', redis.call('HGET', KEYS[3], 'seconds') or '0', 0}\n"
         "for _, v in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')) do out[#out + 1] = v end\n"
         "out[5] = #out - 5\n"
         "for _, v in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')) do out[#out + 1] = v end\n"
         "return out\n"},
    /* What the lease holder's copies decided over a few milliseconds, in
     * one call per tenant (redis_solo.c, "apply"): the sums of the
     * SCRIPT_EXEC_ADMIT calls it admitted or refused and of the
     * SCRIPT_EXEC_FINISH calls of their ends, in the state those calls
     * leave. KEYS: rate key, tenant's in-flight set, quota key (the
     * copy's day), idle index. ARGV: now s, the rate key's arrival time
     * ('': no rate step) and its PX, the slots taken and still held
     * ("until token ..."), the slots given back ("token ..."), executions
     * to add, seconds to add ('': none), the sessions touched ("sid now
     * deadline executions ..."), key slack s, this gateway's id. While
     * another gateway holds the lease only the ends apply (as
     * SCRIPT_EXEC_FINISH is not guarded) and the answer is {-1, 0, 0};
     * else {1, in flight, the day's executions (-1: no quota key)}. */
    [SCRIPT_SOLO_APPLY] = {"local solo = redis.call('GET', 'sg:solo')\n"
                           "local held = not solo or solo == ARGV[#ARGV]\n"
                           "local now = tonumber(ARGV[1])\n"
                           "if held then\n"
                           "  if ARGV[2] ~= '' then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end\n"
                           "  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
                           "end\n"
                           "local rem = {}\n"
                           "for tok in string.gmatch(ARGV[5], '%S+') do rem[#rem + 1] = tok end\n"
                           "if #rem > 0 then redis.call('ZREM', KEYS[2], unpack(rem)) end\n"
                           "local add = {}\n"
                           "for u, tok in string.gmatch(ARGV[4], '(%S+) (%S+)') do\n"
                           "  add[#add + 1] = u\n"
                           "  add[#add + 1] = tok\n"
                           "end\n"
                           "if held and #add > 0 then\n"
                           "  redis.call('ZADD', KEYS[2], unpack(add))\n"
                           "  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')\n"
                           "  local ttl = tonumber(last[2]) - now + tonumber(ARGV[9])\n"
                           "  if ttl < 1 then ttl = 1 end\n"
                           "  redis.call('EXPIRE', KEYS[2], math.floor(ttl))\n"
                           "end\n"
                           "local e = -1\n"
                           "if redis.call('EXISTS', KEYS[3]) == 1 then\n"
                           "  local k = tonumber(ARGV[6])\n"
                           "  if held and k > 0 then e = redis.call('HINCRBY', KEYS[3], 'execs', k)\n"
                           "  else e = tonumber(redis.call('HGET', KEYS[3], 'execs') or '0') or 0 end\n"
                           "  if ARGV[7] ~= '' then redis.call('HINCRBYFLOAT', KEYS[3], 'seconds', ARGV[7]) end\n"
                           "end\n"
                           "for sid, t, dl, n in string.gmatch(ARGV[8], '(%S+) (%S+) (%S+) (%S+)') do\n"
                           "  local key = 'sg:session:' .. sid\n"
                           "  if redis.call('EXISTS', key) == 1 then\n"
                           "    redis.call('HSET', key, 'last_used_at', t, 'idle_deadline', dl)\n"
                           "    redis.call('HINCRBY', key, 'executions', n)\n"
                           "    redis.call('ZADD', KEYS[4], dl, sid)\n"
                           "  end\n"
                           "end\n"
                           "if not held then return {-1, 0, 0} end\n"
                           "return {1, redis.call('ZCARD', KEYS[2]), e}\n"},
};

void sg_state__scripts_init(void)
{
    static int done;
    if (done)
        return;
    for (size_t i = 0; i < SCRIPT_COUNT; i++) {
        unsigned char md[SHA_DIGEST_LENGTH];
        assert(sg_state__scripts[i].src != NULL); /* every SCRIPT_* has its source above */
        SHA1((const unsigned char *)sg_state__scripts[i].src, strlen(sg_state__scripts[i].src), md);
        sg_hex(sg_state__scripts[i].sha, md, sizeof(md));
    }
    done = 1;
}
