/**
 * Several engines in one process, each with its own endpoints, connections and error handler.
 * Failure mode guarded: with one process-wide engine whose error handler was set by whoever
 * asked for it last, a router's failing tunnel handler was reported to a test fixture's handler
 * (or the other way round), and nothing said which connections a stopped component left open.
 * Here each engine hears only of its own connections' failures, and close() leaves no endpoint
 * or connection of that engine behind while another engine in the process keeps working.
 */
import t from 'tap'
import { QuicEngine } from '../../lib/quic/engine.ts'
import type { QuicConnection } from '../../lib/quic/connection.ts'
import { closed, engineTls, established } from '../fixtures/quic-engine.ts'
import { waitFor } from '../fixtures/wait.ts'

function engineWithErrors (): { engine: QuicEngine, errors: unknown[] } {
  const errors: unknown[] = []
  return { engine: new QuicEngine({ onHandlerError: (err) => { errors.push(err) } }), errors }
}

t.test('a failing handler is reported to the engine that owns the connection, which is closed', async (t) => {
  const tls = await engineTls(t)
  const server = engineWithErrors()
  const client = engineWithErrors()
  t.teardown(() => { server.engine.close(); client.engine.close() })
  const endpoint = server.engine.listen({
    host: '127.0.155.1',
    port: 0,
    onProposal: (proposal) => {
      const conn = proposal.accept({ credentials: tls.serverCredentials, alpn: proposal.alpn })
      conn?.once('established', () => { throw new Error('the server side failed') })
    },
  })
  const conn = client.engine.connect({ address: '127.0.155.1', port: endpoint.port, serverName: 'pod.stargate.test', alpn: [], credentials: tls.clientCredentials })
  await established(conn)
  const info = await closed(conn)
  t.equal(info.kind, 'peer', 'the client leg is closed by its peer')
  t.equal(info.code, 0x1, 'with INTERNAL_ERROR')
  t.equal(server.errors.length, 1, 'the server engine heard of its handler\'s failure')
  t.match(String(server.errors[0]), /the server side failed/)
  t.same(client.errors, [], 'the client engine heard nothing')

  const again = client.engine.connect({ address: '127.0.155.1', port: endpoint.port, serverName: 'pod.stargate.test', alpn: [], credentials: tls.clientCredentials })
  again.once('established', () => { throw new Error('the client side failed') })
  await closed(again)
  t.equal(client.errors.length, 1, 'now the client engine hears of its own')
  t.match(String(client.errors[0]), /the client side failed/)
})

t.test('close() ends every endpoint and connection of that engine only', async (t) => {
  const tls = await engineTls(t)
  const stopped = new QuicEngine()
  const running = new QuicEngine()
  t.teardown(() => { stopped.close(); running.close() })
  // The addon counts sockets process-wide: the connections the test above closed keep theirs
  // through their closing period (RFC 9000 §10.2), so start from none, or their release later
  // would read as this engine's.
  await waitFor(() => running.counters().endpoints === 0, { timeoutMs: 15_000, message: 'the sockets of the test above released' })
  const accepted: Array<QuicConnection | null> = []
  const endpoint = stopped.listen({
    host: '127.0.155.2',
    port: 0,
    onProposal: (proposal) => { accepted.push(proposal.accept({ credentials: tls.serverCredentials, alpn: proposal.alpn })) },
  })
  const outward = stopped.connect({ address: '127.0.155.2', port: endpoint.port, serverName: 'pod.stargate.test', alpn: [], credentials: tls.clientCredentials })
  const survivor = running.listen({ host: '127.0.155.3', port: 0, onProposal: (proposal) => { proposal.accept({ credentials: tls.serverCredentials, alpn: proposal.alpn }) } })
  const kept = running.connect({ address: '127.0.155.3', port: survivor.port, serverName: 'pod.stargate.test', alpn: [], credentials: tls.clientCredentials })
  await established(outward)
  await established(kept)
  t.equal(stopped.endpointCount, 1)
  t.equal(stopped.connectionCount, 2, 'the dial and the connection it accepted')
  // The addon counts sockets: each engine here has a listening one and a dial's own.
  const live = running.counters().endpoints

  stopped.close()
  t.equal(stopped.endpointCount, 0, 'no endpoint left')
  t.ok(stopped.closed)
  t.throws(() => stopped.listen({ host: '127.0.155.2', port: 0, onProposal: () => {} }), /closed/, 'a closed engine takes nothing more')
  await closed(outward)
  await waitFor(() => stopped.connectionCount === 0, { timeoutMs: 15_000, message: 'the stopped engine\'s connections gone' })
  t.equal(running.endpointCount, 1, 'the other engine keeps its endpoint')
  t.notOk(kept.closed, 'and its connection')
  await waitFor(() => running.counters().endpoints === live - 2, { timeoutMs: 15_000, message: 'the addon freed the stopped engine\'s two sockets once their connections ended' })
  t.equal(running.counters().endpoints, live - 2, 'the other engine\'s two sockets remain')
})
