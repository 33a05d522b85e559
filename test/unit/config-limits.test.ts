// The limits and timeouts flags fail start-up with one line naming the flag when
// their values are out of range or malformed.
import t from 'tap'
import { ConfigError, parseConfig, type Config } from '../../lib/config/config.ts'

const NS = { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: 'https://stargate-router.example.com:443' }

function configOf (argv: readonly string[]): Config {
  const result = parseConfig(argv, NS)
  if (result.kind !== 'config') throw new Error('expected a config')
  return result.config
}

function errorOf (argv: readonly string[]): { flag: string, message: string } | null {
  try {
    parseConfig(argv, NS)
    return null
  } catch (err) {
    if (err instanceof ConfigError) return { flag: err.flag, message: err.message }
    throw err
  }
}

t.test('--trusted-proxy-cidrs takes repeated and comma-separated blocks', async (t) => {
  t.strictSame(configOf(['--trusted-proxy-cidrs', '10.0.0.0/8, 192.0.2.1', '--trusted-proxy-cidrs', 'fd00::/8']).trustedProxyCidrs, ['10.0.0.0/8', '192.0.2.1', 'fd00::/8'])
})

t.test('an invalid block names the flag and the block', async (t) => {
  t.strictSame(errorOf(['--trusted-proxy-cidrs', '10.0.0.0/8,proxy.local']), {
    flag: 'trusted-proxy-cidrs',
    message: "invalid --trusted-proxy-cidrs: 'proxy.local' is not an IP address or CIDR block such as 10.0.0.0/8",
  })
})

t.test('per-pod connection and queue bounds are range-checked', async (t) => {
  t.strictSame(errorOf(['--http-upstream-max-connections', '0']), { flag: 'http-upstream-max-connections', message: 'invalid --http-upstream-max-connections 0: must be between 1 and 100000' })
  t.equal(configOf(['--http-upstream-max-queue', '0']).httpUpstreamMaxQueue, 0, 'no queue at all is allowed')
})

t.test('slow-client and native-heap limits are range-checked, and 0 turns each optional one off', async (t) => {
  t.strictSame(errorOf(['--http-body-buffer-bytes', String(16 * 1024 * 1024 + 1)]), { flag: 'http-body-buffer-bytes', message: 'invalid --http-body-buffer-bytes 16777217: must be between 0 and 16777216' })
  t.strictSame(errorOf(['--http-body-rate-window-ms', '99']), { flag: 'http-body-rate-window-ms', message: 'invalid --http-body-rate-window-ms 99: must be between 100 and 86400000' })
  t.strictSame(errorOf(['--http-upstream-max-client-share-percent', '101']), { flag: 'http-upstream-max-client-share-percent', message: 'invalid --http-upstream-max-client-share-percent 101: must be between 0 and 100' })
  t.strictSame(errorOf(['--http-body-min-bytes-per-second=-1']), { flag: 'http-body-min-bytes-per-second', message: "invalid --http-body-min-bytes-per-second '-1': expected a whole number" })
  t.strictSame(errorOf(['--http-body-deadline-ms', '1.5']), { flag: 'http-body-deadline-ms', message: "invalid --http-body-deadline-ms '1.5': expected a whole number" })
  t.strictSame(errorOf(['--http-response-stall-timeout-ms', '86400001']), { flag: 'http-response-stall-timeout-ms', message: 'invalid --http-response-stall-timeout-ms 86400001: must be between 0 and 86400000' })
  t.strictSame(errorOf(['--http-response-stall-timeout-ms', 'soon']), { flag: 'http-response-stall-timeout-ms', message: "invalid --http-response-stall-timeout-ms 'soon': expected a whole number" })
  t.strictSame(errorOf(['--native-heap-check-interval-ms', '99']), { flag: 'native-heap-check-interval-ms', message: 'invalid --native-heap-check-interval-ms 99: must be between 100 and 86400000' })
  t.strictSame(errorOf(['--native-heap-trim-threshold-bytes=-1']), { flag: 'native-heap-trim-threshold-bytes', message: "invalid --native-heap-trim-threshold-bytes '-1': expected a whole number" })
  t.strictSame(errorOf(['--native-heap-trim-threshold-bytes', String(2 ** 40 + 1)]), { flag: 'native-heap-trim-threshold-bytes', message: 'invalid --native-heap-trim-threshold-bytes 1099511627777: must be between 0 and 1099511627776' })
  t.equal(configOf(['--native-heap-trim-threshold-bytes', '0']).nativeHeapTrimThresholdBytes, 0, '0 turns the trim off')
  const off = configOf(['--http-body-buffer-bytes', '0', '--http-body-min-bytes-per-second', '0', '--http-body-deadline-ms', '0', '--http-upstream-max-client-share-percent', '0', '--http-response-stall-timeout-ms', '0'])
  t.strictSame([off.httpBodyBufferBytes, off.httpBodyMinBytesPerSecond, off.httpBodyDeadlineMs, off.httpUpstreamMaxClientSharePercent, off.httpResponseStallTimeoutMs], [0, 0, 0, 0, 0])
})

t.test('--upstream-tls without a trust bundle is a start-up error unless the system store is asked for', async (t) => {
  t.strictSame(errorOf(['--upstream-tls']), {
    flag: 'upstream-tls',
    message: 'invalid --upstream-tls: no trust bundle for Stargate certificates; set --upstream-tls-cert-path (or --tls-cert-path, whose certificate is then trusted), or --upstream-tls-system-ca to trust the system CA store',
  })
  t.equal(configOf(['--upstream-tls', '--upstream-tls-system-ca']).upstreamTlsSystemCa, true)
  t.equal(configOf(['--upstream-tls', '--upstream-tls-cert-path', '/ca/bundle.pem']).upstreamTlsCertPath, '/ca/bundle.pem')
  t.equal(configOf(['--upstream-tls', '--tls-cert-path', '/tls/tls.crt', '--tls-key-path', '/tls/tls.key']).upstreamTls, true, 'the router certificate is the trust, as before')
})
