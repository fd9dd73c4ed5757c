/* scripts.c — the Redis store's Lua scripts: each operation is one script,
 * run atomically by the server, so the fencing token is checked and the
 * record changed with nothing in between.
 *
 * Every script gets KEYS[1] = the record ({P}:id:<id>, a hash), KEYS[2] =
 * the store's token counter ({P}:token), and ARGV[1] = now in ms, or ''
 * for the server's clock (TIME). Record fields: s state ('c' claimed, 'd'
 * confirmed), t token, l lease end (claimed), e retention end (confirmed),
 * f fingerprint, r stored result (only when not empty). A released record
 * is deleted: the counter, not the record, keeps tokens from coming back.
 * Tokens are compared as the decimal strings they are stored as, so a
 * forged token beyond 2^53 cannot round onto a real one.
 */
#include "backends/redis/idem_redis.h"

/* now: the caller's, or the server's (replicate_commands lets a script
 * that read TIME write on servers before 5.0; later ones always may). */
#define CLOCK                                                                                      \
    "local function clock()\n"                                                                     \
    "  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end\n"                                       \
    "  if redis.replicate_commands then redis.replicate_commands() end\n"                          \
    "  local t = redis.call('TIME')\n"                                                             \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                         \
    "end\n"

/* ARGV: now, lease_ms, retention_ms, fingerprint ('' none), result_cap.
 * {0, token, lease_until, takeover, forgotten}  CLAIMED
 * {1, has_result, result_len, result[1..cap]}   ALREADY_CONFIRMED
 * {2, lease_until}                              IN_PROGRESS
 * {3}                                           fingerprint mismatch */
static const char claim[] =
    CLOCK "local key = KEYS[1]\n"
          "local now = clock()\n"
          "local r = redis.call('HMGET', key, 's', 't', 'l', 'e', 'f')\n"
          "local fp = ARGV[4]\n"
          "local differ = fp ~= '' and r[5] and r[5] ~= fp\n"
          "local takeover, forgotten = 0, 0\n"
          "if r[1] == 'd' then\n"
          "  if tonumber(r[4]) > now then\n"
          "    if differ then return {3} end\n"
          "    local n = redis.call('HSTRLEN', key, 'r')\n"
          "    if n == 0 then return {1, 0, 0, ''} end\n"
          "    local cap = tonumber(ARGV[5])\n"
          "    local part = ''\n"
          "    if cap > 0 then\n"
          "      part = redis.call('HGET', key, 'r')\n"
          "      if n > cap then part = string.sub(part, 1, cap) end\n"
          "    end\n"
          "    return {1, 1, n, part}\n"
          "  end\n"
          /* Past its retention: forgotten, fingerprint and all. */
          "  redis.call('DEL', key)\n"
          "  forgotten = 1\n"
          "elseif r[1] == 'c' then\n"
          "  if differ then return {3} end\n"
          "  local l = tonumber(r[3])\n"
          "  if l > now then return {2, l} end\n"
          "  takeover = 1\n"
          "end\n"
          "local token = redis.call('INCR', KEYS[2])\n"
          "local lease = tonumber(ARGV[2])\n"
          "local until_ = now + lease\n"
          "if fp ~= '' then\n"
          "  redis.call('HSET', key, 's', 'c', 't', token, 'l', until_, 'f', fp)\n"
          "else\n"
          "  redis.call('HSET', key, 's', 'c', 't', token, 'l', until_)\n"
          "end\n"
          "redis.call('PEXPIRE', key, lease + tonumber(ARGV[3]))\n"
          "return {0, token, until_, takeover, forgotten}\n";

/* ARGV: now, token, retention_ms, result ('' none). 1 done, 0 stale. A
 * repeated confirm is fine while the confirmation is remembered. */
static const char confirm[] =
    CLOCK "local key = KEYS[1]\n"
          "local r = redis.call('HMGET', key, 's', 't', 'e')\n"
          "if r[2] ~= ARGV[2] then return 0 end\n"
          "local now = clock()\n"
          "if r[1] == 'd' and tonumber(r[3]) <= now then return 0 end\n"
          "if r[1] ~= 'c' and r[1] ~= 'd' then return 0 end\n"
          "local ret = tonumber(ARGV[3])\n"
          "redis.call('HDEL', key, 'l', 'r')\n"
          "if ARGV[4] ~= '' then\n"
          "  redis.call('HSET', key, 's', 'd', 'e', now + ret, 'r', ARGV[4])\n"
          "else\n"
          "  redis.call('HSET', key, 's', 'd', 'e', now + ret)\n"
          "end\n"
          "redis.call('PEXPIRE', key, ret)\n"
          "return 1\n";

/* ARGV: now, token. 1 released (the record goes), 0 stale. */
static const char release[] = "local r = redis.call('HMGET', KEYS[1], 's', 't')\n"
                              "if r[1] ~= 'c' or r[2] ~= ARGV[2] then return 0 end\n"
                              "redis.call('DEL', KEYS[1])\n"
                              "return 1\n";

/* ARGV: now, token, lease_ms, retention_ms. 1 renewed, 0 stale. */
static const char renew[] = CLOCK "local r = redis.call('HMGET', KEYS[1], 's', 't')\n"
                                  "if r[1] ~= 'c' or r[2] ~= ARGV[2] then return 0 end\n"
                                  "local lease = tonumber(ARGV[3])\n"
                                  "redis.call('HSET', KEYS[1], 'l', clock() + lease)\n"
                                  "redis.call('PEXPIRE', KEYS[1], lease + tonumber(ARGV[4]))\n"
                                  "return 1\n";

/* ARGV: now. 1 confirmed and remembered, 0 not. */
static const char is_confirmed[] = CLOCK "local r = redis.call('HMGET', KEYS[1], 's', 'e')\n"
                                         "if r[1] ~= 'd' then return 0 end\n"
                                         "if tonumber(r[2]) > clock() then return 1 end\n"
                                         "return 0\n";

/* ARGV: now, retention_ms. Deletes the record when purge would: a
 * confirmation past its retention, a claim whose lease ended a retention
 * ago. 1 deleted, 0 kept (or gone already). */
static const char purge[] =
    CLOCK "local r = redis.call('HMGET', KEYS[1], 's', 'l', 'e')\n"
          "local now = clock()\n"
          "if (r[1] == 'd' and tonumber(r[3]) <= now) or\n"
          "   (r[1] == 'c' and tonumber(r[2]) + tonumber(ARGV[2]) <= now) then\n"
          "  redis.call('DEL', KEYS[1])\n"
          "  return 1\n"
          "end\n"
          "return 0\n";

/* ARGV: now. {} when there is no record, else
 * {state, token, lease_end, retention_end, result_len, fingerprint_len, now}
 * (absent times as 0). */
static const char inspect[] =
    CLOCK "local r = redis.call('HMGET', KEYS[1], 's', 't', 'l', 'e')\n"
          "if not r[1] then return {} end\n"
          "return {r[1], r[2], tonumber(r[3] or '0'), tonumber(r[4] or '0'),\n"
          "        redis.call('HSTRLEN', KEYS[1], 'r'), redis.call('HSTRLEN', KEYS[1], 'f'),\n"
          "        clock()}\n";

const char *const acemq__redis_scripts[RS_COUNT] = {
    [RS_CLAIM] = claim,     [RS_CONFIRM] = confirm,           [RS_RELEASE] = release,
    [RS_RENEW] = renew,     [RS_IS_CONFIRMED] = is_confirmed, [RS_PURGE] = purge,
    [RS_INSPECT] = inspect,
};
