/**
 * Process entry point: flags/env -> config -> startRouter, signals and exit codes.
 * Exit 2 with one line on invalid configuration; 0 after a graceful shutdown; a second
 * SIGTERM/SIGINT exits at once with 1.
 */
import { ConfigError, parseConfig } from '../lib/config/config.ts'
import { createLogger } from '../lib/log.ts'

function fail (message: string): never {
  process.stderr.write(`stargate-router: ${message}\n`)
  process.exit(2)
}

async function main (): Promise<void> {
  let parsed
  try {
    parsed = parseConfig(process.argv.slice(2), process.env)
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message)
    throw err
  }
  if (parsed.kind === 'help') {
    process.stdout.write(parsed.text)
    return
  }
  const config = parsed.config
  // Loaded only now: the Kubernetes client and the server stack take about a second of CPU
  // to import, which --help and configuration errors should not pay.
  const { loadKubeConfig } = await import('../lib/discovery/kube-config.ts')
  const { startRouter } = await import('./router.ts')
  let kubeConfig
  // Peer discovery through --peer-service watches the API server even with --discovery file.
  if (config.discovery === 'kubernetes' || (config.enablePeerDiscovery && config.peerService !== null)) {
    const loaded = loadKubeConfig(process.env)
    if (!loaded.ok) fail(loaded.message)
    kubeConfig = loaded.kubeConfig
  }
  const logger = createLogger({ level: config.logLevel, format: config.logFormat })
  let router
  try {
    router = await startRouter(config, { logger, ...(kubeConfig === undefined ? {} : { kubeConfig }) })
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    const message = e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL'
      ? `cannot listen: ${e.message}; choose another address with --listen-addr / --health-listen-addr`
      : `start-up failed: ${e.message}`
    logger.fatal({ err: e.message }, message)
    logger.flush()
    fail(message)
  }
  let signals = 0
  const onSignal = (signal: NodeJS.Signals): void => {
    signals++
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: exiting at once')
      logger.flush()
      process.exit(1)
    }
    logger.info({ signal }, 'signal received')
    router.shutdown().then(() => {
      logger.flush()
      process.exit(0)
    }, (err: unknown) => {
      logger.error({ err }, 'shutdown failed')
      logger.flush()
      process.exit(1)
    })
  }
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
}

await main()
