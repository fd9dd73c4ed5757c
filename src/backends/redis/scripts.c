/* scripts.c — the Redis store's Lua scripts: each operation is one script,
 * run atomically by the server, so the fencing token is checked and the
 * record changed with nothing in between.
 *
 * Every script gets ARGV[1] = now in ms, or '' for the server's clock
 * (TIME). The claim script gets the records it claims ({P}:id:<id>, a
 * string each) and then the store's token counter ({P}:token) as KEYS,
 * the confirm_many script the records it confirms; the others get
 * KEYS[1] = one record and KEYS[2] = the counter. A record
 * is one string, five MessagePack values (cmsgpack, built into Redis's
 * Lua): s state ('c' claimed, 'd' confirmed), t token (decimal text), x
 * the lease end (claimed) or the retention end (confirmed; KEPT on the
 * server's clock), f fingerprint, r stored result ('' for none), written
 * with SET ... PX so that its expiry comes in the same call: a new id's
 * claim is one SET ... NX GET, with one INCRBY of the counter per run, and
 * a confirm is GET and SET. A released record is deleted: the counter, not
 * the record, keeps tokens from coming back.
 * Tokens are compared as the decimal strings they are stored as, so a
 * forged token beyond 2^53 cannot round onto a real one.
 */
#include "backends/redis/idem_redis.h"

/* now: the caller's, or the server's. */
#define CLOCK                                                                                      \
    "local function clock()\n"                                                                     \
    "  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end\n"                                       \
    "  local t = redis.call('TIME')\n"                                                             \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                         \
    "end\n"

/* A record: s, t, x, f, r = cmsgpack.unpack(value), or nil. */
#define LOAD                                                                                       \
    "local function load(key)\n"                                                                   \
    "  local v = redis.call('GET', key)\n"                                                         \
    "  if not v then return nil end\n"                                                             \
    "  return cmsgpack.unpack(v)\n"                                                                \
    "end\n"

/* The retention end of a confirmation made on the server's clock: its
 * key's expiry is its retention (Redis expires it on the same clock), so
 * the record needs no time of its own, and the confirm reads no clock. The
 * largest integer a Lua number holds exactly: any reader, this library's
 * earlier versions included, finds it later than now, so a confirmation
 * that exists is remembered. */
#define KEPT "9007199254740991"

/* KEYS: the records to claim, in order, then the token counter.
 * ARGV: now, retention_ms, then per record lease_ms, fingerprint ('' none),
 * result_cap. The records are claimed one after the other, so a record
 * named twice finds its own earlier claim. The answers follow one another
 * in one flat array, per record one of
 *   0, token, lease_until, takeover, forgotten   CLAIMED
 *   1, has_result, result_len, result[1..cap]    ALREADY_CONFIRMED
 *   2, lease_until                               IN_PROGRESS
 *   3                                            fingerprint mismatch
 * The run takes one token per record from the counter first (one INCRBY),
 * record i the i-th of them, so every token comes from the counter once
 * and tokens grow in the records' order; a record that is not claimed
 * leaves its token unused. A new id, the common case, is then one SET
 * ... NX GET: it writes the claim where there is no record and hands back
 * the record where there is one, which is then decided, and overwritten
 * with the claim when it is taken over or forgotten. */
static const char claim[] = CLOCK
    "local n = #KEYS - 1\n"
    "local now = clock()\n"
    "local ret = tonumber(ARGV[2])\n"
    "local first = redis.call('INCRBY', KEYS[n + 1], n) - n + 1\n"
    "local out, o = {}, 0\n"
    "local function put(v)\n"
    "  o = o + 1\n"
    "  out[o] = v\n"
    "end\n"
    "local function claim_one(key, token, lease, fp, cap)\n"
    "  local until_ = now + lease\n"
    "  local t = string.format('%d', token)\n"
    "  local v = redis.call('SET', key, cmsgpack.pack('c', t, until_, fp, ''), 'NX', 'GET',"
    " 'PX', lease + ret)\n"
    "  local takeover, forgotten = 0, 0\n"
    "  if v then\n"
    "    local s, _, x, f, r = cmsgpack.unpack(v)\n"
    "    local differ = fp ~= '' and f ~= '' and f ~= fp\n"
    "    if s == 'd' then\n"
    "      if x > now then\n"
    "        if differ then return put(3) end\n"
    "        local len = string.len(r)\n"
    "        put(1)\n"
    "        put(len > 0 and 1 or 0)\n"
    "        put(len)\n"
    "        return put(cap > 0 and string.sub(r, 1, cap) or '')\n"
    "      end\n"
    /* Past its retention: forgotten, fingerprint and all. */
    "      forgotten = 1\n"
    "    else\n"
    "      if differ then return put(3) end\n"
    "      if x > now then\n"
    "        put(2)\n"
    "        return put(x)\n"
    "      end\n"
    "      takeover = 1\n"
    "      if fp == '' then fp = f end\n"
    "    end\n"
    "    redis.call('SET', key, cmsgpack.pack('c', t, until_, fp, ''), 'PX', lease + ret)\n"
    "  end\n"
    "  put(0)\n"
    "  put(token)\n"
    "  put(until_)\n"
    "  put(takeover)\n"
    "  put(forgotten)\n"
    "end\n"
    "for i = 1, n do\n"
    "  local a = 3 * i\n"
    "  claim_one(KEYS[i], first + i - 1, tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2]))\n"
    "end\n"
    "return out\n";

