// Issue 5, SPEC §7: the router accepts the ALPN the client offers and forwards it upstream,
// so it reads the SNI and ALPN list from the client's first Initial (RFC 9001 §5.2 keys)
// before quiche accepts the connection.
import t from 'tap'
import { buildClientConfig } from '../../lib/quic/quiche/config.ts'
import { parseClientHello, readClientHello } from '../../lib/quic/quiche/client-hello.ts'
import { firstInitial } from '../fixtures/quic-raw.ts'

t.test('SNI and ALPN list are read from a real first Initial', async (t) => {
  const cases: Array<[string | null, string[]]> = [
    ['stargate-0.stargate.external', ['stargate-tunnel']],
    ['stargate-7d9f8b6c4-x2x7q.stargate.external', ['h3', 'h3-29', 'hq-interop']],
    [null, ['h3']],
  ]
  for (const [sni, alpn] of cases) {
    const config = buildClientConfig({ idleTimeoutMs: 1000, caPem: null, verifyPeer: false, alpn })
    t.same(readClientHello(firstInitial(sni, config)), { serverName: sni, alpn }, `${sni ?? 'no SNI'} offering ${alpn.join(',')}`)
  }
})

t.test('a datagram that is not a readable Initial gives no ClientHello', async (t) => {
  const initial = firstInitial('stargate-0.stargate.external')
  const corrupt = Buffer.from(initial)
  corrupt[200] = (corrupt[200] as number) ^ 0xff
  t.equal(readClientHello(corrupt), null, 'payload does not authenticate')
  t.equal(readClientHello(initial.subarray(0, 100)), null, 'truncated')
  t.equal(readClientHello(Buffer.alloc(1200)), null, 'zeros')
})

t.test('a truncated or foreign TLS message parses as nothing', async (t) => {
  t.equal(parseClientHello(Buffer.from([0x02, 0, 0, 4, 1, 2, 3, 4])), null, 'ServerHello')
  t.equal(parseClientHello(Buffer.from([0x01, 0, 1, 0, 3, 3])), null, 'shorter than its length')
})
