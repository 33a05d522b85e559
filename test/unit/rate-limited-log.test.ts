/**
 * Issue 15 (and 14): events a peer can cause at will are logged at most once per key per
 * interval, and the next line says how many were left out.
 */
import t from 'tap'
import { RateLimitedLog } from '../../lib/rate-limited-log.ts'

t.test('one line per key per interval, then the count of what was suppressed', async (t) => {
  let now = 0
  const log = new RateLimitedLog(60_000, () => now)
  t.equal(log.take('unknown_sni'), 0, 'the first event is logged')
  t.equal(log.take('unknown_sni'), null, 'the second, a moment later, is not')
  t.equal(log.take('timeout'), 0, 'another key has its own budget')
  now = 30_000
  t.equal(log.take('unknown_sni'), null)
  now = 60_000
  t.equal(log.take('unknown_sni'), 2, 'a minute later: logged, saying two were left out')
  t.equal(log.take('unknown_sni'), null)
})
