// SPEC §10, replica balancing: --rebalance is opt-in and needs peer discovery (it reads the
// peers' load; without peers it could never move anything, so that is a start-up error naming
// the flag and the fix). The tolerance is a fraction strictly between 0 and 1; a round reads
// every peer within one interval, so the interval must be longer than the peer read timeout.
import t from 'tap'
import { parseConfig, ConfigError, type Config } from '../../lib/config/config.ts'

const ENV = { POD_NAMESPACE: 'stargate', STARGATE_GRPC_PYLON_DIAL_ADDR: 'https://stargate-router.example.com:443' }
const PEERS = ['--enable-peer-discovery', '--peers-file', '/etc/peers.yaml']

function configOf (argv: readonly string[], env: NodeJS.ProcessEnv = ENV): Config {
  const result = parseConfig(argv, env)
  if (result.kind !== 'config') throw new Error(`expected a config, got ${result.kind}`)
  return result.config
}

function errorOf (argv: readonly string[], env: NodeJS.ProcessEnv = ENV): ConfigError {
  try {
    parseConfig(argv, env)
  } catch (err) {
    if (err instanceof ConfigError) return err
    throw err
  }
  throw new Error('expected a ConfigError')
}

t.test('balancing is off by default, with a tolerance of 0.2, a 5 s interval and the automatic cap', async (t) => {
  const config = configOf([])
  t.strictSame([config.rebalance, config.rebalanceTolerance, config.rebalanceIntervalMs, config.rebalanceMaxMovesPerInterval], [false, 0.2, 5000, 0])
})

t.test('--rebalance with peer discovery starts, and every setting is read from flags or the environment', async (t) => {
  const config = configOf([...PEERS, '--rebalance', '--rebalance-tolerance', '0.35', '--rebalance-interval-ms', '2500', '--rebalance-max-moves-per-interval', '7'])
  t.strictSame([config.rebalance, config.rebalanceTolerance, config.rebalanceIntervalMs, config.rebalanceMaxMovesPerInterval], [true, 0.35, 2500, 7])
  const fromEnv = configOf(PEERS, { ...ENV, STARGATE_REBALANCE: 'true', STARGATE_REBALANCE_TOLERANCE: '.5', STARGATE_REBALANCE_INTERVAL_MS: '3000', STARGATE_REBALANCE_MAX_MOVES_PER_INTERVAL: '2' })
  t.strictSame([fromEnv.rebalance, fromEnv.rebalanceTolerance, fromEnv.rebalanceIntervalMs, fromEnv.rebalanceMaxMovesPerInterval], [true, 0.5, 3000, 2])
})

t.test('--rebalance without --enable-peer-discovery fails start-up with one line naming the flag and the fix', async (t) => {
  const err = errorOf(['--rebalance'])
  t.equal(err.flag, 'rebalance')
  t.equal(err.exitCode, 1)
  t.equal(err.message, "invalid --rebalance: balancing reads the peers' load; also set --enable-peer-discovery (with --peer-service, or --peers-file without Kubernetes)")
})

t.test('the tuning flags without --rebalance are accepted and change nothing', async (t) => {
  const config = configOf(['--rebalance-tolerance', '0.1', '--rebalance-interval-ms', '100'])
  t.equal(config.rebalance, false)
})

const TOLERANCES: ReadonlyArray<readonly [string, 1 | 2, string]> = [
  ['0', 1, 'invalid --rebalance-tolerance 0: must be above 0 and below 1, e.g. 0.2'],
  ['1', 1, 'invalid --rebalance-tolerance 1: must be above 0 and below 1, e.g. 0.2'],
  ['1.5', 1, 'invalid --rebalance-tolerance 1.5: must be above 0 and below 1, e.g. 0.2'],
  ['0.0', 1, 'invalid --rebalance-tolerance 0.0: must be above 0 and below 1, e.g. 0.2'],
  ['-0.2', 2, "invalid --rebalance-tolerance '-0.2': expected a number such as 0.2"],
  ['20%', 2, "invalid --rebalance-tolerance '20%': expected a number such as 0.2"],
  ['1e-1', 2, "invalid --rebalance-tolerance '1e-1': expected a number such as 0.2"],
  ['0x1', 2, "invalid --rebalance-tolerance '0x1': expected a number such as 0.2"],
  ['0.2.1', 2, "invalid --rebalance-tolerance '0.2.1': expected a number such as 0.2"],
  ['NaN', 2, "invalid --rebalance-tolerance 'NaN': expected a number such as 0.2"],
]

t.test('a tolerance that is not a fraction strictly between 0 and 1 fails start-up naming the flag', async (t) => {
  for (const [value, exit, message] of TOLERANCES) {
    const err = errorOf([...PEERS, '--rebalance', `--rebalance-tolerance=${value}`])
    t.equal(err.flag, 'rebalance-tolerance', value)
    t.equal(err.exitCode, exit, `${value}: exit ${exit}`)
    t.equal(err.message, message)
  }
  t.equal(configOf([...PEERS, '--rebalance-tolerance', '.05']).rebalanceTolerance, 0.05, 'a leading point is a number')
  t.equal(configOf([...PEERS, '--rebalance-tolerance', '0.99']).rebalanceTolerance, 0.99)
})

t.test('an interval under 100 ms, or not longer than the peer read timeout, fails start-up', async (t) => {
  t.equal(errorOf([...PEERS, '--rebalance', '--rebalance-interval-ms', '50']).message, 'invalid --rebalance-interval-ms 50: must be between 100 and 86400000')
  const err = errorOf([...PEERS, '--rebalance', '--rebalance-interval-ms', '2000'])
  t.equal(err.flag, 'rebalance-interval-ms')
  t.equal(err.message, 'invalid --rebalance-interval-ms 2000: must be longer than --peer-check-timeout-ms 2000 (every peer\'s load is read within one interval)')
  t.equal(configOf([...PEERS, '--rebalance', '--rebalance-interval-ms', '600', '--peer-check-timeout-ms', '500']).rebalanceIntervalMs, 600)
})

t.test('a malformed or out-of-range cap fails start-up naming the flag', async (t) => {
  t.equal(errorOf(['--rebalance-max-moves-per-interval', 'ten']).message, "invalid --rebalance-max-moves-per-interval 'ten': expected a whole number")
  t.equal(errorOf(['--rebalance-max-moves-per-interval', '1000001']).message, 'invalid --rebalance-max-moves-per-interval 1000001: must be between 0 and 1000000')
})
