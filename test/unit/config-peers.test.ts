// SPEC §10: peer discovery is opt-in and fails start-up when it could not work —
// without the router's own Service (or a peers file), or through the Service without POD_IP
// and POD_NAME, since the replica could not tell itself from its peers.
import t from 'tap'
import { parseConfig, ConfigError, type Config } from '../../lib/config/config.ts'

const NS = { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: 'https://stargate-router.example.com:443' }

function configOf (argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const result = parseConfig(argv, env)
  if (result.kind !== 'config') throw new Error(`expected a config, got ${result.kind}`)
  return result.config
}

function errorOf (argv: readonly string[], env: NodeJS.ProcessEnv): ConfigError {
  try {
    parseConfig(argv, env)
  } catch (err) {
    if (err instanceof ConfigError) return err
    throw err
  }
  throw new Error('expected a ConfigError')
}

t.test('enabling peer discovery without --peer-service or --peers-file fails start-up naming --peer-service', async (t) => {
  const err = errorOf(['--enable-peer-discovery'], { ...NS, POD_IP: '10.0.0.5' })
  t.equal(err.flag, 'peer-service')
  t.equal(err.message, "missing --peer-service: --enable-peer-discovery needs the router's own Service name (or --peers-file without Kubernetes)")
})

t.test('enabling peer discovery through the Service without POD_IP and POD_NAME fails start-up and names the downward API fields', async (t) => {
  const err = errorOf(['--enable-peer-discovery', '--peer-service', 'stargate-router'], NS)
  t.equal(err.flag, 'enable-peer-discovery')
  t.equal(err.message, 'invalid --enable-peer-discovery: set POD_IP or POD_NAME from the downward API (status.podIP, metadata.name) so the replica can exclude itself from its peers')
  t.notOk(err.message.includes('\n'), 'one line')
})

t.test('empty POD_IP and POD_NAME count as unset', async (t) => {
  const err = errorOf(['--enable-peer-discovery', '--peer-service', 'stargate-router'], { ...NS, POD_IP: '', POD_NAME: '' })
  t.equal(err.flag, 'enable-peer-discovery')
})

t.test('either POD_IP or POD_NAME alone is enough to enable peer discovery through the Service', async (t) => {
  const byIp = configOf(['--enable-peer-discovery', '--peer-service', 'stargate-router'], { ...NS, POD_IP: '10.0.0.5' })
  t.equal(byIp.podIp, '10.0.0.5')
  t.equal(byIp.podName, null)
  const byName = configOf(['--enable-peer-discovery', '--peer-service', 'stargate-router'], { ...NS, POD_NAME: 'stargate-router-0' })
  t.equal(byName.podIp, null)
  t.equal(byName.podName, 'stargate-router-0')
})

t.test('a peers file needs neither POD_IP nor POD_NAME', async (t) => {
  const config = configOf(['--enable-peer-discovery', '--peers-file', '/etc/peers.yaml'], NS)
  t.equal(config.enablePeerDiscovery, true)
  t.equal(config.peersFile, '/etc/peers.yaml')
})

t.test('giving both --peer-service and --peers-file fails start-up', async (t) => {
  const err = errorOf(['--enable-peer-discovery', '--peer-service', 'stargate-router', '--peers-file', '/etc/peers.yaml'], { ...NS, POD_IP: '10.0.0.5' })
  t.equal(err.flag, 'peers-file')
  t.equal(err.message, 'invalid --peers-file: give --peer-service or --peers-file, not both')
})

t.test('a peer service that is not a Service name fails start-up', async (t) => {
  const err = errorOf(['--enable-peer-discovery', '--peer-service', 'router,app=x'], { ...NS, POD_IP: '10.0.0.5' })
  t.equal(err.flag, 'peer-service')
  t.equal(err.message, "invalid --peer-service 'router,app=x': must be a Service name (a lower-case DNS label such as stargate-router)")
})

t.test('peer flags are not validated while peer discovery is off', async (t) => {
  const config = configOf(['--peer-service', 'Not_A_Name', '--peers-file', '/etc/peers.yaml'], NS)
  t.equal(config.enablePeerDiscovery, false)
})

t.test('the peer Service is looked up in the router\'s own namespace (POD_NAMESPACE), else the target namespace', async (t) => {
  const args = ['--enable-peer-discovery', '--peer-service', 'stargate-router', '--target-namespace', 'stargate', '--grpc-pylon-dial-addr', 'https://gw.example.com']
  t.equal(configOf(args, { POD_NAMESPACE: 'routers', POD_IP: '10.0.0.5' }).peerNamespace, 'routers')
  t.equal(configOf(args, { POD_IP: '10.0.0.5' }).peerNamespace, 'stargate')
})