/* ARGV: now, token, retention_ms, result ('' none). 1 done, 0 stale. A
 * repeated confirm is fine while the confirmation is remembered: on the
 * server's clock, while its key exists (see KEPT). */
static const char confirm[] =
    LOAD "local s, t, x, f = load(KEYS[1])\n"
         "if t ~= ARGV[2] then return 0 end\n"
         "local ret = tonumber(ARGV[3])\n"
         "local until_ = " KEPT "\n"
         "if ARGV[1] ~= '' then\n"
         "  local now = tonumber(ARGV[1])\n"
         "  if s == 'd' and x <= now then return 0 end\n"
         "  until_ = now + ret\n"
         "end\n"
         "redis.call('SET', KEYS[1], cmsgpack.pack('d', t, until_, f, ARGV[4]), 'PX', ret)\n"
         "return 1\n";

/* KEYS: the records to confirm, in order (no counter: a confirm takes no
 * token). ARGV: now, retention_ms, then per record token and result (''
 * none). The answer is one flat array, per record 1 (done) or 0 (stale),
 * each what the confirm script would answer, run once per record in
 * order. A confirm keeps the record's token and leaves a confirmation
 * that the same token confirms again, so each answer follows from the
 * record as the script found it, and a record named twice keeps the last
 * result. Every record is read and decided before any is written: a read
 * that fails (a key of another type) leaves them all as they were. */
static const char confirm_many[] =
    LOAD "local now = ARGV[1] ~= '' and tonumber(ARGV[1]) or nil\n"
         "local ret = tonumber(ARGV[2])\n"
         "local until_ = now and now + ret or " KEPT "\n"
         "local out, fps = {}, {}\n"
         "for i = 1, #KEYS do\n"
         "  local s, t, x, f = load(KEYS[i])\n"
         "  local ok = t == ARGV[2 * i + 1] and not (now and s == 'd' and x <= now)\n"
         "  out[i] = ok and 1 or 0\n"
         "  fps[i] = f\n"
         "end\n"
         "for i = 1, #KEYS do\n"
         "  if out[i] == 1 then\n"
         "    redis.call('SET', KEYS[i], cmsgpack.pack('d', ARGV[2 * i + 1], until_, fps[i],"
         " ARGV[2 * i + 2]), 'PX', ret)\n"
         "  end\n"
         "end\n"
         "return out\n";

/* ARGV: now, token. 1 released (the record goes), 0 stale. */
static const char release[] = LOAD "local s, t = load(KEYS[1])\n"
                                   "if s ~= 'c' or t ~= ARGV[2] then return 0 end\n"
                                   "redis.call('DEL', KEYS[1])\n"
                                   "return 1\n";

/* ARGV: now, token, lease_ms, retention_ms. 1 renewed, 0 stale. */
static const char renew[] =
    CLOCK LOAD "local s, t, x, f, r = load(KEYS[1])\n"
               "if s ~= 'c' or t ~= ARGV[2] then return 0 end\n"
               "local lease = tonumber(ARGV[3])\n"
               "redis.call('SET', KEYS[1], cmsgpack.pack(s, t, clock() + lease, f, r), 'PX',"
               " lease + tonumber(ARGV[4]))\n"
               "return 1\n";

/* ARGV: now. 1 confirmed and remembered, 0 not. */
static const char is_confirmed[] =
    CLOCK LOAD "local s, t, x = load(KEYS[1])\n"
               "if s == 'd' and (x == " KEPT " or x > clock()) then return 1 end\n"
               "return 0\n";

/* ARGV: now, retention_ms. Deletes the record when purge would: a
 * confirmation past its retention, a claim whose lease ended a retention
 * ago. 1 deleted, 0 kept (or gone already). */
static const char purge[] =
    CLOCK LOAD "local s, t, x = load(KEYS[1])\n"
               "if not s then return 0 end\n"
               "local now = clock()\n"
               "if (s == 'd' and x <= now) or (s == 'c' and x + tonumber(ARGV[2]) <= now) then\n"
               "  redis.call('DEL', KEYS[1])\n"
               "  return 1\n"
               "end\n"
               "return 0\n";

/* ARGV: now. {} when there is no record, else
 * {state, token, lease_end, retention_end, result_len, fingerprint_len, now}
 * (absent times as 0). A confirmation made on the server's clock ends
 * its retention when its key expires. */
static const char inspect[] = CLOCK LOAD "local s, t, x, f, r = load(KEYS[1])\n"
                                         "if not s then return {} end\n"
                                         "local now = clock()\n"
                                         "local l, e = 0, x\n"
                                         "if s == 'c' then\n"
                                         "  l, e = x, 0\n"
                                         "elseif x == " KEPT " then\n"
                                         "  e = now + redis.call('PTTL', KEYS[1])\n"
                                         "end\n"
                                         "return {s, t, l, e, string.len(r), string.len(f), now}\n";

const char *const acemq__redis_scripts[RS_COUNT] = {
    [RS_CLAIM] = claim,     [RS_CONFIRM] = confirm,           [RS_RELEASE] = release,
    [RS_RENEW] = renew,     [RS_IS_CONFIRMED] = is_confirmed, [RS_PURGE] = purge,
    [RS_INSPECT] = inspect, [RS_CONFIRM_MANY] = confirm_many,
};
