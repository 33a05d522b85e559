// Issue 5: stateless Retry tokens (RFC 9000 §8.1.2) bind the client's address and the
// original destination connection ID, and expire.
import t from 'tap'
import { RetryTokens } from '../../lib/quic/quiche/retry-token.ts'

t.test('a token validates for the address it was minted for, and only there and then', async (t) => {
  let now = 1_000_000
  const tokens = new RetryTokens({ lifetimeMs: 10_000, now: () => now })
  const odcid = Buffer.from('0011223344556677', 'hex')
  const token = tokens.mint(odcid, '127.0.0.1', 4433)
  t.same(tokens.validate(token, '127.0.0.1', 4433), odcid, 'same address: the original DCID')
  t.equal(tokens.validate(token, '127.0.0.2', 4433), null, 'another address')
  t.equal(tokens.validate(token, '127.0.0.1', 4434), null, 'another port')
  const tampered = Buffer.from(token)
  tampered[6] = (tampered[6] as number) ^ 1
  t.equal(tokens.validate(tampered, '127.0.0.1', 4433), null, 'tampered')
  t.equal(tokens.validate(token.subarray(0, 10), '127.0.0.1', 4433), null, 'truncated')
  t.equal(new RetryTokens().validate(token, '127.0.0.1', 4433), null, "another endpoint's key")
  now += 11_000
  t.equal(tokens.validate(token, '127.0.0.1', 4433), null, 'expired')
})
