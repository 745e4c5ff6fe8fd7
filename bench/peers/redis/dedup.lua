-- The dedup protocol as one Redis script (EVALSHA), the peer dedupd is
-- measured against. Unlike the usual GET-then-SET pattern it is atomic, fenced
-- and leased, so it answers like dedupd:
--   KEYS[1] the record (a hash), KEYS[2] the node-wide fence counter (fences
--   must rise even after a record expired, so they cannot live in the record).
--   ARGV[1] = 'begin',    ARGV[2] args_hash, ARGV[3] owner, ARGV[4] lease_ms, ARGV[5] ttl_ms
--   ARGV[1] = 'complete', ARGV[2] fence, ARGV[3] outcome, ARGV[4] result, ARGV[5] ttl_ms
--   ARGV[1] = 'release',  ARGV[2] fence
-- Begin answers {status, fence[, extra]}: 1 STARTED (extra 1 = takeover),
-- 2 IN_USE (extra = retry_after_ms), 3 CONFLICT, 4 DUPLICATE (extra = result).
-- Complete/Release answer {status, fence}: 1 OK, 2 STALE_FENCE, 3 NOT_FOUND,
-- 4 ALREADY_COMPLETED.
-- Time is the server's (TIME; scripts replicate by effects since Redis 5).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = KEYS[1]
local op = ARGV[1]

if op == 'begin' then
  local args, owner = ARGV[2], ARGV[3]
  local lease_ms, ttl_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
  local r = redis.call('HMGET', rec, 'st', 'fence', 'args', 'owner', 'lease', 'result')
  local takeover = 0
  if r[1] then
    local fence = tonumber(r[2])
    if r[3] ~= args then return {3, fence} end
    if r[1] == '2' then return {4, fence, r[6]} end
    local lease = tonumber(r[5])
    if lease > now then
      if owner ~= '' and r[4] == owner then return {1, fence, 0} end
      return {2, fence, lease - now}
    end
    takeover = 1
  end
  local fence = redis.call('INCR', KEYS[2])
  local lease = now + lease_ms
  redis.call('HSET', rec, 'st', '1', 'fence', fence, 'args', args,
             'owner', owner, 'lease', lease, 'created', now)
  -- Never expire before the lease ends.
  redis.call('PEXPIRE', rec, math.max(ttl_ms, lease_ms))
  return {1, fence, takeover}
end

local r = redis.call('HMGET', rec, 'st', 'fence', 'outcome', 'result')
if not r[1] then return {3, 0} end
local fence = tonumber(r[2])
if fence ~= tonumber(ARGV[2]) then return {2, fence} end

if op == 'complete' then
  if r[1] == '2' then
    if r[3] == ARGV[3] and r[4] == ARGV[4] then return {1, fence} end
    return {4, fence}
  end
  redis.call('HSET', rec, 'st', '2', 'outcome', ARGV[3], 'result', ARGV[4],
             'completed', now)
  redis.call('PEXPIRE', rec, tonumber(ARGV[5]))
  return {1, fence}
elseif op == 'release' then
  if r[1] == '2' then return {4, fence} end
  redis.call('DEL', rec)
  return {1, fence}
end
return redis.error_reply('unknown op ' .. tostring(op))
