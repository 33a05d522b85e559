/* global process, console */
/**
 * npm's install step for the QUIC engine addon (lib/quic/native): checks that the Debian
 * development packages are there, then builds with npm's own node-gyp against the headers of
 * the Node.js on this machine (N-API only, so the one build loads in every Node >= 18).
 *
 * Without the packages this prints one line naming them and fails (never a compiler dump).
 * QUIC_SANITIZE=address builds with AddressSanitizer (docs/reliability.md says how to run it).
 *
 * Plain JavaScript on purpose: it runs under whatever `node` npm starts, before anything else.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'

const PACKAGES = 'libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev'
const MODULES = ['libngtcp2', 'libngtcp2_crypto_gnutls', 'gnutls']
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const dir = join(root, 'lib', 'quic', 'native')

function fail (line) {
  console.error(line)
  process.exit(1)
}

try {
  execFileSync('pkg-config', ['--exists', ...MODULES], { stdio: 'ignore' })
} catch {
  fail(`stargate-router: the QUIC engine needs the Debian packages ${PACKAGES} (and pkg-config): apt-get install pkg-config ${PACKAGES}`)
}

function nodeGyp () {
  if (process.env.npm_config_node_gyp !== undefined && existsSync(process.env.npm_config_node_gyp)) return process.env.npm_config_node_gyp
  const require = createRequire(import.meta.url)
  for (const from of [root, dirname(process.execPath), '/usr/lib/node_modules/npm', '/usr/share/nodejs/npm']) {
    try {
      return require.resolve('node-gyp/bin/node-gyp.js', { paths: [from, join(from, 'node_modules'), join(from, 'node_modules', 'npm')] })
    } catch {
      // next
    }
  }
  return null
}

const gyp = nodeGyp()
if (gyp === null) fail('stargate-router: node-gyp was not found (it comes with npm); run the install with npm')

const args = [gyp, 'rebuild', '--directory', dir, '--loglevel', 'warn']
// Offline machines: build against the local Node.js headers when npm has no nodedir of its own.
if (process.env.npm_config_nodedir === undefined && existsSync('/usr/include/node/node_api.h')) args.push('--nodedir=/usr')
const env = { ...process.env }
if (process.env.QUIC_SANITIZE === 'address') {
  env.QUIC_CFLAGS = '-fsanitize=address -fno-omit-frame-pointer -g -O1'
  env.QUIC_LDFLAGS = '-fsanitize=address'
}
const result = spawnSync(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], env })
if (result.status !== 0) fail('stargate-router: building the QUIC engine addon failed (see the compiler output above)')
